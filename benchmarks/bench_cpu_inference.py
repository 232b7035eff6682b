"""CPU serving: sentence embeddings and classification through every inference path, against transformers' RoFormer.

Speed (random weights, one process, the same weights everywhere: a transformers `RoFormerModel` /
`RoFormerForSequenceClassification` converted by our converter):

- **transformers RoFormer, eager** (`RoFormerModel` / `RoFormerForSequenceClassification`);
- **ours, eager** (the baseline of every ratio), **ours, torch.compile** (`--compile`: compile time reported apart),
  **ours, torch dynamic int8** (`roformer_ext.export.quantize_dynamic_int8`);
- **ONNX Runtime fp32** and **int8** (`roformer_ext.export`: `torch.onnx.export(dynamo=True)`, ORT's dynamic int8).

Cases: embeddings of short sentences ([CLS] of the last hidden state, as a Sim encoder pools; 16 tokens) at batch 1
and 32, classification at 128 and 512 tokens. Each path is timed as the median of `--repeats` calls, interleaved
(a, b, c, a, b, c, ...) so load changes hit all alike. ONNX Runtime gets as many threads as torch.

Fidelity (trained weights, `--classifier DIR` from examples/text-classification/run_classification.py and
`--mlm DIR` from examples/language-modeling/run_mlm.py, on the bundled corpus' validation rows): accuracy and its
change, prediction agreement with fp32, cosine of the [CLS] embedding to fp32, MLM argmax agreement on masked
tokens. The commands are in docs/benchmarks.md.

    python benchmarks/bench_cpu_inference.py --size small --out benchmarks/results \
        --classifier /tmp/deploy/sentiment64 --mlm /tmp/deploy/mlm
"""

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from bench_utils import (
    interleaved_medians,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    peoples_daily,
    write_results,
)
from transformers import RoFormerConfig, RoFormerForSequenceClassification, RoFormerModel

from roformer_ext.conversion.from_transformers import build_converted_model
from roformer_ext.export import OnnxModel, export_onnx, quantize_dynamic_int8, quantize_onnx

