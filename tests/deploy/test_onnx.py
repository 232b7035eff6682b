"""ONNX export / Runtime equal PyTorch past the traced length; Sim embeddings, int8, refusals that name the fix."""

from pathlib import Path
from unittest.mock import Mock

import numpy as np
import pytest
import torch
from conftest import assert_position_sensitive, position_sensitive_config, random_inputs, tiny_config
from sentence_transformers import SentenceTransformer
from test_convert_original import FIXTURES

import roformer_ext.export as export_module
from roformer_ext import (
    RoFormerExtForCausalLM,
    RoFormerExtForMaskedLM,
    RoFormerExtForSequenceClassification,
    RoFormerExtModel,
)
from roformer_ext.cli import main as cli
from roformer_ext.conversion.cli import main as convert
from roformer_ext.export import OnnxModel, export_onnx

EXPORT_LENGTH = 8
TEXTS = ["今天天气很好", "我想去公园玩", "今天天气不错，我想去公园玩。" * 12, "a"]  # the third: 170 tokens


def exported_classifier(folder: Path, config) -> tuple[RoFormerExtForSequenceClassification, Path]:
    torch.manual_seed(0)
    model = RoFormerExtForSequenceClassification(config).eval()
    return model, export_onnx(model, folder / "classifier.onnx", example_length=EXPORT_LENGTH)


def assert_equals_pytorch(model, onnx_model: OnnxModel, batch: int, length: int) -> None:
    """ONNX Runtime's logits equal PyTorch's within 1e-4, where a position error would move them >= 100x that."""
    input_ids, attention_mask, token_type_ids = random_inputs(batch=batch, seq=length, seed=length)
    run = lambda m: m(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits  # noqa: E731
    with torch.no_grad():
        expected = run(model).numpy()
    logits = onnx_model(input_ids, attention_mask, token_type_ids)["logits"]
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)  # shapes too
    assert_position_sensitive(model, run, 1e-4)


@pytest.fixture(scope="module")
def sensitive_classifier_onnx(tmp_path_factory):
    config = position_sensitive_config(num_labels=3, rope_parameters={"rope_type": "default", "pair_layout": "half"})
    return exported_classifier(tmp_path_factory.mktemp("onnx"), config)


