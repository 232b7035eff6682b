"""Operator profile of transformers' RoFormer and ours (same weights): where each model spends a step.

The benchmark tables say how much faster; this says why (the profiles behind the README are in
docs/benchmarks.md#where-the-time-goes-operator-profiles):

    python benchmarks/profile_ops.py --seq 512 --batch 2 --threads 1
    python benchmarks/profile_ops.py --seq 4096 --batch 1 --threads 1 --mode training
    python benchmarks/profile_ops.py --size small --attention linear --seq 16384 --batch 1   # ours only
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_model import SIZES, build_pair, make_inputs, mlm_labels, our_config, their_config
from torch.profiler import ProfilerActivity, profile

from roformer_ext import RoFormerExtForMaskedLM


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--mode", choices=["inference", "training"], default="inference")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--rows", type=int, default=14, help="operators listed per model")
    parser.add_argument(
        "--attention",
        choices=["softmax", "linear"],
        default="softmax",
        help="linear: our linear-attention model only (transformers has none)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.attention == "linear":
        torch.manual_seed(0)
        models = {"ours (linear)": RoFormerExtForMaskedLM(our_config(their_config(args.size, args.seq), "linear"))}
    else:
        theirs, ours = build_pair(args.size, max(args.seq, 512))
        models = {"transformers": theirs, "ours": ours}
    inputs = make_inputs(args.batch, args.seq, next(iter(models.values())).config.vocab_size)
    labels = mlm_labels(inputs["input_ids"])

    def step(model: torch.nn.Module) -> None:
        if args.mode == "inference":
            with torch.inference_mode():
                model.roformer.eval()(**inputs)
        else:
            model.train()(**inputs, labels=labels).loss.backward()
            model.zero_grad(set_to_none=True)

    for name, model in models.items():
        step(model)  # warm-up
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            step(model)
        print(
            f"\n{name}: {args.mode}, seq {args.seq}, batch {args.batch}, {torch.get_num_threads()} threads, "
            f"{time.perf_counter() - start:.2f} s (profiled)"
        )
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
