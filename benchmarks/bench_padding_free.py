"""Padding-free batches on the real length distributions of the bundled corpora, against padding.

For each corpus (Chinese sentiment reviews, Rotten Tomatoes snippets, statute chapters, MSRA NER sentences) a
WordPiece vocabulary of the model's size is trained on the train split (as the examples do), every train row is
tokenized with truncation to `--max-length` (512) for the length statistics, and `--batch` rows drawn at random
(seeded) form the batch that is timed, in one process, interleaved, median of `--repeats`:

- transformers' RoFormer (`RoFormerModel` / `RoFormerForMaskedLM`) padded to the max length (run_glue's
  `pad_to_max_length`) and padded to the longest in the batch;
- ours (`RoFormerExtModel` / `RoFormerExtForMaskedLM`, the same weights through our converter) the same two ways,
  and padding-free: one row from transformers' `DataCollatorWithFlattening(return_flash_attn_kwargs=True)`;
- ours on each sequence alone, batch 1, in a loop: no padding and no packing, the lower bound.

Inference is the encoder forward under `torch.inference_mode`; a training step is the MLM forward with labels (15 %
of each sequence's positions, the same positions in every layout) + backward + AdamW (training: one AdamW step
after the loop's backward passes). Tokens/s counts real tokens only. Peak memory: the rise of the resident set
(VmHWM, reset through /proc/self/clear_refs before each case) over the resident set before one step of that case,
in this same process. Checks, reported: the padding-free encoder output equals transformers' padded output per
sequence, and the MLM losses agree.

Last, a short fine-tune padded vs padding-free: the examples' main job's classifier (hidden 64, 2 layers, vocab
6000, attention dropout 0, inputs truncated to 128, batch 32, lr 5e-4) from the same seed, `--finetune-steps`
steps with transformers' `Trainer` and the examples' collators, then accuracy on the validation and test splits.

    OMP_NUM_THREADS=2 python benchmarks/bench_padding_free.py --out benchmarks/results
    python benchmarks/bench_padding_free.py --corpora chinese_sentiment --modes inference --finetune-steps 0
"""

import argparse
import copy
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from bench_model import SIZES, build_pair
from bench_utils import (
    current_rss_mb,
    interleaved_medians,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    release_freed_memory,
    write_results,
)
from transformers import DataCollatorWithFlattening

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # the corpora and the examples' collators

from common.corpora import ExampleDataMissingError, load_example_dataset  # noqa: E402
from common.utils import train_wordpiece_tokenizer  # noqa: E402

