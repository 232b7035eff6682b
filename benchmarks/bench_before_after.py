"""This checkout's roformer-ext against an older one, same weights, same inputs, interleaved in one process.

A refactor must not make the model slower. Timing the two versions one after another on a shared machine measures
the load as much as the code; here both run in the same process, in turn (old, new, old, new, ...), so a change of
load hits both alike. The older version is a source folder (e.g. `git worktree add /tmp/old <commit>`), imported
under another package name (its modules import each other relatively).

Cases (each with the weights of the new model loaded into the old one, strict, and the outputs compared):
- fixed length: MLM model, inference (encoder forward) and training (forward with labels + backward), `--seqs`;
- padding-free: `--reviews` (32) real Chinese reviews packed into one row by transformers' `DataCollatorWithFlattening`, inference
  and training, as benchmarks/bench_padding_free.py builds them;
- both pair layouts ("interleaved", RoFormer's, and "half").

Ratio = old time / new time (> 1: the new code is faster).

    git worktree add /tmp/old <commit>
    OMP_NUM_THREADS=2 python benchmarks/bench_before_after.py --old-src /tmp/old/src --out benchmarks/results
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from bench_model import SIZES
from bench_padding_free import corpus_sequences, packed
from bench_utils import interleaved_medians, load_average, machine_info

from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-src", type=Path, required=True, help="the older checkout's src/ folder")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--seqs", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--tokens", type=int, default=4096, help="batch = max(1, tokens // seq)")
    parser.add_argument("--layouts", nargs="+", default=["interleaved", "half"])
    parser.add_argument("--reviews", type=int, default=32, help="real reviews packed into one row")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for bench_before_after.{md,json}")
    return parser.parse_args(argv)


def import_old(src: Path):
    """The older `roformer_ext` as the package `roformer_ext_old` (a copy, so nothing in `src` is touched)."""
    if not (src / "roformer_ext" / "__init__.py").is_file():
        raise ValueError(f"--old-src {src} has no roformer_ext package; give the src/ folder of an older checkout.")
    folder = Path(tempfile.mkdtemp(prefix="roformer_ext_old_"))
    shutil.copytree(src / "roformer_ext", folder / "roformer_ext_old")
    sys.path.insert(0, str(folder))
    return importlib.import_module("roformer_ext_old")


def steps(model: torch.nn.Module, batch: dict, mode: str):
    if mode == "inference":

        def step() -> torch.Tensor:
            with torch.inference_mode():
                return model.roformer(**{k: v for k, v in batch.items() if k != "labels"}).last_hidden_state

        return step

    def train() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss.detach()

    return train


def cases(args: argparse.Namespace, vocab_size: int) -> dict[str, dict]:
    generator = torch.Generator().manual_seed(0)
    batches = {}
    for seq in args.seqs:
        batch = max(1, args.tokens // seq)
        ids = torch.randint(5, vocab_size, (batch, seq), generator=generator)
        labels = ids.masked_fill(torch.rand(ids.shape, generator=generator) > 0.15, -100)
        batches[f"{seq} x {batch}"] = {"input_ids": ids, "labels": labels}
    sequences, _ = corpus_sequences("chinese_sentiment", 512, vocab_size)
    reviews = packed(sequences[: args.reviews])
    ids = reviews["input_ids"]
    reviews["labels"] = ids.masked_fill(torch.rand(ids.shape, generator=generator) > 0.15, -100)
    batches[f"packed {args.reviews} reviews ({ids.shape[1]} tokens)"] = dict(reviews)
    return batches


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    old = import_old(args.old_src)
    rows = []
    for layout in args.layouts:
        torch.manual_seed(0)
        config = RoFormerExtConfig(
            **SIZES[args.size], attn_implementation="sdpa", rope_parameters={"pair_layout": layout}
        )
        new_model = RoFormerExtForMaskedLM(config)
        old_config = old.RoFormerExtConfig(
            **SIZES[args.size], attn_implementation="sdpa", rope_parameters={"pair_layout": layout}
        )
        old_model = old.RoFormerExtForMaskedLM(old_config)
        old_model.load_state_dict(new_model.state_dict(), strict=True)
        for name, batch in cases(args, config.vocab_size).items():
            for mode in ("inference", "training"):
                new_model.train(mode == "training")
                old_model.train(mode == "training")
                torch.manual_seed(1)
                new_out = steps(new_model, batch, mode)()
                torch.manual_seed(1)
                old_out = steps(old_model, batch, mode)()
                difference = (new_out.float() - old_out.float()).abs().max().item()
                fns = {"old": steps(old_model, batch, mode), "new": steps(new_model, batch, mode)}
                seconds = interleaved_medians(fns, args.repeats)
                row = dict(layout=layout, case=name, mode=mode, old_ms=1000 * seconds["old"])
                row.update(new_ms=1000 * seconds["new"], ratio=seconds["old"] / seconds["new"], max_diff=difference)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return {"machine": machine_info("bench_before_after.py", argv), "size": args.size, "rows": rows}


def to_markdown(result: dict) -> str:
    lines = [
        f"### Before vs after, {result['size']} size, fp32, sdpa, median of interleaved runs",
        "",
        "| pair layout | case | mode | old ms | new ms | old / new | max abs diff |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['layout']} | {row['case']} | {row['mode']} | {row['old_ms']:.0f} | {row['new_ms']:.0f} | "
            f"{row['ratio']:.2f} | {row['max_diff']:.1e} |"
        )
    lines += ["", f"Load average at the end: {load_average()}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result = run(args, argv)
    markdown = to_markdown(result)
    print(markdown)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_before_after.json").write_text(json.dumps(result, indent=2))
        (args.out / "bench_before_after.md").write_text(markdown)
    return result


if __name__ == "__main__":
    main()
