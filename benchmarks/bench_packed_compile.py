"""Packed (padding-free) MLM training steps under torch.compile against eager, on real lengths.

Batches: consecutive groups of `--batch` train rows of `--corpus` (tokenized as bench_padding_free.py does,
truncated to `--max-length`), each packed into one row by transformers' `DataCollatorWithFlattening`
(`cu_seq_lens_*`), 15 % of the positions labelled. One step = forward with labels + backward (no optimizer), sdpa.

- eager: the model as it is; packed rows run per-sequence SDPA (sum of len^2 work).
- compiled: `torch.compile(model)`; traced, the packed-batch description is built from tensor operations, and
  per-sequence SDPA runs eagerly (a graph break per layer; the table counts the graphs and graph breaks dynamo
  recorded during the warm-up).

The compiled model is warmed up on every batch once (compiles for the first shape, then once more with dynamic
shapes); the table gives that warm-up time and then the median step over the batches, interleaved with eager,
`--repeats` rounds.

    OMP_NUM_THREADS=2 python benchmarks/bench_packed_compile.py --out benchmarks/results
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from bench_model import SIZES
from bench_padding_free import corpus_sequences, mlm_labels, packed
from torch._dynamo.utils import counters

from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--corpus", default="chinese_sentiment")
    parser.add_argument("--batch", type=int, default=32, help="sequences per packed batch")
    parser.add_argument("--batches", type=int, default=6, help="packed batches (different total lengths)")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--attention-dropout", type=float, default=0.1, help="attention_probs_dropout_prob (0.1: the config's default)"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for bench_packed_compile.{md,json}")
    return parser.parse_args(argv)


def step(model, batch: dict) -> float:
    start = time.perf_counter()
    model(**batch).loss.backward()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(0)
    config = RoFormerExtConfig(
        **SIZES[args.size], attention_probs_dropout_prob=args.attention_dropout, attn_implementation="sdpa"
    )
    model = RoFormerExtForMaskedLM(config).train()
    sequences, _ = corpus_sequences(args.corpus, args.max_length, config.vocab_size)
    batches = []
    for index in range(args.batches):
        group = sequences[index * args.batch : (index + 1) * args.batch]
        batch = packed(group)
        labels = mlm_labels(group, seed=index)
        batch["labels"] = torch.tensor([label for row in labels for label in row])[None]
        batches.append(batch)
    compiled = torch.compile(model)
    start = time.perf_counter()
    for batch in batches:  # compile: the first shape, then dynamic shapes
        step(compiled, batch)
    warm_up = time.perf_counter() - start
    times = {"eager": [], "compiled": []}
    for _ in range(args.repeats):
        for batch in batches:
            times["eager"].append(step(model, batch))
            times["compiled"].append(step(compiled, batch))
            model.zero_grad(set_to_none=True)
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    tokens = statistics.median(int(batch["input_ids"].shape[1]) for batch in batches)
    result = {
        "size": args.size,
        "attention_dropout": args.attention_dropout,
        "corpus": args.corpus,
        "batch": args.batch,
        "batches": args.batches,
        "median_tokens_per_batch": tokens,
        "compile_warm_up_s": warm_up,
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "median_step_ms": medians,
        "eager_over_compiled": medians["eager"] / medians["compiled"],
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg()[0],
    }
    lines = [
        f"### Packed MLM step, {args.size}, {args.corpus}: {args.batches} batches of {args.batch} sequences "
        f"(median {tokens:.0f} tokens), attention dropout {args.attention_dropout}, forward + backward, median of "
        f"{args.repeats} x {args.batches}",
        "",
        "| | ms per step | eager / this |",
        "|---|---:|---:|",
        f"| eager (per-sequence SDPA) | {medians['eager']:.1f} | 1.00x |",
        f"| torch.compile | {medians['compiled']:.1f} | {result['eager_over_compiled']:.2f}x |",
        "",
        f"Compile warm-up over the {args.batches} batches: {warm_up:.1f} s, {result['graphs']} graphs compiled "
        f"(one per shape specialisation), {result['graph_breaks']} graph breaks. Threads {result['threads']}, "
        f"load average {result['load_average']:.1f}.",
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_packed_compile.md").write_text("\n".join(lines) + "\n")
        (args.out / "bench_packed_compile.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
