"""Benchmark the rotation: alone, with the q / k projections, and in a whole model against the plain formula.

Rotation alone, on the same (batch, heads, seq, head_dim) q and k laid out as a model produces them (a transposed view
of the projection output): transformers' RoFormer (`apply_rotary_position_embeddings`, its table re-expanded in every
layer); ours, the rotation a layer chooses when it is built (`rope.query_key_rotation`), with the (cos, sin) our model
computes once per forward; the plain formula `x * cos + rotate(x) * sin` per layout; a copy (the lower bound).
Then the same from the hidden states (projections included: `project_query_key`).

Whole model ("what each fast path buys", docs/benchmarks.md): each layout's model as built against the same weights
rotating by the plain formula (`PlainRotation` in every layer), an encoder forward and an MLM training step, interleaved
runs, MLM logits compared bit for bit. Run it on an older checkout (PYTHONPATH) to time a path removed since.

    python benchmarks/bench_rope.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys

import torch
from bench_model import SIZES
from bench_utils import (
    DTYPES,
    interleaved_medians,
    interleaved_times,
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

from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM
from roformer_ext.conversion.pair_layout import convert_pair_layout
from roformer_ext.rope import RotaryEmbedding, apply_rotary, query_key_rotation, rotate_half, rotate_interleaved


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument(
        "--model-size",
        choices=["tiny", "small", "base"],
        default="small",
        help="bench_model.py size of the whole-encoder table",
    )
    parser.add_argument("--model-repeats", type=int, default=10)
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


def layout_config(heads: int, head_dim: int, layout: str) -> RoFormerExtConfig:
    return RoFormerExtConfig(
        hidden_size=heads * head_dim, num_attention_heads=heads, rope_parameters={"pair_layout": layout}
    )


def our_rotary(seq: int, heads: int, head_dim: int, layout: str, batch: int, like: torch.Tensor):
    positions = torch.arange(seq).expand(batch, seq)
    return RotaryEmbedding(layout_config(heads, head_dim, layout))(like, positions)


def rotations(args: argparse.Namespace):
    """The rotation a layer of each layout chooses when it is built."""
    return (query_key_rotation(layout_config(args.heads, args.head_dim, layout)) for layout in ("interleaved", "half"))


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    dtype = DTYPES[args.dtype]
    load_before = load_average()
    q = projection_like(args.batch, args.seq, args.heads, args.head_dim, dtype, seed=0)
    k = projection_like(args.batch, args.seq, args.heads, args.head_dim, dtype, seed=1)
    table = their_table(args.seq, args.head_dim, dtype)
    cos_i, sin_i = our_rotary(args.seq, args.heads, args.head_dim, "interleaved", args.batch, q)
    cos_h, sin_h = our_rotary(args.seq, args.heads, args.head_dim, "half", args.batch, q)

    theirs = RoFormerSelfAttention.apply_rotary_position_embeddings
    interleaved_rotation, half_rotation = rotations(args)  # chosen once, as a layer does
    cases = {
        "copy (lower bound)": lambda: (q.clone(), k.clone()),
        "transformers RoFormer": lambda: theirs(table, q, k),
        "ours, interleaved": lambda: interleaved_rotation.query_key(q, k, cos_i, sin_i),
        "ours, half": lambda: half_rotation.query_key(q, k, cos_h, sin_h),
        "plain formula, interleaved": lambda: (
            q * cos_i[:, None] + rotate_interleaved(q) * sin_i[:, None],
            k * cos_i[:, None] + rotate_interleaved(k) * sin_i[:, None],
        ),
        "plain formula, half": lambda: (apply_rotary(q, cos_h, sin_h, "half"), apply_rotary(k, cos_h, sin_h, "half")),
    }

    # ours, half returns each pair side by side (interleaved order): compare scores q·kᵀ, the quantity attention uses.
    def half_score_diff() -> float:
        fast, plain = cases["ours, half"](), cases["plain formula, half"]()
        return (
            ((fast[0] @ fast[1].transpose(-1, -2)).float() - (plain[0] @ plain[1].transpose(-1, -2)).float())
            .abs()
            .max()
            .item()
        )

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
    projection = projection_and_rotation(args, dtype, table, (cos_i, sin_i), (cos_h, sin_h))
    encoder = encoder_forward(args, dtype)
    return {
        "machine": machine_info("bench_rope.py", argv),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "shape": {"batch": args.batch, "heads": args.heads, "seq": args.seq, "head_dim": args.head_dim},
        "dtype": args.dtype,
        "repeats": args.repeats,
        **checks,
        "results": rows,
        "projection": projection,
        "encoder": encoder,
    }


class PlainRotation:
    """The plain formula `x * cos + rotate(x) * sin` in a layer's rotation interface: what a fast path must beat.

    For scores, half pairs are then brought side by side, as the model does (`reorder=False` skips that: the
    Llama-style rotation, the same function, rounded differently in q·kᵀ).
    """

    def __init__(self, layout: str, reorder: bool = True) -> None:
        self.rotate = rotate_half if layout == "half" else rotate_interleaved
        self.reorder = reorder and layout == "half"

    def values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return x * cos + self.rotate(x) * sin

    def project_query_key(self, states, query, key, head_dim, cos, sin):
        rotated = (self.values(p(states).unflatten(-1, (-1, head_dim)).transpose(1, 2), cos, sin) for p in (query, key))
        return tuple(x.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2) if self.reorder else x for x in rotated)


def encoder_forward(args: argparse.Namespace, dtype: torch.dtype) -> dict:
    """Each layout's model as built against the same weights rotating by the plain formula: an encoder forward
    (inference) and an MLM training step (forward + backward), interleaved runs; outputs compared bit for bit."""
    torch.manual_seed(0)
    config = RoFormerExtConfig(**SIZES[args.model_size], attn_implementation="sdpa", attention_probs_dropout_prob=0.0)
    built = {"interleaved": RoFormerExtForMaskedLM(config).to(dtype)}
    built["half"] = convert_pair_layout(copy.deepcopy(built["interleaved"]), "half")
    models = {}
    for layout, model in built.items():
        models[layout] = model
        for name, rotation in [("plain", PlainRotation(layout)), ("plain, no reorder", PlainRotation(layout, False))]:
            if layout == "interleaved" and name != "plain":
                continue
            models[f"{layout}, {name}"] = plain = copy.deepcopy(model)
            for layer in plain.base_model.layers:
                layer.attention.rotation = rotation
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, config.vocab_size, (args.batch, args.seq), generator=generator)
    labels = torch.where(torch.rand(input_ids.shape, generator=generator) < 0.15, input_ids, -100)

    def forward(model):
        with torch.inference_mode():
            model.eval().base_model(input_ids)

    def training_step(model):
        model.train().zero_grad(set_to_none=True)
        model(input_ids, labels=labels).loss.backward()

    with torch.inference_mode():
        logits = {name: model.eval()(input_ids).logits for name, model in models.items()}
    cases = {f"{name}: {step.__name__}": (lambda m=model, s=step: s(m)) for name, model in models.items()
             for step in (forward, training_step)}  # fmt: skip
    times = interleaved_times(cases, args.model_repeats, warmup=1)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    rows = []
    for layout in built:
        row = {"layout": layout}
        for name in [n for n in models if n.startswith(layout)]:
            key = name.removeprefix(layout).lstrip(", ") or "built"
            row[f"{key}_forward_ms"] = 1e3 * seconds[f"{name}: forward"]
            row[f"{key}_training_ms"] = 1e3 * seconds[f"{name}: training_step"]
            row[f"{key}_max_abs_logit_diff"] = (logits[name] - logits[layout]).abs().max().item()
            row[f"{key}_logits_equal"] = torch.equal(logits[name], logits[layout])
        rows.append(row)
    return {
        "size": args.model_size,
        "config": SIZES[args.model_size],
        "repeats": args.model_repeats,
        "max_abs_diff_half_vs_interleaved": (logits["half"] - logits["interleaved"]).abs().max().item(),
        "results": rows,
        "seconds": times,
    }


def projection_and_rotation(
    args: argparse.Namespace, dtype: torch.dtype, table: torch.Tensor, interleaved, half
) -> dict:
    """Time projecting q and k from the hidden states and rotating them, for each implementation."""
    hidden_size = args.heads * args.head_dim
    generator = torch.Generator().manual_seed(2)
    states = torch.randn(args.batch, args.seq, hidden_size, generator=generator).to(dtype)
    query, key = (torch.nn.Linear(hidden_size, hidden_size).to(dtype) for _ in range(2))

    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.view(args.batch, args.seq, args.heads, args.head_dim).transpose(1, 2)

    theirs = RoFormerSelfAttention.apply_rotary_position_embeddings
    interleaved_rotation, half_rotation = rotations(args)
    cases = {
        "projection alone (lower bound)": lambda: (heads(query(states)), heads(key(states))),
        "transformers RoFormer": lambda: theirs(table, heads(query(states)), heads(key(states))),
        "ours, interleaved": lambda: interleaved_rotation.project_query_key(
            states, query, key, args.head_dim, *interleaved
        ),
        "ours, half": lambda: half_rotation.project_query_key(states, query, key, args.head_dim, *half),
    }

    def scores(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return (pair[0] @ pair[1].transpose(-1, -2)).float()

    with torch.inference_mode():
        plain_q, plain_k = heads(query(states)), heads(key(states))
        plain = (apply_rotary(plain_q, *half, "half"), apply_rotary(plain_k, *half, "half"))
        score_diff = (scores(cases["ours, half"]()) - scores(plain)).abs().max().item()
        seconds = interleaved_medians(cases, args.repeats, warmup=3)
    their_time, floor = seconds["transformers RoFormer"], seconds["projection alone (lower bound)"]
    rows = [
        {
            "implementation": name,
            "ms": 1e3 * t,
            "speedup_vs_transformers": their_time / t,
            "time_vs_projection": t / floor,
        }
        for name, t in seconds.items()
    ]
    return {
        "rows": args.batch * args.seq,
        "hidden_size": hidden_size,
        "half_vs_interleaved": seconds["ours, half"] / seconds["ours, interleaved"],
        "max_abs_score_diff_half_vs_plain_formula": score_diff,
        "results": rows,
    }


def to_markdown(result: dict) -> str:
    shape = result["shape"]
    table = markdown_table(
        ["rotate q and k", "ms", "GB/s", "× faster than transformers", "time / copy"],
        [
            [r["implementation"], r["ms"], r["gb_per_s"], r["speedup_vs_transformers"], r["time_vs_copy"]]
            for r in result["results"]
        ],
    )
    return (
        f"### Rotation alone (q and k of one layer: batch {shape['batch']}, {shape['heads']} heads, seq "
        f"{shape['seq']}, head_dim {shape['head_dim']}, {result['dtype']}; median of {result['repeats']})\n\n"
        f"{table}\n\nmax |diff|: ours vs transformers' rotation {result['max_abs_diff_ours_vs_transformers']:.1e} "
        f"(their table is computed in float64, ours in float32); interleaved fast path vs plain formula: "
        f"{result['max_abs_diff_fast_vs_plain_interleaved']:.1e}; half fast path vs plain formula, on the scores "
        f"q·kᵀ: {result['max_abs_score_diff_fast_vs_plain_half']:.1e}."
        "\n\n"
        + projection_markdown(result)
        + encoder_markdown(result)
        + machine_markdown(result["machine"], result["load_average_before"], result["load_average_after"])
    )


def projection_markdown(result: dict) -> str:
    projection, shape = result["projection"], result["shape"]
    table = markdown_table(
        ["project and rotate q and k", "ms", "× faster than transformers", "time / projection alone"],
        [
            [r["implementation"], r["ms"], r["speedup_vs_transformers"], r["time_vs_projection"]]
            for r in projection["results"]
        ],
    )
    return (
        f"### Projection and rotation (from hidden states: {projection['rows']} rows of {projection['hidden_size']}, "
        f"{shape['heads']} heads)\n\n{table}\n\nhalf / interleaved time: {projection['half_vs_interleaved']:.2f}; "
        f"max |diff| of the half layout's scores q·kᵀ against the plain formula: "
        f"{projection['max_abs_score_diff_half_vs_plain_formula']:.1e}.\n\n"
    )


def encoder_markdown(result: dict) -> str:
    encoder, shape = result["encoder"], result["shape"]
    config, rows = encoder["config"], []
    for r in encoder["results"]:
        for key in [k.removesuffix("_forward_ms") for k in r if k.endswith("_forward_ms") and k != "built_forward_ms"]:
            forward, training = r["built_forward_ms"], r["built_training_ms"]
            plain_forward, plain_training = r[f"{key}_forward_ms"], r[f"{key}_training_ms"]
            rows.append([
                r["layout"], f"as built vs {key}", forward, plain_forward, plain_forward / forward - 1,
                training, plain_training, plain_training / training - 1,
                "yes" if r[f"{key}_logits_equal"] else f"no ({r[f'{key}_max_abs_logit_diff']:.1e})",
            ])  # fmt: skip
    table = markdown_table(
        ["layout", "compared", "forward ms", "plain ms", "gain", "training step ms", "plain ms", "gain",
         "MLM logits bit-identical"],
        rows,
    )  # fmt: skip
    return (
        f"### Whole encoder forward and MLM training step, as built vs the plain formula ({encoder['size']}: hidden "
        f"{config['hidden_size']}, {config['num_hidden_layers']} layers, {config['num_attention_heads']} heads; batch "
        f"{shape['batch']}, seq {shape['seq']}, sdpa; median of {encoder['repeats']} interleaved runs)\n\n{table}\n\n"
        "Forward: the encoder in inference mode; training step: MLM forward + backward (15 % labels). Gain: plain time "
        "/ built time − 1. Max |diff| of the half model's logits against the interleaved one (the same function): "
        f"{encoder['max_abs_diff_half_vs_interleaved']:.1e}.\n\n"
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