@pytest.mark.parametrize("batch, length", [(1, EXPORT_LENGTH), (3, 64), (2, 300)])
def test_classifier_equals_pytorch_beyond_the_export_length(sensitive_classifier_onnx, batch, length):
    model, path = sensitive_classifier_onnx
    onnx_model = OnnxModel(path)
    assert_equals_pytorch(model, onnx_model, batch, length)
    input_ids = random_inputs(batch=batch, seq=length, seed=length)[0]  # no mask / token types: the model's defaults
    with torch.no_grad():
        expected = model(input_ids).logits.numpy()
    np.testing.assert_allclose(onnx_model(input_ids.numpy())["logits"], expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("encoding", ["learned", "tupe"])
def test_table_encodings_export_and_equal_pytorch(encoding, tmp_path):
    """Issue #31, 2: `learned` / `tupe` export and equal PyTorch; a row past the table stops (never wraps)."""
    table = 96  # the scaled positions of the 40-token rows (up to 78) stay inside it
    config = position_sensitive_config(num_labels=3, position_encoding=encoding, max_position_embeddings=table)
    model, path = exported_classifier(tmp_path, config)
    onnx_model = OnnxModel(path)
    for batch, length in [(1, EXPORT_LENGTH), (3, 40)]:
        assert_equals_pytorch(model, onnx_model, batch, length)
    too_long = random_inputs(batch=1, seq=table + 6, seed=1)
    with pytest.raises(Exception, match="out of data bounds"):
        onnx_model(*too_long)
    with pytest.raises(ValueError, match="max_position_embeddings"):  # eager PyTorch still says it clearly
        model(too_long[0])


def test_what_the_graph_cannot_take_or_export_is_refused(sensitive_classifier_onnx, tmp_path):
    onnx_model = OnnxModel(sensitive_classifier_onnx[1])
    ids = np.array([[2, 7, 9, 3, 2, 8, 3]])
    with pytest.raises(ValueError, match="padded batches.*position_ids.*pad the sequences"):
        onnx_model(ids, position_ids=np.array([[0, 1, 2, 3, 0, 1, 2]]))
    with pytest.raises(ValueError, match="cu_seq_lens_q"):
        onnx_model(ids, cu_seq_lens_q=np.array([0, 4, 7]))
    with pytest.raises(TypeError, match="Unexpected inputs \\['labels'\\]"):
        onnx_model(ids, labels=np.array([1]))
    with pytest.raises(TypeError, match="integers"):
        onnx_model(ids.astype(np.float32))
    with pytest.raises(ValueError, match="encode needs a sentence-embedding export"):
        onnx_model.encode(["x"])
    with pytest.raises(ValueError, match="keep generation in PyTorch"):
        export_onnx(RoFormerExtForCausalLM(tiny_config(is_decoder=True)), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="no pooler"):
        export_onnx(RoFormerExtModel(tiny_config()), tmp_path / "x.onnx", task="sentence-embedding")
    with pytest.raises(ValueError, match="serves task 'fill-mask'"):
        export_onnx(RoFormerExtForMaskedLM(tiny_config()), tmp_path / "x.onnx", task="sequence-classification")
    with pytest.raises(FileNotFoundError, match="roformer-ext export .* --int8"):
        OnnxModel.from_pretrained(tmp_path, file_name="model_int8.onnx")


def test_export_of_a_missing_folder_says_the_folder_does_not_exist(tmp_path, monkeypatch, capsys):
    """Defect (issue #31, 3): transformers read a missing folder as a Hub id. One line naming the folder, exit 1."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x")
    cases = {str(tmp_path / "missing"): "does not exist", "missing": "does not exist", "a-file": "is a file"}
    for model_dir, state in cases.items():
        with pytest.raises(SystemExit) as error:
            cli(["export", model_dir, str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert error.value.code == 1 and err.count("\n") == 1, err
        assert f"Model folder '{model_dir}' {state}" in err
        assert "Repo id" not in err and "huggingface.co" not in err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def sim_export(tmp_path_factory):
    """A converted RoFormer-Sim folder (a sentence-transformers folder) and its `roformer-ext export --int8`."""
    root = tmp_path_factory.mktemp("sim")
    assert convert(["original", str(FIXTURES / "roformer_sim"), str(root / "sim")]) == 0
    assert cli(["export", str(root / "sim"), str(root / "onnx"), "--int8", "--example-length", "8"]) == 0
    return root / "sim", root / "onnx"


def test_sim_embedding_cli_export_equals_sentence_transformers(sim_export):
    folder, out = sim_export
    assert sorted(p.name for p in out.glob("*.onnx")) == ["model.onnx", "model_int8.onnx"]
    expected = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, batch_size=3)
    onnx_model = OnnxModel.from_pretrained(out)
    assert onnx_model.tokenizer("x", return_tensors="np")["input_ids"].shape[1] == 3  # [CLS] x [SEP]
    embeddings = onnx_model.encode(TEXTS, batch_size=3)
    assert embeddings.shape == expected.shape and max(len(t) for t in TEXTS) > EXPORT_LENGTH * 10
    np.testing.assert_allclose(embeddings, expected, rtol=0, atol=1e-4)
    np.testing.assert_allclose(onnx_model.encode(TEXTS[0]), expected[0], rtol=0, atol=1e-4)
    normalized = onnx_model.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=-1), 1.0, rtol=1e-5)
    int8 = OnnxModel.from_pretrained(out, file_name="model_int8.onnx").encode(TEXTS, batch_size=3)
    assert int8.shape == expected.shape and np.isfinite(int8).all()


def test_cli_export_writes_all_or_nothing_and_never_replaces_what_it_did_not_write(sim_export, tmp_path, monkeypatch):
    """--force replaces only an earlier export, never inside the model folder; a failure half-way leaves nothing."""
    folder, out = sim_export
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with pytest.raises(SystemExit, match="1"):
        cli(["export", str(folder), str(out)])
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # untouched
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a roformer-ext folder"):
        export_module.export_folder(folder, foreign, force=True)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    with pytest.raises(ValueError, match="inside the source folder"):
        export_module.export_folder(folder, folder / "onnx")
    monkeypatch.setattr(export_module, "quantize_onnx", Mock(side_effect=RuntimeError("quantizer crashed")))
    target = tmp_path / "half-way"
    with pytest.raises(RuntimeError, match="quantizer crashed"):
        export_module.export_folder(folder, target, int8=True, example_length=4)
    assert list(tmp_path.iterdir()) == [foreign]  # no OUT_DIR, no .half-way.partial-* sibling
    monkeypatch.undo()
    written = export_module.export_folder(folder, target, example_length=4)
    assert written == [target.absolute() / "model.onnx"] and written[0].is_file()
    again = export_module.export_folder(folder, target, example_length=4, force=True)  # an earlier export: replaced
    assert again == written and sorted(p.name for p in target.glob("*.onnx")) == ["model.onnx"]


def test_sentence_transformers_onnx_backend_needs_optimum(sim_export):
    """What docs/deployment.md says: backend="onnx" needs optimum, which cannot be installed beside transformers 5."""
    folder, _ = sim_export
    with pytest.raises(Exception, match="(?i)requires installing optimum"):
        SentenceTransformer(str(folder), device="cpu", backend="onnx")
    assert Path(folder, "modules.json").is_file()
