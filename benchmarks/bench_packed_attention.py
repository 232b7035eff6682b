"""Per-sequence SDPA on a packed row: its three implementations, first, previous and now.

`packing.per_sequence_sdpa` runs attention on each sequence of a padding-free row alone.
- first: slicing q, k and v with `query[:, :, start:end]`; the backward of every slice fills a zero tensor of the
  whole row and adds them up;
- previous: one split of the row squeezed to 3D (backward: one concatenation), a call per sequence; torch's fused
  CPU kernel takes only 4D inputs, so these 3D pieces ran SDPA's unfused math path;
- now: one split of the 4D row, a call per sequence, on the fused kernel.
(Stacking the sequences that share a length into one SDPA call was tried too and measured no faster.) Timed on
real lengths (the batch bench_padding_free.py draws: the first `--batch` of its 64 train rows, seed 0, tokenized
with a vocabulary trained on the train split, truncated to `--max-length`):

- attention alone, one layer's q, k, v as the model makes them ((1, heads, total, head_dim), head count and size
  of `--size`): the three implementations, and the same sequences padded to the longest as one SDPA call with a
  key mask (inputs already padded: the cost of the call alone). Forward under `torch.inference_mode`, and forward +
  backward of the output against a fixed random gradient;
- the same for `blocks`: `--batch` blocks of `--block-length` tokens (random ids), the fixed-length blocks of
  run_mlm.py's grouped text, where every sequence shares one length;
- the whole model at `--size` (`RoFormerExtForMaskedLM`, sdpa) on the packed row from transformers'
  `DataCollatorWithFlattening`: encoder forward, and MLM forward with labels (15 %) + backward, with the model's
  per-sequence SDPA swapped between the three.

Interleaved, median of `--repeats`. Also reported: the largest difference between first and now (outputs, and
q, k, v / parameter gradients), which should be float rounding.

    OMP_NUM_THREADS=2 python benchmarks/bench_packed_attention.py --out benchmarks/results
    python benchmarks/bench_packed_attention.py --corpora blocks rotten_tomatoes --parts attention
"""

import argparse
import contextlib
import random
import sys
from collections.abc import Callable, Iterator

import torch
from bench_model import SIZES
from bench_padding_free import CORPORA, corpus_sequences, mlm_labels, packed
from bench_utils import (
    interleaved_medians,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    write_results,
)
from torch.nn import functional as F

import roformer_ext.modeling_roformer_ext as modeling
from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM
from roformer_ext.packing import per_sequence_sdpa

DRAW = 64  # bench_padding_free.py's --batch: its training step takes the first rows of this draw

