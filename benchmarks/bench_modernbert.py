"""Ours against transformers' ModernBERT at matched size, in one process (issue 44: the encoder a user would pick
instead of this one).

Both models are random (the same sizes, not the same weights): the same hidden size, layers, heads and vocabulary,
and ModernBERT's GLU feed-forward width chosen so that the two base models' parameter counts are within 2 % (both
counts are printed). ModernBERT runs as a user runs it where flash-attn is missing: sdpa, padded to the longest in the
batch; twice, with global attention in every layer and with its default alternating local (128 tokens) / global
layers. Ours runs padded the same way and packed (one row from transformers' `DataCollatorWithFlattening`; on CUDA
the packed row goes through torch's varlen flash kernel). Dropout is 0 in both (ModernBERT's default).

The batches have the real length distributions of the bundled corpora (examples/data): token counts from a WordPiece
vocabulary of the models' size trained on the texts (token ids are random, the weights are):
- reviews: `--reviews` Rotten Tomatoes review snippets drawn at random (seeded);
- statutes at 512 / 2048 / 8192 tokens: one statute chapter at least that long, truncated to it, then chapters drawn
  at random (truncated to it too) while the real tokens stay within `--doc-tokens` (so 8192 is one chapter, batch 1).

Inference: the base model's forward under `torch.inference_mode`. A training step: the MLM model's forward with 15 %
of the real tokens labelled, backward and an AdamW step. Times are medians of `--repeats` interleaved runs (one
untimed warm-up each; none at 8192 on a CPU); tokens/s counts real tokens; ratios are ModernBERT's time over ours.
A batch of one sequence is not packed on a CPU (the packed row is the padded batch: one SDPA call); its packed time is
the padded one.

    OMP_NUM_THREADS=1 python benchmarks/bench_modernbert.py --out benchmarks/results   # 15 min on a shared 2-core CPU
    python benchmarks/bench_modernbert.py --quick --out /tmp/modernbert          # a tiny dry run (CI)
    python benchmarks/bench_modernbert.py --device cuda --dtype bf16 --out DIR    # the GPU check's case
"""

from __future__ import annotations

import argparse
import json
import lzma
import random
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from bench_model import autocast
from bench_utils import (
    interleaved_medians,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    synchronize,
    write_results,
)
from transformers import DataCollatorWithFlattening, ModernBertConfig, ModernBertForMaskedLM

from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))  # the examples' tokenizer trainer

from common.utils import train_wordpiece_tokenizer  # noqa: E402

DATA = REPO / "examples" / "data"
MODELS = ("ours_padded", "ours_packed", "modernbert_global", "modernbert_local")
QUICK = ["--hidden", "32", "--layers", "2", "--heads", "4", "--vocab", "500", "--intermediate", "128",
         "--reviews", "6", "--doc-lengths", "64", "128", "--doc-tokens", "256", "--repeats", "1",
         "--corpus-rows", "300"]  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: the dry run (CI)")
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--intermediate", type=int, default=1536, help="ours; ModernBERT's is matched to the count")
    parser.add_argument("--reviews", type=int, default=32, help="review snippets in the review batch")
    parser.add_argument("--doc-lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--doc-tokens", type=int, default=4096, help="real tokens per statute batch (at least one doc)")
    parser.add_argument("--corpus-rows", type=int, help="use only this many texts of each corpus (quick runs)")
    parser.add_argument("--modes", nargs="+", choices=["inference", "training"], default=["inference", "training"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = torch.autocast")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(QUICK + (argv or []) if argv is not None and "--quick" in argv else argv)
    return args


# --- models ---------------------------------------------------------------------------------------------------------


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def our_model(args: argparse.Namespace) -> RoFormerExtForMaskedLM:
    config = RoFormerExtConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=args.intermediate, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, max_position_embeddings=max(args.doc_lengths + [512]), pad_token_id=0,
    )  # fmt: skip
    return RoFormerExtForMaskedLM._from_config(config, attn_implementation="sdpa")


def modernbert_config(args: argparse.Namespace, intermediate: int, every_layer_global: bool) -> ModernBertConfig:
    ids = dict(pad_token_id=0, bos_token_id=2, cls_token_id=2, eos_token_id=3, sep_token_id=3)
    extra = {"layer_types": ["full_attention"] * args.layers} if every_layer_global else {}
    return ModernBertConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=intermediate,
        max_position_embeddings=max(args.doc_lengths + [8192]), **ids, **extra,
    )  # fmt: skip


def matched_intermediate(args: argparse.Namespace, target: int) -> int:
    """ModernBERT's feed-forward width whose base model has `target` parameters, or the nearest: its GLU layer
    holds 3 · hidden · width weights (no biases), everything else does not depend on the width."""
    per_width = 3 * args.hidden * args.layers
    without = count(ModernBertForMaskedLM(modernbert_config(args, 1, True)).model) - per_width
    return max(1, round((target - without) / per_width))


