"""run_similarity.py: a tiny Sim folder fine-tuned on its sample file loads in sentence-transformers and transformers"""

import csv
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from test_convert_original import FIXTURES
from test_examples import run_in_process
from transformers import AutoModel, AutoTokenizer

from roformer_ext.conversion.original import convert_original_checkpoint

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "sentence-similarity" / "run_similarity.py"
SAMPLE = SCRIPT.parent / "sample_pairs.jsonl"
TRAINER = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--per_device_train_batch_size",
           "8", "--learning_rate", "1e-3"]  # fmt: skip


@pytest.fixture(scope="module")
def sim_folder(tmp_path_factory) -> Path:
    return convert_original_checkpoint(FIXTURES / "roformer_sim", tmp_path_factory.mktemp("start") / "sim")


def run_script(model: Path, args: list, monkeypatch) -> None:
    run_in_process(SCRIPT, ["--model_name_or_path", model, *args, *TRAINER], monkeypatch)


def rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def test_cosent_on_the_sample_file(sim_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    args = ["--train_file", SAMPLE, "--test_file", SAMPLE, "--validation_split_percentage", "20", "--max_steps", "3",
            "--output_dir", out]  # fmt: skip
    run_script(sim_folder, args, monkeypatch)
    results = json.loads((out / "all_results.json").read_text())
    for key in ("eval_spearman_cosine_before", "eval_spearman_cosine", "test_spearman_cosine"):
        assert -1 <= results[key] <= 1, key
    assert results["train_loss"] > 0
    before, after = load_file(sim_folder / "model.safetensors"), load_file(out / "model.safetensors")
    assert not torch.equal(before["roformer.pooler.dense.weight"], after["pooler.dense.weight"])  # trained
    assert json.loads((out / "config.json").read_text())["architectures"] == ["RoFormerExtModel"]
    texts = [row["sentence1"] for row in rows()[:6]]
    tokenizer, encoder = AutoTokenizer.from_pretrained(out), AutoModel.from_pretrained(out).eval()
    with torch.no_grad():
        pooled = encoder(**tokenizer(texts, padding=True, return_tensors="pt")).pooler_output
    embeddings = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_tensor=True)
    torch.testing.assert_close(embeddings, pooled, rtol=0, atol=1e-5)  # the trained pooler, in both libraries
    assert str(tmp_path) not in (out / "README.md").read_text()


def test_graded_scores_in_csv_train_with_cosent_and_binary_labels_with_contrastive(sim_folder, tmp_path, monkeypatch):
    """STS-style graded scores under other names: contrastive loss refuses them, CoSENT takes them; 0/1 labels train."""
    for split in ("train", "dev"):
        with open(tmp_path / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text_a", "text_b", "similarity"])
            for index, row in enumerate(rows()):
                writer.writerow([row["sentence1"], row["sentence2"], row["label"] * 4 + index % 2])  # 0-5 scale
    flags = ["--train_file", tmp_path / "train.csv", "--validation_file", tmp_path / "dev.csv", "--sentence1_column",
             "text_a", "--sentence2_column", "text_b", "--label_column", "similarity", "--max_steps", "2"]  # fmt: skip
    with pytest.raises(ValueError, match="contrastive needs 0/1 labels"):
        run_script(sim_folder, [*flags, "--loss", "contrastive", "--output_dir", tmp_path / "c"], monkeypatch)
    run_script(sim_folder, [*flags, "--output_dir", tmp_path / "out"], monkeypatch)
    assert "eval_spearman_cosine" in json.loads((tmp_path / "out" / "all_results.json").read_text())
    binary = tmp_path / "binary"
    args = ["--train_file", SAMPLE, "--loss", "contrastive", "--do_train", "--max_steps", "2", "--output_dir", binary]
    run_script(sim_folder, args, monkeypatch)
    results = json.loads((binary / "all_results.json").read_text())
    assert results["train_loss"] >= 0 and "eval_spearman_cosine" not in results  # --do_train only


def test_missing_data_columns_and_pooler_are_named(sim_folder, tmp_path, monkeypatch):
    out = ["--output_dir", tmp_path / "out"]
    with pytest.raises(ValueError, match="sample_pairs.jsonl"):
        run_script(sim_folder, out, monkeypatch)
    with pytest.raises(ValueError, match="--sentence1_column"):
        run_script(sim_folder, [*out, "--train_file", SAMPLE, "--sentence1_column", "query"], monkeypatch)
    no_pooler = convert_original_checkpoint(FIXTURES / "roformer_v1", tmp_path / "v1")
    with pytest.raises(ValueError, match="has no pooler"):
        run_script(no_pooler, ["--train_file", SAMPLE, "--output_dir", tmp_path / "out2"], monkeypatch)