AttentionFn = Callable[..., tuple[torch.Tensor, None]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument(
        "--corpora",
        nargs="+",
        choices=[*CORPORA, "blocks"],
        default=["statutes", "chinese_sentiment", "rotten_tomatoes", "blocks"],
    )
    parser.add_argument("--block-length", type=int, default=128, help="tokens per block of the 'blocks' case")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32, help="sequences packed into the row (at most 64)")
    parser.add_argument("--parts", nargs="+", choices=["attention", "model"], default=["attention", "model"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    if not 1 <= args.batch <= DRAW:
        parser.error(f"--batch must be between 1 and {DRAW} (the rows bench_padding_free.py draws)")
    return args


# --- the attention functions compared -------------------------------------------------------------------------------


def sliced_sdpa(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=False, cu_seq_lens_q=None, **kwargs
) -> tuple[torch.Tensor, None]:
    """The first implementation: a slice of the row per sequence, one SDPA call each."""
    bounds = cu_seq_lens_q.tolist()
    outputs = [
        F.scaled_dot_product_attention(
            query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], dropout_p=dropout, is_causal=is_causal, scale=scaling
        )
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def squeezed_split_sdpa(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=False, cu_seq_lens_q=None, **kwargs
) -> tuple[torch.Tensor, None]:
    """The previous implementation: one split of the row squeezed to 3D, a call per sequence. torch's fused CPU
    kernel takes 4D inputs only, so these 3D pieces ran SDPA's unfused math path."""
    lengths = torch.diff(cu_seq_lens_q).tolist()
    pieces = zip(*(t.squeeze(0).split(lengths, dim=1) for t in (query, key, value)))
    outputs = [
        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=is_causal, scale=scaling).transpose(0, 1)
        for q, k, v in pieces
    ]
    return torch.cat(outputs, dim=0).unsqueeze(0), None


ATTENTION = {"sliced": sliced_sdpa, "squeezed": squeezed_split_sdpa, "now": per_sequence_sdpa}
LABELS = {
    "sliced": "a slice per sequence, a call each (first)",
    "squeezed": "one split, 3D pieces: math kernel (previous)",
    "now": "per_sequence_sdpa: one split, 4D pieces (now)",
    "padded": "padded to the longest, one call with a key mask (reference)",
}


# --- attention alone ------------------------------------------------------------------------------------------------


def attention_inputs(lengths: list[int], heads: int, head_dim: int, seed: int) -> dict:
    """Packed q, k, v (1, heads, total, d), their cu_seq_lens, the same sequences padded, and an output gradient.

    Laid out as the model makes them: the projection's (batch, seq, heads, d), seen as (batch, heads, seq, d).
    """
    generator = torch.Generator().manual_seed(seed)
    total, longest = sum(lengths), max(lengths)
    q, k, v, grad = (torch.randn(1, total, heads, head_dim, generator=generator).transpose(1, 2) for _ in range(4))
    cu_seq_lens = F.pad(torch.tensor(lengths).cumsum(0), (1, 0)).to(torch.int32)

    def pad(t: torch.Tensor) -> torch.Tensor:  # (1, heads, total, d) -> (sequences, heads, longest, d), same layout
        pieces = t[0].transpose(0, 1).split(lengths)  # (len, heads, d) each
        return torch.nn.utils.rnn.pad_sequence(pieces, batch_first=True).transpose(1, 2)

    key_mask = (torch.arange(longest)[None] < torch.tensor(lengths)[:, None])[:, None, None]  # (seq, 1, 1, longest)
    return {
        "packed": (q, k, v),
        "cu_seq_lens": cu_seq_lens,
        "padded": tuple(pad(t) for t in (q, k, v)),
        "key_mask": key_mask,
        "grad": grad,
        "padded_grad": pad(grad),
    }


def attention_steps(inputs: dict, backward: bool) -> dict[str, Callable[[], None]]:
    def packed_step(fn: AttentionFn) -> Callable[[], None]:
        def step() -> None:
            if not backward:
                with torch.inference_mode():
                    fn(None, *inputs["packed"], None, cu_seq_lens_q=inputs["cu_seq_lens"])
                return
            q, k, v = (t.detach().requires_grad_() for t in inputs["packed"])
            out, _ = fn(None, q, k, v, None, cu_seq_lens_q=inputs["cu_seq_lens"])
            out.backward(inputs["grad"].transpose(1, 2))

        return step

    def padded_step() -> None:
        if not backward:
            with torch.inference_mode():
                F.scaled_dot_product_attention(*inputs["padded"], attn_mask=inputs["key_mask"])
            return
        q, k, v = (t.detach().requires_grad_() for t in inputs["padded"])
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=inputs["key_mask"])
        out.backward(inputs["padded_grad"])

    return {**{name: packed_step(fn) for name, fn in ATTENTION.items()}, "padded": padded_step}


def attention_differences(inputs: dict) -> dict[str, float]:
    """max |now − first| of the output and of the q, k, v gradients."""
    results = {}
    for name in ("sliced", "now"):
        q, k, v = (t.detach().requires_grad_() for t in inputs["packed"])
        out, _ = ATTENTION[name](None, q, k, v, None, cu_seq_lens_q=inputs["cu_seq_lens"])
        out.backward(inputs["grad"].transpose(1, 2))
        results[name] = (out.detach(), q.grad, k.grad, v.grad)
    before, now = results["sliced"], results["now"]
    return {
        "output": (now[0] - before[0]).abs().max().item(),
        "gradients": max((a - b).abs().max().item() for a, b in zip(now[1:], before[1:])),
    }


# --- the whole model ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def model_attention(fn: AttentionFn) -> Iterator[None]:
    """The model's per-sequence SDPA swapped for `fn` (the attention module looks it up at call time)."""
    original = modeling.per_sequence_sdpa
    modeling.per_sequence_sdpa = fn
    try:
        yield
    finally:
        modeling.per_sequence_sdpa = original


def model_steps(model: RoFormerExtForMaskedLM, batch: dict, backward: bool) -> dict[str, Callable[[], None]]:
    inputs = batch if backward else {k: v for k, v in batch.items() if k != "labels"}

    def step_with(fn: AttentionFn) -> Callable[[], None]:
        def step() -> None:
            with model_attention(fn):
                if backward:
                    model.zero_grad(set_to_none=True)
                    model(**inputs).loss.backward()
                else:
                    with torch.inference_mode():
                        model.roformer(**inputs)

        return step

    return {name: step_with(fn) for name, fn in ATTENTION.items()}


def model_differences(model: RoFormerExtForMaskedLM, batch: dict) -> dict[str, float]:
    """max |now − first| of the MLM loss and of the parameter gradients."""
    results = {}
    for name in ("sliced", "now"):
        model.zero_grad(set_to_none=True)
        with model_attention(ATTENTION[name]):
            loss = model(**batch).loss
        loss.backward()
        results[name] = (loss.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None])
    (loss_before, grads_before), (loss_now, grads_now) = results["sliced"], results["now"]
    model.zero_grad(set_to_none=True)
    return {
        "loss": abs(loss_now - loss_before),
        "gradients": max((a - b).abs().max().item() for a, b in zip(grads_now, grads_before)),
    }