def build_models(args: argparse.Namespace) -> tuple[dict[str, torch.nn.Module], dict]:
    torch.manual_seed(args.seed)
    ours = our_model(args)
    intermediate = matched_intermediate(args, count(ours.roformer))
    models = {"ours": ours}
    for name, every_layer_global in (("modernbert_global", True), ("modernbert_local", False)):
        config = modernbert_config(args, intermediate, every_layer_global)
        models[name] = ModernBertForMaskedLM._from_config(config, attn_implementation="sdpa")
    sizes = {
        "ours": {"intermediate": args.intermediate, "base": count(ours.roformer), "mlm": count(ours)},
        "modernbert": {
            "intermediate": intermediate,
            "base": count(models["modernbert_global"].model),
            "mlm": count(models["modernbert_global"]),
            "layer_types": {
                name: models[name].config.layer_types for name in ("modernbert_global", "modernbert_local")
            },
            "attn_implementation": models["modernbert_global"].config._attn_implementation,
        },
    }
    sizes["base_ratio"] = sizes["modernbert"]["base"] / sizes["ours"]["base"]
    if abs(sizes["base_ratio"] - 1) > 0.02:
        raise SystemExit(f"parameter counts differ by more than 2 %: {sizes}")
    return {name: model.to(args.device) for name, model in models.items()}, sizes


# --- data -----------------------------------------------------------------------------------------------------------


