"""SentenceTransformer on converted Sim folders and saved encoders embeds as AutoModel's pooler_output."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from sentence_transformers import SentenceTransformer  # pip install -e '.[sentence-transformers]'
from test_convert_junnyu import write_junnyu_folder
from test_convert_original import FIXTURES
from transformers import AutoModel, AutoTokenizer

from roformer_ext import RoFormerExtForCausalLM, RoFormerExtForMaskedLM, RoFormerExtModel
from roformer_ext.conversion.cli import main
from roformer_ext.similarity import save_for_sentence_transformers
from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizerFast

TEXTS = ["今天天气很好", "我想去公园玩", "今天天气不错，我想去公园玩。", "a"]


def pooler_output(folder: Path, texts: list[str]) -> torch.Tensor:
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(**tokenizer(texts, padding=True, return_tensors="pt")).pooler_output


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("st")
    for name in ("roformer_sim", "roformer_sim_ft"):
        assert main(["original", str(FIXTURES / name), str(root / f"original-{name}")]) == 0
        hub = write_junnyu_folder(name, root / "hub" / name)
        assert main(["transformers", str(hub), str(root / f"junnyu-{name}")]) == 0
    return {folder.name: folder for folder in root.iterdir() if folder.name != "hub"}


@pytest.mark.parametrize("name", [f"{src}-roformer_sim{ft}" for src in ("original", "junnyu") for ft in ("", "_ft")])
def test_converted_folder_encodes_the_pooler_output(converted, name):
    folder = converted[name]
    model = SentenceTransformer(str(folder), device="cpu")
    assert model.similarity_fn_name == "cosine"
    embeddings = model.encode(TEXTS, convert_to_tensor=True, batch_size=3)
    torch.testing.assert_close(embeddings, pooler_output(folder, TEXTS), rtol=0, atol=1e-5)
    assert model.get_embedding_dimension() == 64


@pytest.mark.parametrize(
    ("model_class", "activation"),
    [(RoFormerExtModel, "linear"), (RoFormerExtModel, "tanh"), (RoFormerExtForMaskedLM, "linear")],
)
def test_save_for_sentence_transformers(tmp_path, tokenizer, model_class, activation):
    torch.manual_seed(0)
    model = model_class(tiny_config(vocab_size=128, pooler_activation=activation)).eval()
    folder = save_for_sentence_transformers(model, tokenizer, tmp_path / "saved")
    assert [m["path"] for m in json.loads((folder / "modules.json").read_text())] == [""]
    embeddings = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(embeddings, pooler_output(folder, TEXTS), rtol=0, atol=1e-5)
    if model_class is RoFormerExtForMaskedLM:  # the head is kept for from_pretrained
        assert json.loads((folder / "config.json").read_text())["architectures"] == ["RoFormerExtForMaskedLM"]


@pytest.fixture
def tokenizer(tmp_path):
    """The fixture's tokenizer (128 entries), saved and reloaded."""
    RoFormerExtTokenizerFast.from_vocab_file(FIXTURES / "roformer_sim" / "vocab.txt").save_pretrained(tmp_path / "tok")
    return AutoTokenizer.from_pretrained(tmp_path / "tok")


def test_models_without_a_pooler_are_refused(tmp_path, tokenizer):
    unilm = RoFormerExtForCausalLM(tiny_config(pooler_activation="linear"))  # UniLM drops the pooler
    for name, model, error, message in [
        ("a", RoFormerExtModel(tiny_config()), ValueError, "no pooler"),
        ("b", unilm, ValueError, "no pooler"),
        ("c", torch.nn.Linear(2, 2), TypeError, "roformer-ext model"),
    ]:
        with pytest.raises(error, match=message):
            save_for_sentence_transformers(model, tokenizer, tmp_path / name)
        assert not (tmp_path / name).exists()
    assert main(["original", str(FIXTURES / "roformer_v1"), str(tmp_path / "v1")]) == 0  # a converted v1: no pooler
    assert not (tmp_path / "v1" / "modules.json").exists()


FRESH_PROCESS = """
import sys, torch
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], trust_remote_code=True, device="cpu")
assert "roformer_ext" not in sys.modules
torch.save(model.encode(sys.argv[2:], convert_to_tensor=True), "embeddings.pt")
"""


def test_loads_as_remote_code_without_roformer_ext(converted, tmp_path):
    """Where roformer-ext is not installed, `trust_remote_code=True` runs the code files the converter copied."""
    folder = converted["original-roformer_sim"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), PYTHONNOUSERSITE="1")
    command = [sys.executable, "-I", "-c", FRESH_PROCESS, str(folder), *TEXTS]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    torch.testing.assert_close(torch.load(tmp_path / "embeddings.pt"), pooler_output(folder, TEXTS), rtol=0, atol=1e-5)
