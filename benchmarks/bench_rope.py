"""Benchmark the rotation alone: what one attention layer pays to rotate its queries and keys.

Compared on the same (batch, heads, seq, head_dim) q and k, laid out as a model produces them (a transposed view
of the projection output):
- transformers' RoFormer: `RoFormerSelfAttention.apply_rotary_position_embeddings` with its sinusoidal table
  (it re-expands the (sin | cos) table to per-dimension form on every call, i.e. in every layer);
- ours, `roformer_ext.rope.rotate_query_key` (what attention calls), for each pair layout, with the (cos, sin) our
  model computes once per forward (their per-call cost is not counted: it is shared by all layers). Half pairs are
  rotated into interleaved order (scores only need q and k in the same order), so both layouts take one complex pass;
- the plain formula `x * cos + rotate(x) * sin` for each layout (what the complex fast paths replace);
- a copy of q and k: the lower bound for any out-of-place rotation (read once, write once).

    python benchmarks/bench_rope.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import sys

import torch
from bench_utils import (
    DTYPES,
    interleaved_medians,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    write_results,
)
from transformers.models.roformer.modeling_roformer import (
    RoFormerSelfAttention,
    RoFormerSinusoidalPositionalEmbedding,
)

from roformer_ext import RoFormerExtConfig
from roformer_ext.rope import (
    RotaryEmbedding,
    apply_rotary,
    rotate_interleaved,
    rotate_query_key,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--out", default="benchmarks/results", help="folder for bench_rope.json / bench_rope.md")
    return parser.parse_args(argv)


def projection_like(batch: int, seq: int, heads: int, head_dim: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """(batch, heads, seq, head_dim) as a transposed view of a (batch, seq, hidden) projection, like both models."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, seq, heads * head_dim, generator=generator).to(dtype)
    return hidden.view(batch, seq, heads, head_dim).transpose(1, 2)


def their_table(seq: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """transformers' RoFormer table, (1, 1, seq, head_dim) = (sin | cos), as its encoder hands it to each layer."""
    table = RoFormerSinusoidalPositionalEmbedding(seq, head_dim)
    with torch.no_grad():
        table.weight.copy_(table.create_weight())  # what RoFormerPreTrainedModel._init_weights does
    return table(torch.Size((1, seq)))[None, None].to(dtype)


def our_rotary(seq: int, heads: int, head_dim: int, layout: str, batch: int, like: torch.Tensor):
    config = RoFormerExtConfig(
        hidden_size=heads * head_dim, num_attention_heads=heads, rope_parameters={"pair_layout": layout}
    )
    positions = torch.arange(seq).expand(batch, seq)
    return RotaryEmbedding(config)(like, positions)


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    dtype = DTYPES[args.dtype]
    load_before = load_average()
    q = projection_like(args.batch, args.seq, args.heads, args.head_dim, dtype, seed=0)
    k = projection_like(args.batch, args.seq, args.heads, args.head_dim, dtype, seed=1)
    table = their_table(args.seq, args.head_dim, dtype)
    cos_i, sin_i = our_rotary(args.seq, args.heads, args.head_dim, "interleaved", args.batch, q)
    cos_h, sin_h = our_rotary(args.seq, args.heads, args.head_dim, "half", args.batch, q)

    theirs = RoFormerSelfAttention.apply_rotary_position_embeddings
    cases = {
        "copy (lower bound)": lambda: (q.clone(), k.clone()),
        "transformers RoFormer": lambda: theirs(table, q, k),
        "ours, interleaved": lambda: rotate_query_key(q, k, cos_i, sin_i, "interleaved"),
        "ours, half": lambda: rotate_query_key(q, k, cos_h, sin_h, "half"),
        "plain formula, interleaved": lambda: (q * cos_i[:, None] + rotate_interleaved(q) * sin_i[:, None],
                                               k * cos_i[:, None] + rotate_interleaved(k) * sin_i[:, None]),
        "plain formula, half": lambda: (apply_rotary(q, cos_h, sin_h, "half"), apply_rotary(k, cos_h, sin_h, "half")),
    }
    # ours, half returns each pair side by side (interleaved order): compare its scores q·kᵀ, the quantity attention uses.
    def half_score_diff() -> float:
        fast, plain = cases["ours, half"](), cases["plain formula, half"]()
        return ((fast[0] @ fast[1].transpose(-1, -2)).float() - (plain[0] @ plain[1].transpose(-1, -2)).float()).abs().max().item()

    # Same function: ours interleaved against theirs (their table is built in float64, ours in float32, so the
    # angles differ in the last bits), and the interleaved fast path against the plain formula (its exactness).
    def max_diff(a: str, b: str) -> float:
        return (torch.stack(cases[a]()).float() - torch.stack(cases[b]()).float()).abs().max().item()

    checks = {
        "max_abs_diff_ours_vs_transformers": max_diff("ours, interleaved", "transformers RoFormer"),
        "max_abs_diff_fast_vs_plain_interleaved": max_diff("ours, interleaved", "plain formula, interleaved"),
        "max_abs_score_diff_fast_vs_plain_half": half_score_diff(),
    }

    with torch.inference_mode():
        seconds = interleaved_medians(cases, args.repeats, warmup=3)
    moved_bytes = 2 * 2 * q.numel() * q.element_size()  # read q, k; write q, k
    their_time, copy_time = seconds["transformers RoFormer"], seconds["copy (lower bound)"]
    rows = [
        {
            "implementation": name,
            "ms": 1e3 * t,
            "gb_per_s": moved_bytes / t / 1e9,
            "speedup_vs_transformers": their_time / t,
            "time_vs_copy": t / copy_time,
        }
        for name, t in seconds.items()
    ]
    return {
        "machine": machine_info("bench_rope.py", argv),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "shape": {"batch": args.batch, "heads": args.heads, "seq": args.seq, "head_dim": args.head_dim},
        "dtype": args.dtype,
        "repeats": args.repeats,
        **checks,
        "results": rows,
    }


def to_markdown(result: dict) -> str:
    shape = result["shape"]
    table = markdown_table(
        ["rotate q and k", "ms", "GB/s", "× faster than transformers", "time / copy"],
        [[r["implementation"], r["ms"], r["gb_per_s"], r["speedup_vs_transformers"], r["time_vs_copy"]]
         for r in result["results"]],
    )
    return (
        f"### Rotation alone (q and k of one layer: batch {shape['batch']}, {shape['heads']} heads, seq "
        f"{shape['seq']}, head_dim {shape['head_dim']}, {result['dtype']}; median of {result['repeats']})\n\n"
        f"{table}\n\nmax |diff|: ours vs transformers' rotation {result['max_abs_diff_ours_vs_transformers']:.1e} "
        f"(their table is computed in float64, ours in float32); interleaved fast path vs plain formula: "
        f"{result['max_abs_diff_fast_vs_plain_interleaved']:.1e}; half fast path vs plain formula, on the scores "
        f"q·kᵀ: {result['max_abs_score_diff_fast_vs_plain_half']:.1e}."
        "\n\n"
        + machine_markdown(result["machine"], result["load_average_before"], result["load_average_after"])
    )


def main(argv: list[str] | None = None) -> dict:
    """Run, write `bench_rope.json` / `.md` under --out, print the table; returns the result."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result = run(args, argv)
    markdown = to_markdown(result)
    json_path, md_path = write_results(args.out, "bench_rope", result, markdown)
    print(markdown)
    print(f"\nwrote {json_path} and {md_path}")
    return result


if __name__ == "__main__":
    main()