def read_texts(name: str, rows: int | None) -> list[str]:
    with lzma.open(DATA / f"{name}.jsonl.xz", "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle]
    return texts[:rows] if rows else texts


def corpus_lengths(args: argparse.Namespace) -> dict[str, list[int]]:
    """Token counts ([CLS] and [SEP] included) of every review and statute chapter, from one WordPiece vocabulary of
    the models' size trained on both corpora."""
    texts = {name: read_texts(name, args.corpus_rows) for name in ("rotten_tomatoes", "statutes")}
    tokenizer = train_wordpiece_tokenizer(texts["rotten_tomatoes"] + texts["statutes"], args.vocab)
    return {name: [len(ids) for ids in tokenizer(rows)["input_ids"]] for name, rows in texts.items()}


def batches(args: argparse.Namespace, lengths: dict[str, list[int]]) -> dict[str, list[int]]:
    """The sequence lengths of each timed batch: the review mix, and the statute mix at each length."""
    rng = random.Random(args.seed)
    out = {"reviews": rng.sample(lengths["rotten_tomatoes"], args.reviews)}
    statutes = lengths["statutes"]
    for limit in args.doc_lengths:
        long_enough = [n for n in statutes if n >= limit]
        if not long_enough:
            raise SystemExit(f"no statute chapter has {limit} tokens (longest: {max(statutes)})")
        chosen = [limit]  # one chapter truncated to the limit: the batch reaches it
        for n in rng.sample(statutes, len(statutes)):
            if sum(chosen) + min(n, limit) > max(args.doc_tokens, limit):
                break
            chosen.append(min(n, limit))
        out[f"statutes_{limit}"] = chosen
    return out


def layouts(seq_lengths: list[int], vocab: int, seed: int, device: str) -> dict[str, dict]:
    """Random token ids of those lengths, padded to the longest (with MLM labels) and packed (one row)."""
    generator = torch.Generator().manual_seed(seed)
    ids = [torch.randint(5, vocab, (n,), generator=generator) for n in seq_lengths]
    labels = [torch.where(torch.rand(n, generator=generator) < 0.15, row, -100) for n, row in zip(seq_lengths, ids)]
    longest = max(seq_lengths)
    padded = {
        "input_ids": torch.stack([torch.nn.functional.pad(row, (0, longest - len(row))) for row in ids]),
        "attention_mask": torch.stack([(torch.arange(longest) < len(row)).long() for row in ids]),
        "labels": torch.stack([torch.nn.functional.pad(row, (0, longest - len(row)), value=-100) for row in labels]),
    }
    packed = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": row.tolist()} for row in ids])
    packed["labels"] = torch.cat(labels)[None]
    return {
        name: {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        for name, batch in (("padded", padded), ("packed", packed))
    }


# --- steps ----------------------------------------------------------------------------------------------------------


def inference_step(model: torch.nn.Module, batch: dict, dtype: str) -> Callable[[], None]:
    encoder = model.base_model
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    device = batch["input_ids"].device

    def step() -> None:
        with torch.inference_mode(), autocast(dtype, device):
            encoder(**inputs)
        synchronize(device)

    return step


def training_step(model: torch.nn.Module, batch: dict, dtype: str) -> Callable[[], None]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    device = batch["input_ids"].device

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(dtype, device):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        synchronize(device)

    return step


def measure(args: argparse.Namespace, models: dict, name: str, seq_lengths: list[int]) -> dict:
    data = layouts(seq_lengths, args.vocab, args.seed, args.device)
    real = sum(seq_lengths)
    one_on_cpu = args.device == "cpu" and len(seq_lengths) == 1
    warmup = 0 if args.device == "cpu" and max(seq_lengths) >= 8192 else 1
    rows = {}
    for mode in args.modes:
        for model in models.values():
            model.train(mode == "training")
        make = inference_step if mode == "inference" else training_step
        steps = {
            "ours_padded": make(models["ours"], data["padded"], args.dtype),
            "ours_packed": make(models["ours"], data["packed"], args.dtype),
            "modernbert_global": make(models["modernbert_global"], data["padded"], args.dtype),
            "modernbert_local": make(models["modernbert_local"], data["padded"], args.dtype),
        }
        if one_on_cpu:  # packed = padded for one sequence (both one SDPA call): not timed twice on a CPU
            del steps["ours_packed"]
        seconds = interleaved_medians(steps, args.repeats, warmup=warmup)
        if one_on_cpu:
            seconds["ours_packed"] = seconds["ours_padded"]
        cases = {}
        for case, value in seconds.items():
            if isinstance(value, str):  # out of memory
                cases[case] = {"ms": value}
                continue
            cases[case] = {"ms": 1e3 * value, "tokens_per_s": real / value}
        for case in ("modernbert_global", "modernbert_local"):
            for ours in ("ours_padded", "ours_packed"):
                a, b = cases[case].get("ms"), cases[ours].get("ms")
                ok = isinstance(a, float) and isinstance(b, float)
                cases[case][f"time_vs_{ours}"] = a / b if ok else None
        rows[mode] = cases
    return {
        "batch": name,
        "sequences": len(seq_lengths),
        "real_tokens": real,
        "longest": max(seq_lengths),
        "padded_tokens": len(seq_lengths) * max(seq_lengths),
        "warmup": warmup,
        "packed_timed": not one_on_cpu,
        "modes": rows,
    }


# --- output ---------------------------------------------------------------------------------------------------------


def to_markdown(result: dict) -> str:
    sizes = result["sizes"]
    ours, theirs = sizes["ours"], sizes["modernbert"]
    lines = [
        f"### Ours vs ModernBERT (random weights, {result['args']['dtype']}, {result['args']['device']})",
        "",
        f"Sizes: hidden {result['args']['hidden']}, {result['args']['layers']} layers, {result['args']['heads']} "
        f"heads, vocabulary {result['args']['vocab']}. Parameters (base model / with the MLM head): ours "
        f"{ours['base']:,} / {ours['mlm']:,} (feed-forward {ours['intermediate']}); ModernBERT {theirs['base']:,} / "
        f"{theirs['mlm']:,} (GLU width {theirs['intermediate']}); ModernBERT / ours = {sizes['base_ratio']:.4f}.",
        "",
        "Time per step in ms (tokens/s of real tokens in brackets); ratio = ModernBERT's time / ours "
        "(above 1: ours is faster).",
        "",
    ]
    header = ["batch", "mode", "seqs", "real / padded tokens", "ours padded", "ours packed", "MB global",
              "MB local", "MB global / ours padded", "MB global / ours packed", "MB local / ours packed"]  # fmt: skip

    def cell(case: dict) -> str:
        if not isinstance(case.get("ms"), float):
            return str(case.get("ms"))
        return f"{case['ms']:.1f} ({case['tokens_per_s']:.0f})"

    def ratio(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}"

    rows = []
    for batch in result["batches"]:
        for mode, cases in batch["modes"].items():
            rows.append([
                batch["batch"], mode, batch["sequences"], f"{batch['real_tokens']} / {batch['padded_tokens']}",
                cell(cases["ours_padded"]), cell(cases["ours_packed"]), cell(cases["modernbert_global"]),
                cell(cases["modernbert_local"]), ratio(cases["modernbert_global"]["time_vs_ours_padded"]),
                ratio(cases["modernbert_global"]["time_vs_ours_packed"]),
                ratio(cases["modernbert_local"]["time_vs_ours_packed"]),
            ])  # fmt: skip
    lines += [markdown_table(header, rows), "", result["machine_markdown"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    load_before = load_average()
    models, sizes = build_models(args)
    lengths = corpus_lengths(args)
    result = {"args": vars(args), "sizes": sizes, "batches": []}
    for name, seq_lengths in batches(args, lengths).items():
        print(f"[bench_modernbert] {name}: {len(seq_lengths)} sequences, {sum(seq_lengths)} tokens", file=sys.stderr)
        result["batches"].append(measure(args, models, name, seq_lengths))
    info = machine_info("bench_modernbert.py", argv)
    result.update(machine=info, machine_markdown=machine_markdown(info, load_before, load_average()))
    markdown = to_markdown(result)
    write_results(args.out, "bench_modernbert", result, markdown)
    print(markdown)
    return result


if __name__ == "__main__":
    main()