SIZES = {
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
             "vocab_size": 99},
    # RoFormer-Sim small (chinese_roformer-sim-char-ft-small) and base
    "small": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 6, "intermediate_size": 1536,
              "vocab_size": 12000},
    "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "vocab_size": 12000},
}  # fmt: skip
PATHS = {
    "theirs": "transformers RoFormer, eager",
    "ours": "ours, eager",
    "compile": "ours, torch.compile",
    "torch_int8": "ours, torch dynamic int8",
    "ort_fp32": "ONNX Runtime fp32",
    "ort_int8": "ONNX Runtime int8",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--embedding-length", type=int, default=16, help="tokens per short sentence")
    parser.add_argument("--embedding-batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--classification-lengths", default="128,512", help="comma-separated lengths")
    parser.add_argument("--classification-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (minutes of compiling)")
    parser.add_argument("--classifier", help="a folder trained by run_classification.py, for the fidelity table")
    parser.add_argument("--mlm", help="a folder trained by run_mlm.py, for the fidelity table")
    parser.add_argument("--fidelity-rows", type=int, default=1000, help="validation rows for the fidelity table")
    parser.add_argument(
        "--tokenization-lines", type=int, default=0, help="People's Daily lines for the word-mode speed table (0: none)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="folder for bench_cpu_inference.json / .md (default: print only)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    with torch.no_grad():  # a context: a caller in the same process keeps its autograd
        return run(parse_args(argv), sys.argv[1:] if argv is None else argv)


def build_models(size: str, seed: int, folder: Path) -> dict[str, torch.nn.Module]:
    """transformers' encoder and classifier with random weights; ours converted from them (the same tensors)."""
    torch.manual_seed(seed)
    config = RoFormerConfig(**SIZES[size], max_position_embeddings=1024, num_labels=2)
    models = {"theirs_encoder": RoFormerModel(config).eval()}
    models["theirs_classifier"] = RoFormerForSequenceClassification(config).eval()
    models["theirs_classifier"].roformer.load_state_dict(models["theirs_encoder"].state_dict())
    for name in ("encoder", "classifier"):
        models[f"theirs_{name}"].save_pretrained(folder / name)
        models[f"ours_{name}"] = build_converted_model(folder / name).eval()
    return models


def random_batch(batch: int, length: int, vocab: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, length), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = 2, 3
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "token_type_ids": torch.zeros_like(input_ids),
    }


def timed_paths(
    theirs: torch.nn.Module,
    ours: torch.nn.Module,
    onnx: dict[str, OnnxModel],
    int8: torch.nn.Module,
    compiled: torch.nn.Module | None,
    inputs: dict[str, torch.Tensor],
    output: Callable,
) -> dict[str, Callable[[], object]]:
    feeds = {name: value.numpy() for name, value in inputs.items()}
    fns = {
        "theirs": lambda: output(theirs(**inputs)),
        "ours": lambda: output(ours(**inputs)),
        "torch_int8": lambda: output(int8(**inputs)),
        "ort_fp32": lambda: onnx["fp32"](**feeds),
        "ort_int8": lambda: onnx["int8"](**feeds),
    }
    if compiled is not None:
        fns["compile"] = lambda: output(compiled(**inputs))
    return fns


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    threads = torch.get_num_threads()
    vocab = SIZES[args.size]["vocab_size"]
    cases = [("embedding", batch, args.embedding_length) for batch in _ints(args.embedding_batches)]
    cases += [("classification", args.classification_batch, n) for n in _ints(args.classification_lengths)]
    rows, compile_seconds = [], {}
    load_before = load_average()
    # no cases (--embedding-batches "" --classification-lengths ""): the fidelity table only
    heads = (("encoder", "feature-extraction"), ("classifier", "sequence-classification")) if cases else ()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = build_models(args.size, args.seed, folder) if cases else {}
        onnx, int8, compiled = {}, {}, {}
        for name, task in heads:
            ours = models[f"ours_{name}"]
            fp32_path = export_onnx(ours, folder / f"{name}.onnx", task=task)
            onnx[name] = {
                "fp32": OnnxModel(fp32_path, threads=threads),
                "int8": OnnxModel(quantize_onnx(fp32_path, folder / f"{name}_int8.onnx"), threads=threads),
            }
            int8[name] = quantize_dynamic_int8(ours)
            compiled[name] = torch.compile(ours) if args.compile else None
        for kind, batch, length in cases:
            name = "encoder" if kind == "embedding" else "classifier"
            output = (lambda out: out.last_hidden_state[:, 0]) if kind == "embedding" else (lambda out: out.logits)
            inputs = random_batch(batch, length, vocab, args.seed + length + batch)
            if compiled[name] is not None:  # compile for this shape outside the timing
                start = time.perf_counter()
                compiled[name](**inputs)
                compile_seconds[f"{kind} {batch}x{length}"] = time.perf_counter() - start
            fns = timed_paths(
                models[f"theirs_{name}"], models[f"ours_{name}"], onnx[name], int8[name], compiled[name], inputs, output
            )
            seconds = interleaved_medians(fns, args.repeats, warmup=2)
            for key in PATHS:
                if key in seconds:
                    rows.append(
                        {
                            "case": f"{kind}, batch {batch} x {length} tokens",
                            "path": PATHS[key],
                            "ms": 1000 * seconds[key],
                            "speedup_vs_ours_eager": seconds["ours"] / seconds[key],
                            "sequences_per_s": batch / seconds[key],
                        }
                    )
        load_after = load_average()
    fidelity = measure_fidelity(args) if (args.classifier or args.mlm) else []
    tokenization = measure_word_tokenization(args.tokenization_lines) if args.tokenization_lines else []

    info = machine_info("bench_cpu_inference.py", argv)
    payload = {
        "size": args.size, "model": SIZES[args.size], "repeats": args.repeats, "threads": threads,
        "results": rows, "compile_seconds": compile_seconds, "fidelity": fidelity, "tokenization": tokenization,
        "machine": info,
        "load_average_before": load_before, "load_average_after": load_after,
    }  # fmt: skip
    speed = markdown_table(
        ["case", "path", "ms per batch", "sequences / s", "speed-up vs ours eager"],
        [[r["case"], r["path"], r["ms"], r["sequences_per_s"], f"{r['speedup_vs_ours_eager']:.2f}×"] for r in rows],
    )
    markdown = (
        f"### CPU inference, {args.size} size (random weights: {SIZES[args.size]})\n\n{speed}\n\n" if rows else ""
    )
    if compile_seconds:
        markdown += "torch.compile time per shape (s): " + ", ".join(
            f"{case} {s:.1f}" for case, s in compile_seconds.items()
        )
        markdown += "\n\n"
    if fidelity:
        markdown += "### Fidelity to fp32 on trained models\n\n" + markdown_table(
            ["model", "path", "metric", "fp32", "this path", "agreement with fp32", "cosine to fp32 (min / mean)"],
            [
                [f["model"], f["path"], f["metric"], f["fp32"], f["value"], f["agreement"], f["cosine"]]
                for f in fidelity
            ],
        )
        markdown += "\n\n"
    if tokenization:
        markdown += f"### Word-mode tokenization, {args.tokenization_lines} People's Daily lines\n\n" + markdown_table(
            ["what", "seconds", "lines / s"], [[t["what"], t["seconds"], t["lines_per_s"]] for t in tokenization]
        )
        markdown += "\n\n"
    markdown += machine_markdown(info, load_before, load_after)
    print(markdown)
    if args.out:
        write_results(args.out, "bench_cpu_inference", payload, markdown)
    return payload


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


# ------------------------------------------------------------------------------------------------- fidelity
def validation_texts(dataset: str, rows: int) -> tuple[list[str], np.ndarray]:
    """The first `rows` validation rows of a bundled corpus of the examples."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from common import corpora

    validation = corpora.load_example_dataset(dataset)["validation"]
    validation = validation.select(range(min(rows, len(validation))))
    return list(validation["text"]), np.array(validation["label"])


def measure_fidelity(args: argparse.Namespace) -> list[dict]:
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

    results = []
    texts, labels = validation_texts("chinese_sentiment", args.fidelity_rows)
    with tempfile.TemporaryDirectory() as tmp:
        if args.classifier:
            name = f"sentiment classifier ({Path(args.classifier).name}), {len(texts)} validation rows"
            batches = _batches(AutoTokenizer.from_pretrained(args.classifier), texts, 128)
            classifier = AutoModelForSequenceClassification.from_pretrained(args.classifier).eval()
            logits = _run_paths(_paths(classifier, Path(tmp) / "classifier", "sequence-classification"), batches)
            encoder = AutoModel.from_pretrained(args.classifier).eval()  # its encoder: the [CLS] embedding
            hidden = _run_paths(_paths(encoder, Path(tmp) / "encoder", "feature-extraction"), batches, first=True)
            accuracy = (logits["fp32"].argmax(-1) == labels).mean()
            for path in logits:
                if path == "fp32":
                    continue
                cosine = torch.nn.functional.cosine_similarity(
                    torch.from_numpy(hidden[path]), torch.from_numpy(hidden["fp32"])
                )
                results.append(
                    {
                        "model": name,
                        "path": path,
                        "metric": "accuracy",
                        "fp32": float(accuracy),
                        "value": float((logits[path].argmax(-1) == labels).mean()),
                        "agreement": float((logits[path].argmax(-1) == logits["fp32"].argmax(-1)).mean()),
                        "cosine": f"{cosine.min():.4f} / {cosine.mean():.4f}",
                    }
                )
        if args.mlm:
            tokenizer = AutoTokenizer.from_pretrained(args.mlm)
            model = AutoModelForMaskedLM.from_pretrained(args.mlm).eval()
            paths = _paths(model, Path(tmp) / "mlm", "fill-mask")
            generator = torch.Generator().manual_seed(args.seed)
            predictions: dict[str, list[np.ndarray]] = {path: [] for path in paths}
            truth = []
            for batch in _batches(tokenizer, texts, 128):  # mask 15 % of the real, non-special tokens
                special = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
                chosen = (torch.rand(batch["input_ids"].shape, generator=generator) < 0.15) & ~special
                chosen &= batch["attention_mask"].bool()
                truth.append(batch["input_ids"][chosen].numpy())
                masked = dict(batch, input_ids=batch["input_ids"].masked_fill(chosen, tokenizer.mask_token_id))
                for path, fn in paths.items():
                    predictions[path].append(fn(masked).argmax(-1)[chosen.numpy()])
            truth_all = np.concatenate(truth)
            top1 = {path: np.concatenate(p) for path, p in predictions.items()}
            for path in paths:
                if path != "fp32":
                    results.append(
                        {
                            "model": f"MLM ({Path(args.mlm).name}), {len(truth_all)} masked tokens",
                            "path": path,
                            "metric": "masked-token accuracy",
                            "fp32": float((top1["fp32"] == truth_all).mean()),
                            "value": float((top1[path] == truth_all).mean()),
                            "agreement": float((top1[path] == top1["fp32"]).mean()),
                            "cosine": None,
                        }
                    )
    return results


def measure_word_tokenization(lines: int) -> list[dict]:
    """Lines per second of the segmenters alone and of our word tokenizers (a word vocabulary built as
    tests/tokenization does: 3,000 characters + 3,000 jieba words of the first 2,000 lines)."""
    import collections
    import os

    import jieba
    import rjieba

    from roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
    from roformer_ext.tokenization_words import WORD_SEGMENTER_ENV

    texts = peoples_daily(lines)
    chars = [c for c, _ in collections.Counter("".join(texts[:2000])).most_common(3000)]
    words = collections.Counter(
        w
        for t in texts[:2000]
        for w in jieba.cut(t, HMM=False)
        if len(w) > 1 and all("\u4e00" <= c <= "\u9fff" for c in w)
    )
    vocab = (
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        + chars
        + ["##" + c for c in chars if not "\u4e00" <= c <= "\u9fff"]
    )
    vocab += [w for w, _ in words.most_common(3000)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
        tokenizers = {}
        for library in ("rjieba", "jieba"):
            os.environ[WORD_SEGMENTER_ENV] = library
            tokenizers[f"ours fast ({library})"] = RoFormerExtTokenizerFast.from_vocab_file(vocab_file)
            tokenizers[f"ours slow ({library})"] = RoFormerExtTokenizer.from_vocab_file(vocab_file)
        os.environ.pop(WORD_SEGMENTER_ENV)
        fns = {
            "jieba alone (cut, HMM off)": lambda: [list(jieba.cut(t, HMM=False)) for t in texts],
            "rjieba alone (cut, HMM off)": lambda: [rjieba.cut(t, hmm=False) for t in texts],
        }
        for name, tokenizer in tokenizers.items():
            fns[name] = lambda tokenizer=tokenizer: tokenizer(texts)["input_ids"]
        assert fns["ours fast (rjieba)"]() == fns["ours fast (jieba)"]()  # the same ids either way
        seconds = interleaved_medians(fns, repeats=3, warmup=1)
    for name, s in seconds.items():
        results.append({"what": name, "seconds": s, "lines_per_s": len(texts) / s})
    return results


def _batches(tokenizer, texts: list[str], length: int, size: int = 64) -> list[dict[str, torch.Tensor]]:
    out = []
    for start in range(0, len(texts), size):
        encoded = tokenizer(
            texts[start : start + size], padding=True, truncation=True, max_length=length, return_tensors="pt"
        )
        out.append({name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")})
    return out


def _paths(model: torch.nn.Module, folder: Path, task: str) -> dict[str, Callable]:
    """path name -> fn(batch) -> the task's first output as numpy: fp32, torch int8, ONNX Runtime fp32 / int8."""
    fp32_file = export_onnx(model, folder / "model.onnx", task=task)
    sessions = {"ORT fp32": OnnxModel(fp32_file), "ORT int8": OnnxModel(quantize_onnx(fp32_file, folder / "int8.onnx"))}

    def torch_path(m: torch.nn.Module) -> Callable:
        return lambda batch: m(**batch)[0].numpy()

    def ort_path(session: OnnxModel) -> Callable:
        return lambda batch: next(iter(session(**batch).values()))

    paths = {"fp32": torch_path(model), "torch int8": torch_path(quantize_dynamic_int8(model))}
    paths.update({name: ort_path(session) for name, session in sessions.items()})
    return paths


def _run_paths(paths: dict[str, Callable], batches: list[dict], first: bool = False) -> dict[str, np.ndarray]:
    """Each path over all batches, concatenated (`first`: position 0 only, the [CLS] embedding)."""
    return {name: np.concatenate([fn(b)[:, 0] if first else fn(b) for b in batches]) for name, fn in paths.items()}


if __name__ == "__main__":
    main()