CORPORA = ("chinese_sentiment", "rotten_tomatoes", "statutes", "msra_ner")
REVIEWS = ("chinese_sentiment", "rotten_tomatoes")  # the targets are stated on review lengths
CASES = {
    "theirs_max": "transformers, padded to max length",
    "theirs_longest": "transformers, padded to the longest",
    "ours_max": "ours, padded to max length",
    "ours_longest": "ours, padded to the longest",
    "ours_packed": "ours, padding-free",
    "ours_alone": "ours, each sequence alone (loop)",
}
TARGETS = {  # (case compared, mode) -> the speed-up of padding-free over it that the project targets
    ("theirs_longest", "inference"): 2.5,
    ("theirs_longest", "training"): 2.0,
    ("theirs_max", "inference"): 5.0,
    ("theirs_max", "training"): 5.0,
}
ALONE_TARGET = 1.3  # padding-free time / each-sequence-alone time
PAD_ID = 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--corpora", nargs="+", choices=CORPORA, default=list(CORPORA))
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64, help="sequences per inference batch")
    parser.add_argument("--train-batch", type=int, default=32, help="sequences per training step (the first ones)")
    parser.add_argument("--modes", nargs="+", choices=["inference", "training"], default=["inference", "training"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--finetune-corpus", choices=REVIEWS, default="chinese_sentiment")
    parser.add_argument("--finetune-steps", type=int, default=300, help="0: no fine-tune")
    parser.add_argument("--finetune-samples", type=int, default=None, help="limit every split (smoke tests)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print an operator profile of transformers padded to the longest and ours "
        "padding-free on the first corpus (inference and training)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args(argv)


# --- data -----------------------------------------------------------------------------------------------------------


def corpus_sequences(name: str, max_length: int, vocab_size: int) -> tuple[list[list[int]], list[int]]:
    """Token ids of every train row (truncated to max_length) and the untruncated lengths.

    The vocabulary is trained on the train split, as the examples do. Ids at or above the model's vocabulary
    (only at the tiny test size, whose vocabulary is smaller than any real alphabet) become [UNK].
    """
    train = load_example_dataset(name)["train"]
    if name == "msra_ner":  # one character a word, as run_ner.py tokenizes it
        words = list(train["tokens"])
        tokenizer = train_wordpiece_tokenizer((" ".join(w) for w in words), vocab_size)
        full = tokenizer(words, is_split_into_words=True)["input_ids"]
    else:
        texts = list(train["text"])
        tokenizer = train_wordpiece_tokenizer(texts, vocab_size)
        full = tokenizer(texts)["input_ids"]
    unk = tokenizer.unk_token_id
    lengths = [len(ids) for ids in full]
    sequences = []
    for ids in full:
        if len(ids) > max_length:  # keep [SEP] last, as truncation=True does
            ids = ids[: max_length - 1] + ids[-1:]
        sequences.append([i if i < vocab_size else unk for i in ids])
    return sequences, lengths


def length_stats(lengths: list[int], max_length: int) -> dict:
    truncated = [min(n, max_length) for n in lengths]
    ordered = sorted(truncated)
    return {
        "rows": len(lengths),
        "median": statistics.median(truncated),
        "mean": statistics.fmean(truncated),
        "p90": ordered[int(0.9 * (len(ordered) - 1))],
        "max": ordered[-1],
        "truncated_share": sum(n > max_length for n in lengths) / len(lengths),
        "real_share_padded_to_max": statistics.fmean(truncated) / max_length,
    }


def padded(sequences: list[list[int]], length: int) -> dict[str, torch.Tensor]:
    input_ids = torch.full((len(sequences), length), PAD_ID)
    attention_mask = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def packed(sequences: list[list[int]]) -> dict:
    """transformers' own padding-free collator: one row, positions restarting at 0, cu_seq_lens."""
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": ids} for ids in sequences])
    batch.pop("labels")
    return batch


def mlm_labels(sequences: list[list[int]], seed: int) -> list[list[int]]:
    """15 % of each sequence's positions predicted (at least one), the rest -100: the same in every layout."""
    generator = torch.Generator().manual_seed(seed)
    labels = []
    for ids in sequences:
        picked = torch.rand(len(ids), generator=generator) < 0.15
        picked[torch.randint(len(ids), (1,), generator=generator)] = True
        labels.append(torch.tensor(ids).masked_fill(~picked, -100).tolist())
    return labels


def layouts(sequences: list[list[int]], labels: list[list[int]] | None, max_length: int) -> dict[str, object]:
    """The inputs of every case: padded to max length / to the longest, packed, and one batch-1 input per sequence."""
    longest = max(map(len, sequences))
    out: dict[str, object] = {
        "max": padded(sequences, max_length),
        "longest": padded(sequences, longest),
        "packed": packed(sequences),
        "alone": [{"input_ids": torch.tensor([ids])} for ids in sequences],
    }
    if labels is not None:
        for key in ("max", "longest"):
            width = out[key]["input_ids"].shape[1]
            out[key]["labels"] = torch.tensor([row + [-100] * (width - len(row)) for row in labels])
        out["packed"]["labels"] = torch.tensor([sum(labels, [])])
        for single, row in zip(out["alone"], labels):
            single["labels"] = torch.tensor([row])
    return out


# --- steps and memory -----------------------------------------------------------------------------------------------


def inference_step(encoder: torch.nn.Module, inputs: dict | list[dict]) -> Callable[[], None]:
    def step() -> None:
        with torch.inference_mode():
            for batch in inputs if isinstance(inputs, list) else [inputs]:
                encoder(**batch)

    return step


def training_step(model: torch.nn.Module, inputs: dict | list[dict]) -> Callable[[], None]:
    """MLM forward with labels + backward (per sequence for a list) + one AdamW step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batches = inputs if isinstance(inputs, list) else [inputs]

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        for batch in batches:
            model(**batch).loss.backward()
        optimizer.step()

    return step


def _vm_hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def step_peak_mb(step: Callable[[], None]) -> float | None:
    """Rise of the peak resident set over the resident set before one call of `step`, in this process.

    Writing 5 to /proc/self/clear_refs resets the peak (Linux ≥ 4.0), so each case is measured on its own
    without a fresh process. None where that is not allowed.
    """
    release_freed_memory()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    before = current_rss_mb()
    step()
    return _vm_hwm_mb() - before


def steps_for(mode: str, theirs, ours, inputs: dict) -> dict[str, Callable[[], None]]:
    if mode == "inference":
        their_encoder, our_encoder = theirs.roformer.eval(), ours.roformer.eval()
        make = inference_step
    else:
        their_encoder, our_encoder = theirs.train(), ours.train()
        make = training_step
    return {
        "theirs_max": make(their_encoder, inputs["max"]),
        "theirs_longest": make(their_encoder, inputs["longest"]),
        "ours_max": make(our_encoder, inputs["max"]),
        "ours_longest": make(our_encoder, inputs["longest"]),
        "ours_packed": make(our_encoder, inputs["packed"]),
        "ours_alone": make(our_encoder, inputs["alone"]),
    }


def equality_checks(theirs, ours, sequences: list[list[int]], labels: list[list[int]]) -> dict:
    """Padding-free (ours) against transformers padded to the longest: encoder output per sequence, MLM loss."""
    inputs = layouts(sequences, labels, max(map(len, sequences)))
    lengths = [len(ids) for ids in sequences]
    with torch.inference_mode():
        reference = theirs.roformer.eval()(**{k: v for k, v in inputs["longest"].items() if k != "labels"})
        out = ours.roformer.eval()(**{k: v for k, v in inputs["packed"].items() if k != "labels"})
        pieces = torch.split(out.last_hidden_state[0], lengths)
        diff = max(
            (piece - reference.last_hidden_state[row, :n]).abs().max().item()
            for row, (piece, n) in enumerate(zip(pieces, lengths))
        )
        loss_theirs = theirs.eval()(**inputs["longest"]).loss.item()
        loss_ours = ours.eval()(**inputs["packed"]).loss.item()
    return {"max_abs_diff_encoder": diff, "mlm_loss_theirs_padded": loss_theirs, "mlm_loss_ours_packed": loss_ours}


def measure_corpus(args: argparse.Namespace, name: str, theirs, ours, max_length_cases: dict[str, dict]) -> dict:
    """Time every case on one corpus's batch, for each mode.

    Padding to the max length computes the same (batch × max length) tensors whatever the texts, so those two cases
    are timed on the first corpus only (`max_length_cases`, per mode) and reused, with this corpus's real-token
    rates; where the batch's longest sequence is the max length they are the padded-to-the-longest cases.
    """
    sequences, lengths = corpus_sequences(name, args.max_length, ours.config.vocab_size)
    picked = random.Random(args.seed).sample(range(len(sequences)), min(args.batch, len(sequences)))
    batch = [sequences[i] for i in picked]
    result = {"corpus": name, "lengths": length_stats(lengths, args.max_length), "modes": {}}
    result.update(
        equality_checks(theirs, ours, batch[: args.train_batch], mlm_labels(batch[: args.train_batch], args.seed))
    )
    weights = {"theirs": copy.deepcopy(theirs.state_dict()), "ours": copy.deepcopy(ours.state_dict())}
    for mode in args.modes:
        rows = batch if mode == "inference" else batch[: args.train_batch]
        inputs = layouts(rows, mlm_labels(rows, args.seed) if mode == "training" else None, args.max_length)
        real, longest = sum(map(len, rows)), max(map(len, rows))
        computed = {"max": len(rows) * args.max_length, "longest": len(rows) * longest, "packed": real, "alone": real}
        steps = steps_for(mode, theirs, ours, inputs)
        reused = max_length_cases.get(mode) if longest < args.max_length else None
        if longest == args.max_length or (reused and reused["sequences"] == len(rows)):
            steps = {case: fn for case, fn in steps.items() if not case.endswith("_max")}
        print(f"{name}: {mode}, {len(rows)} sequences, {real} tokens ...", file=sys.stderr, flush=True)
        seconds = interleaved_medians(steps, args.repeats)
        memory = {case: step_peak_mb(fn) if isinstance(seconds[case], float) else None for case, fn in steps.items()}
        del steps  # and the optimizers' state
        for model, state in ((theirs, weights["theirs"]), (ours, weights["ours"])):
            model.zero_grad(set_to_none=True)
            model.load_state_dict(state)  # the training steps moved the weights: both start equal again
        notes = {}
        for case in ("theirs_max", "ours_max"):
            if case in seconds:
                continue
            if longest == args.max_length:
                longest_case = case.replace("_max", "_longest")
                seconds[case], memory[case] = seconds[longest_case], memory[longest_case]
                notes[case] = "the same as padded to the longest"
            else:
                seconds[case], memory[case] = reused["seconds"][case], reused["memory"][case]
                notes[case] = f"timed on {reused['corpus']}: the same tensor sizes"
        if mode not in max_length_cases and longest < args.max_length:
            max_length_cases[mode] = {
                "corpus": name,
                "sequences": len(rows),
                "seconds": {c: seconds[c] for c in ("theirs_max", "ours_max")},
                "memory": {c: memory[c] for c in ("theirs_max", "ours_max")},
            }
        packed_seconds = seconds["ours_packed"]
        cases = {}
        for case in CASES:
            t = seconds[case]
            timed = isinstance(t, float)
            cases[case] = {
                "label": CASES[case] + (f" ({notes[case]})" if case in notes else ""),
                "ms": 1e3 * t if timed else t,
                "tokens_per_s": real / t if timed else None,
                "tokens_computed": computed[case.split("_", 1)[1]],
                "time_vs_padding_free": t / packed_seconds if timed and isinstance(packed_seconds, float) else None,
                "step_peak_mb": memory[case],
            }
        result["modes"][mode] = {"sequences": len(rows), "real_tokens": real, "longest": longest, "cases": cases}
    return result


# --- fine-tune: padded vs padding-free ------------------------------------------------------------------------------


def finetune(args: argparse.Namespace) -> dict:
    """The examples' main-job classifier trained padded and padding-free from the same seed; accuracy and time."""
    import numpy as np
    from transformers import DataCollatorWithPadding, TrainingArguments, set_seed

    from roformer_ext import RoFormerExtConfig, RoFormerExtForSequenceClassification
    from roformer_ext.data_collator import FlattenPaddedBatch
    from roformer_ext.trainer import PaddingFreeTrainer

    raw = load_example_dataset(args.finetune_corpus)
    if args.finetune_samples:
        for split in raw:
            raw[split] = raw[split].select(range(min(args.finetune_samples, len(raw[split]))))
    tokenizer = train_wordpiece_tokenizer(raw["train"]["text"], 6000)
    encoded = raw.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=128),
        batched=True,
        remove_columns=[c for c in raw["train"].column_names if c != "label"],
    )

    def accuracy(prediction) -> dict[str, float]:
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    runs = {}
    for layout in ("padded to the longest", "padding-free"):
        set_seed(args.seed)
        config = RoFormerExtConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            attention_probs_dropout_prob=0.0,
            num_labels=2,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = RoFormerExtForSequenceClassification(config)
        collator = DataCollatorWithPadding(tokenizer)
        if layout == "padding-free":
            collator = FlattenPaddedBatch(collator, per_token_labels=False)
        with tempfile.TemporaryDirectory() as folder:
            training_args = TrainingArguments(
                output_dir=folder,
                max_steps=args.finetune_steps,
                per_device_train_batch_size=32,
                per_device_eval_batch_size=128,
                learning_rate=5e-4,
                weight_decay=0.01,
                warmup_steps=0.1,
                seed=args.seed,
                report_to="none",
                save_strategy="no",
                logging_strategy="no",
                disable_tqdm=True,
                use_cpu=True,
                dataloader_pin_memory=False,
            )
            trainer = PaddingFreeTrainer(
                model=model,
                args=training_args,
                train_dataset=encoded["train"],
                data_collator=collator,
                compute_metrics=accuracy,
            )
            print(f"fine-tune, {layout} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            train = trainer.train().metrics
            train_seconds = time.perf_counter() - start
            start = time.perf_counter()
            validation = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
            test = trainer.evaluate(encoded["test"], metric_key_prefix="test")
            eval_seconds = time.perf_counter() - start
        runs[layout] = {
            "train_seconds": train_seconds,
            "train_loss": train["train_loss"],
            "validation_accuracy": validation["validation_accuracy"],
            "validation_loss": validation["validation_loss"],
            "test_accuracy": test["test_accuracy"],
            "test_loss": test["test_loss"],
            "eval_seconds": eval_seconds,
        }
    return {
        "corpus": args.finetune_corpus,
        "steps": args.finetune_steps,
        "train_rows": len(encoded["train"]),
        "validation_rows": len(encoded["validation"]),
        "test_rows": len(encoded["test"]),
        "runs": runs,
    }


# --- profile --------------------------------------------------------------------------------------------------------


def profile(args: argparse.Namespace, theirs, ours) -> None:
    """Operator tables of transformers padded to the longest and ours padding-free on the first corpus's batch."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    sequences, _ = corpus_sequences(args.corpora[0], args.max_length, ours.config.vocab_size)
    batch = [sequences[i] for i in random.Random(args.seed).sample(range(len(sequences)), args.batch)]
    for mode in args.modes:
        rows = batch if mode == "inference" else batch[: args.train_batch]
        steps = steps_for(
            mode,
            theirs,
            ours,
            layouts(rows, mlm_labels(rows, args.seed) if mode == "training" else None, args.max_length),
        )
        for case in ("theirs_longest", "ours_packed"):
            steps[case]()  # warm-up
            with torch_profile(activities=[ProfilerActivity.CPU]) as profiler:
                steps[case]()
            print(f"\n{CASES[case]}: {mode}, {args.corpora[0]}, {len(rows)} sequences")
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


# --- run and Markdown -----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    result = {
        "machine": machine_info("bench_padding_free.py", argv),
        "load_average_before": load_average(),
        "size": args.size,
        "config": SIZES[args.size],
        "max_length": args.max_length,
        "batch": args.batch,
        "train_batch": args.train_batch,
        "repeats": args.repeats,
        "seed": args.seed,
        "corpora": [],
        "skipped": {},
    }
    theirs, ours = build_pair(args.size, args.max_length)

    def save() -> None:
        result["load_average_after"] = load_average()
        write_results(args.out, "bench_padding_free", result, to_markdown(result))

    max_length_cases: dict[str, dict] = {}
    for name in args.corpora:
        try:
            result["corpora"].append(measure_corpus(args, name, theirs, ours, max_length_cases))
        except ExampleDataMissingError as error:
            result["skipped"][name] = str(error)
        save()
    if args.profile:
        profile(args, theirs, ours)
    del theirs, ours
    if args.finetune_steps:
        result["finetune"] = finetune(args)
    result["targets"] = target_rows(result)
    save()
    return result


def target_rows(result: dict) -> list[dict]:
    """Issue 12's targets on the review corpora: padding-free speed-ups, and time against each sequence alone."""
    rows = []
    for corpus in result["corpora"]:
        if corpus["corpus"] not in REVIEWS:
            continue
        for mode, measured in corpus["modes"].items():
            cases = measured["cases"]
            for (case, target_mode), target in TARGETS.items():
                if target_mode == mode:
                    value = cases[case]["time_vs_padding_free"]
                    rows.append(
                        {
                            "corpus": corpus["corpus"],
                            "mode": mode,
                            "goal": f"padding-free ≥ {target:g}× {CASES[case]}",
                            "measured": value,
                            "met": value is not None and value >= target,
                        }
                    )
            alone = cases["ours_alone"]["time_vs_padding_free"]
            value = 1 / alone if alone else None
            rows.append(
                {
                    "corpus": corpus["corpus"],
                    "mode": mode,
                    "goal": f"padding-free time ≤ {ALONE_TARGET:g}× each sequence alone",
                    "measured": value,
                    "met": value is not None and value <= ALONE_TARGET,
                }
            )
    return rows


def _speed_up(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}×"


def to_markdown(result: dict) -> str:
    config = result["config"]
    parts = [
        f"### Padding-free on real lengths: {result['size']} (hidden {config['hidden_size']}, "
        f"{config['num_hidden_layers']} layers, {config['num_attention_heads']} heads, vocab "
        f"{config['vocab_size']}), fp32, max length {result['max_length']}, batch {result['batch']} "
        f"(training {result['train_batch']}), median of {result['repeats']}"
    ]
    header = ["corpus", "train rows", "median", "mean", "p90", "max", "> max length", "real tokens padded to max"]
    table = [
        [
            c["corpus"],
            c["lengths"]["rows"],
            c["lengths"]["median"],
            c["lengths"]["mean"],
            c["lengths"]["p90"],
            c["lengths"]["max"],
            f"{100 * c['lengths']['truncated_share']:.1f} %",
            f"{100 * c['lengths']['real_share_padded_to_max']:.1f} %",
        ]
        for c in result["corpora"]
    ]
    parts.append("#### Token lengths (train split, truncated to max length)\n\n" + markdown_table(header, table))
    for corpus in result["corpora"]:
        for mode, measured in corpus["modes"].items():
            what = "encoder forward" if mode == "inference" else "MLM forward + backward + AdamW step"
            header = ["layout", "ms", "real tokens/s", "tokens computed", "time / padding-free", "Δ peak MB"]
            table = [
                [
                    c["label"],
                    c["ms"],
                    c["tokens_per_s"],
                    c["tokens_computed"],
                    _speed_up(c["time_vs_padding_free"]),
                    c["step_peak_mb"],
                ]
                for c in measured["cases"].values()
            ]
            parts.append(
                f"#### {corpus['corpus']}: {mode} ({what}), {measured['sequences']} sequences, "
                f"{measured['real_tokens']} real tokens, longest {measured['longest']}\n\n"
                + markdown_table(header, table)
            )
    if result.get("targets"):
        table = [
            [
                r["corpus"],
                r["mode"],
                r["goal"],
                f"{r['measured']:.2f}" if r["measured"] else None,
                "met" if r["met"] else "missed",
            ]
            for r in result["targets"]
        ]
        parts.append(
            "#### Speed targets, review corpora\n\n" + markdown_table(["corpus", "mode", "goal", "measured", ""], table)
        )
    if result.get("finetune"):
        tune = result["finetune"]
        table = [
            [
                layout,
                r["validation_accuracy"],
                r["test_accuracy"],
                r["train_loss"],
                r["train_seconds"],
                r["eval_seconds"],
            ]
            for layout, r in tune["runs"].items()
        ]
        parts.append(
            f"#### Fine-tune: {tune['corpus']}, {tune['steps']} steps of 32 from the same seed "
            f"(hidden 64, 2 layers; validation {tune['validation_rows']}, test {tune['test_rows']} rows)\n\n"
            + markdown_table(
                ["layout", "validation accuracy", "test accuracy", "train loss", "train s", "eval s"], table
            )
        )
    checks = "; ".join(
        f"{c['corpus']} {c['max_abs_diff_encoder']:.1e} (MLM loss {c['mlm_loss_theirs_padded']:.4f} "
        f"vs {c['mlm_loss_ours_packed']:.4f})"
        for c in result["corpora"]
    )
    notes = (
        "time / padding-free = that layout's time over ours padding-free (> 1: padding-free is faster). "
        "Δ peak MB = rise of the peak resident set during one step over the resident set before it. "
        f"Same weights: max |padding-free − transformers padded| of the encoder output per sequence: {checks}."
    )
    if result["skipped"]:
        notes += " Skipped (package missing): " + ", ".join(result["skipped"]) + "."
    parts.append(notes)
    parts.append(
        machine_markdown(result["machine"], result["load_average_before"], result.get("load_average_after", []))
    )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result = run(args, argv)
    print(to_markdown(result))
    print(f"\nwrote bench_padding_free.json and .md in {args.out}")
    return result


if __name__ == "__main__":
    main()