# --- run and Markdown -----------------------------------------------------------------------------------------------


def measure_corpus(args: argparse.Namespace, name: str, model: RoFormerExtForMaskedLM) -> dict:
    config = model.config
    if name == "blocks":
        generator = torch.Generator().manual_seed(args.seed)
        rows = torch.randint(5, config.vocab_size, (args.batch, args.block_length), generator=generator).tolist()
    else:
        sequences, _ = corpus_sequences(name, args.max_length, config.vocab_size)
        picked = random.Random(args.seed).sample(range(len(sequences)), min(DRAW, len(sequences)))[: args.batch]
        rows = [sequences[i] for i in picked]
    lengths = [len(ids) for ids in rows]
    heads = config.num_attention_heads
    inputs = attention_inputs(lengths, heads, config.hidden_size // heads, args.seed)
    batch = packed(rows)
    batch["labels"] = torch.tensor([sum(mlm_labels(rows, args.seed), [])])
    result = {
        "corpus": name,
        "sequences": len(rows),
        "tokens": sum(lengths),
        "longest": max(lengths),
        "distinct_lengths": len(set(lengths)),
        "lengths": lengths,
        "timings_ms": {},
    }
    makers = {"attention": lambda b: attention_steps(inputs, b), "model": lambda b: model_steps(model, batch, b)}
    for part in args.parts:
        for mode, backward in (("forward", False), ("forward + backward", True)):
            print(f"{name}: {part}, {mode} ...", file=sys.stderr, flush=True)
            seconds = interleaved_medians(makers[part](backward), args.repeats)
            result["timings_ms"][f"{part}: {mode}"] = {case: 1e3 * t for case, t in seconds.items()}
    result["attention_difference"] = attention_differences(inputs)
    if "model" in args.parts:
        result["model_difference"] = model_differences(model, batch)
    return result


def to_markdown(result: dict) -> str:
    config = result["config"]
    parts = [
        f"### Per-sequence SDPA on packed real lengths: {result['size']} (hidden {config['hidden_size']}, "
        f"{config['num_hidden_layers']} layers, {config['num_attention_heads']} heads), fp32, max length "
        f"{result['max_length']}, median of {result['repeats']}"
    ]
    for corpus in result["corpora"]:
        header = [
            "what",
            *(LABELS[c] for c in ("sliced", "squeezed", "now", "padded")),
            "first / now",
            "previous / now",
        ]
        table = [
            [
                what,
                *(ms.get(c) for c in ("sliced", "squeezed", "now", "padded")),
                f"{ms['sliced'] / ms['now']:.2f}×",
                f"{ms['squeezed'] / ms['now']:.2f}×",
            ]
            for what, ms in corpus["timings_ms"].items()
        ]
        parts.append(
            f"#### {corpus['corpus']}: {corpus['sequences']} sequences, {corpus['tokens']} tokens, longest "
            f"{corpus['longest']}, {corpus['distinct_lengths']} distinct lengths (ms)\n\n"
            + markdown_table(header, table)
        )
    checks = "; ".join(
        f"{c['corpus']}: attention output {c['attention_difference']['output']:.1e}, q/k/v gradients "
        f"{c['attention_difference']['gradients']:.1e}"
        + (
            f", model loss {c['model_difference']['loss']:.1e}, parameter gradients "
            f"{c['model_difference']['gradients']:.1e}"
            if "model_difference" in c
            else ""
        )
        for c in result["corpora"]
    )
    parts.append(
        "attention: one layer's q, k, v alone; model: `RoFormerExtForMaskedLM` (sdpa) on the packed row, "
        "encoder forward / MLM loss + backward (no optimizer step); padded reference for attention only. "
        f"max |now − first|: {checks}."
    )
    parts.append(machine_markdown(result["machine"], result["load_average_before"], result["load_average_after"]))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    result = {
        "machine": machine_info("bench_packed_attention.py", argv),
        "load_average_before": load_average(),
        "size": args.size,
        "config": SIZES[args.size],
        "max_length": args.max_length,
        "batch": args.batch,
        "repeats": args.repeats,
        "seed": args.seed,
        "parts": args.parts,
        "corpora": [],
    }
    torch.manual_seed(args.seed)
    config = RoFormerExtConfig(**SIZES[args.size], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = RoFormerExtForMaskedLM(config).train()
    model.set_attn_implementation("sdpa")
    for name in args.corpora:
        result["corpora"].append(measure_corpus(args, name, model))
    result["load_average_after"] = load_average()
    markdown = to_markdown(result)
    write_results(args.out, "bench_packed_attention", result, markdown)
    print(markdown)
    print(f"\nwrote bench_packed_attention.json and .md in {args.out}")
    return result


if __name__ == "__main__":
    main()
