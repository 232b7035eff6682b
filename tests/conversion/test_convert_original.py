"""`roformer-ext-convert original`: fidelity to bert4keras' own outputs, the written folder, and clear failures.

The fixtures are tiny checkpoints written by bert4keras with its reference outputs (tests/fixtures/original_tf).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tf_checkpoint_writer import write_tf_checkpoint
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

import roformer_ext  # noqa: F401  (registers the Auto classes)
from roformer_ext.conversion import CheckpointConversionError
from roformer_ext.conversion.cli import main
from roformer_ext.conversion.original import (
    convert_original_checkpoint,
    detect_variant,
    map_original_variables,
    plan_conversion,
)
from roformer_ext.conversion.output_folder import OutputExistsError, OutputOverlapsSourceError, output_folder
from roformer_ext.conversion.tf_checkpoint import TFCheckpointReader, read_tf_checkpoint
from roformer_ext.masking_roformer_ext import unilm_attention_mask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "original_tf"
NAMES = ("roformer_v1", "roformer_v2", "roformer_sim", "roformer_sim_ft")
INPUTS = ("single", "pair", "masked", "batch_padded", "long")
SOURCE_FILES = ("bert_config.json", "vocab.txt", "checkpoint")


def tolerance(array_name: str) -> float:
    return 2e-4 if "logits" in array_name else 1e-4


def copy_fixture(name: str, target: Path) -> Path:
    shutil.copytree(FIXTURES / name, target)
    for path in target.iterdir():
        path.chmod(0o644)
    return target


def release_folder(tmp_path: Path, tensors: dict, bert_config: dict, name: str = "release") -> Path:
    """A release-style folder from arbitrary variables (for layouts no fixture has)."""
    folder = tmp_path / name
    write_tf_checkpoint(folder / "bert_model.ckpt", tensors)
    (folder / "bert_config.json").write_text(json.dumps(bert_config))
    shutil.copyfile(FIXTURES / "roformer_v1" / "vocab.txt", folder / "vocab.txt")
    return folder


def assert_no_local_paths(folder: Path, *paths: Path) -> None:
    """No file written into `folder` names these absolute paths (a model card is published as it is)."""
    for path in folder.iterdir():
        data = path.read_bytes()
        for local in paths:
            assert str(local).encode() not in data, f"{path.name} contains {local}"


def fixture_config(name: str) -> dict:
    return json.loads((FIXTURES / name / "bert_config.json").read_text())


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Each fixture converted once: by the CLI (default pooler) and, with a pooler, with --pooler-activation tanh."""
    root = tmp_path_factory.mktemp("converted")
    out = {}
    for name in NAMES:
        assert main(["original", str(FIXTURES / name), str(root / name)]) == 0
        out[name] = root / name
    for name in ("roformer_sim", "roformer_sim_ft"):
        convert_original_checkpoint(FIXTURES / name, root / f"{name}_tanh", pooler_activation="tanh")
        out[f"{name}_tanh"] = root / f"{name}_tanh"
    return out


def inputs_of(reference, name: str) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.from_numpy(reference[f"{name}/token_ids"]).long(),
        "token_type_ids": torch.from_numpy(reference[f"{name}/segment_ids"]).long(),
        "attention_mask": torch.from_numpy(reference[f"{name}/attention_mask"]).long(),
    }


def compare(reference, key: str, ours: torch.Tensor) -> None:
    """Compare on valid positions (attention_mask == 1): bert4keras computes padded queries differently."""
    name, array = key.split("/")
    expected, actual = reference[key], ours.detach().numpy()
    assert actual.shape == expected.shape, key
    valid = reference[f"{name}/attention_mask"].astype(bool)
    if array == "hidden_states":
        expected, actual = expected[:, valid], actual[:, valid]
    elif "pooler" not in array:
        expected, actual = expected[valid], actual[valid]
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tolerance(array), err_msg=key)


def run_outputs(folder: Path, reference, name: str, unilm: bool = False) -> dict[str, torch.Tensor]:
    """Our counterpart of every array bert4keras stored, through AutoModel / AutoModelForMaskedLM."""
    batch = inputs_of(reference, name)
    prefix = "unilm_" if unilm else ""
    if unilm:
        batch["attention_mask"] = unilm_attention_mask(batch["token_type_ids"], batch["attention_mask"])
    outputs = {}
    with torch.no_grad():
        base = AutoModel.from_pretrained(folder).eval()
        result = base(**batch, output_hidden_states=True)
        outputs[f"{prefix}sequence_output"] = result.last_hidden_state
        outputs["hidden_states"] = torch.stack(result.hidden_states)
        if result.pooler_output is not None:
            outputs[f"{prefix}pooler_output_{base.config.pooler_activation}"] = result.pooler_output
        if "RoFormerExtForMaskedLM" in base.config.architectures:
            logits = AutoModelForMaskedLM.from_pretrained(folder).eval()(**batch).logits
            outputs[f"{prefix}mlm_logits"] = logits
            outputs[f"{prefix}mlm_probs"] = logits.softmax(-1)
    return outputs


# ----------------------------------------------------------------------------------------- fidelity
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("input_name", INPUTS)
def test_reproduces_bert4keras_outputs(converted, name, input_name):
    reference = np.load(FIXTURES / name / "reference_outputs.npz")
    ours = run_outputs(converted[name], reference, input_name)
    stored = {key.split("/")[1] for key in reference.files if key.startswith(f"{input_name}/")}
    wanted = stored - {"token_ids", "segment_ids", "attention_mask", "pooler_output_tanh"}
    wanted = {w for w in wanted if not w.startswith("unilm_")}
    assert wanted <= set(ours), f"no counterpart for {sorted(wanted - set(ours))}"
    for array in sorted(wanted):
        compare(reference, f"{input_name}/{array}", ours[array])


@pytest.mark.parametrize("name", ["roformer_sim", "roformer_sim_ft"])
@pytest.mark.parametrize("input_name", INPUTS)
def test_tanh_pooler(converted, name, input_name):
    reference = np.load(FIXTURES / name / "reference_outputs.npz")
    ours = run_outputs(converted[f"{name}_tanh"], reference, input_name)
    compare(reference, f"{input_name}/pooler_output_tanh", ours["pooler_output_tanh"])


@pytest.mark.parametrize("input_name", ["pair", "batch_padded"])
def test_sim_unilm_outputs(converted, input_name):
    reference = np.load(FIXTURES / "roformer_sim" / "reference_outputs.npz")
    ours = run_outputs(converted["roformer_sim"], reference, input_name, unilm=True)
    arrays = [k for k in reference.files if k.startswith(f"{input_name}/unilm_")]
    assert len(arrays) == 4
    for key in arrays:
        compare(reference, key, ours[key.split("/")[1]])


def test_padding_changes_nothing_on_valid_positions(converted):
    """Each padded row equals the same row run alone (what bert4keras' own check shows)."""
    reference = np.load(FIXTURES / "roformer_v1" / "reference_outputs.npz")
    batch = inputs_of(reference, "batch_padded")
    model = AutoModelForMaskedLM.from_pretrained(converted["roformer_v1"]).eval()
    with torch.no_grad():
        padded = model(**batch).logits
        for row in range(3):
            length = int(batch["attention_mask"][row].sum())
            alone = model(**{k: v[row : row + 1, :length] for k, v in batch.items()}).logits
            torch.testing.assert_close(padded[row : row + 1, :length], alone, rtol=0, atol=2e-4)


# -------------------------------------------------------------------------------------- the folder
EXPECTED = {
    "roformer_v1": ("v1", "RoFormerExtForMaskedLM", None),
    "roformer_v2": ("v2", "RoFormerExtForMaskedLM", None),
    "roformer_sim": ("sim", "RoFormerExtForMaskedLM", "linear"),
    "roformer_sim_ft": ("sim", "RoFormerExtModel", "linear"),
}


@pytest.mark.parametrize("name", NAMES)
def test_written_folder(converted, name):
    folder = converted[name]
    variant, architecture, pooler = EXPECTED[name]
    assert detect_variant(TFCheckpointReader(FIXTURES / name).variables) == variant
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert config["model_type"] == "roformer_ext" and "AutoConfig" in config["auto_map"]
    assert config["layer_norm_eps"] == 1e-7 and config["pooler_activation"] == pooler
    assert config["hidden_act"] == ("relu" if variant == "v2" else "gelu")
    assert config["use_bias"] is (variant != "v2")
    assert config["norm_type"] == ("rms_scale_free" if variant == "v2" else "layer_norm")
    assert config["rope_parameters"]["pair_layout"] == "interleaved"
    assert (folder / "model.safetensors").is_file()
    assert (folder / "vocab.txt").read_bytes() == (FIXTURES / name / "vocab.txt").read_bytes()
    card = (folder / "README.md").read_text()
    assert f"Variant: **{variant}**" in card and "arXiv:2104.09864" in card
    assert f"roformer-ext-convert original {name} {name}\n" in card  # absolute arguments: folder names only
    assert_no_local_paths(folder, FIXTURES, folder.parent)
    assert AutoConfig.from_pretrained(folder).model_type == "roformer_ext"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left
    generator = name == "roformer_sim"  # Sim with its MLM head: the UniLM seq2seq model, stopping at [SEP]
    assert config["decoder_attention"] == ("unilm" if generator else "causal")
    assert (folder / "generation_config.json").is_file() is generator
    if generator:
        generation = json.loads((folder / "generation_config.json").read_text())
        assert (generation["eos_token_id"], generation["pad_token_id"]) == (3, 0)  # [SEP], [PAD] in vocab.txt
        assert "SimilarSentenceGenerator" in card and "SentenceTransformer(folder)" in card
    for st_file in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        assert (folder / st_file).is_file() is (pooler is not None)  # SentenceTransformer(folder): pooler_output


@pytest.mark.parametrize("name", NAMES)
def test_weights_are_the_checkpoint_values(converted, name):
    """Spot checks of the map itself: a transposed kernel, a bias, a norm and the tied decoder."""
    from safetensors.torch import load_file

    tf = read_tf_checkpoint(FIXTURES / name)
    saved = load_file(converted[name] / "model.safetensors")
    prefix = "" if EXPECTED[name][1] == "RoFormerExtModel" else "roformer."
    kernel = tf["bert/encoder/layer_1/attention/self/query/kernel"]
    np.testing.assert_array_equal(saved[f"{prefix}layers.1.attention.query.weight"].numpy(), kernel.T)
    if "bert/encoder/layer_1/output/LayerNorm/gamma" in tf:
        np.testing.assert_array_equal(
            saved[f"{prefix}layers.1.output_norm.weight"].numpy(), tf["bert/encoder/layer_1/output/LayerNorm/gamma"]
        )
        np.testing.assert_array_equal(
            saved[f"{prefix}layers.0.feed_forward.output.bias"].numpy(), tf["bert/encoder/layer_0/output/dense/bias"]
        )
    if "bert/pooler/dense/kernel" in tf:
        np.testing.assert_array_equal(saved[f"{prefix}pooler.dense.weight"].numpy(), tf["bert/pooler/dense/kernel"].T)
    if EXPECTED[name][1] == "RoFormerExtForMaskedLM":
        model = AutoModelForMaskedLM.from_pretrained(converted[name])
        assert model.lm_head.decoder.weight.data_ptr() == model.roformer.embeddings.word_embeddings.weight.data_ptr()


@pytest.mark.parametrize("name", ["roformer_v1", "roformer_sim_ft"])
def test_tokenizer_reproduces_fixture_ids(converted, name):
    reference = np.load(FIXTURES / name / "reference_outputs.npz")
    from transformers import AutoTokenizer

    from roformer_ext.tokenization_roformer_ext import RoFormerExtTokenizerFast

    tokenizer = AutoTokenizer.from_pretrained(converted[name])
    assert isinstance(tokenizer, RoFormerExtTokenizerFast)
    assert tokenizer.segmenter is None  # a char vocabulary: no jieba
    single = tokenizer("今天天气很好，我想去公园玩。")
    assert single["input_ids"] == reference["single/token_ids"][0].tolist()
    pair = tokenizer("我想去公园玩", "今天天气很好吗？")
    assert pair["input_ids"] == reference["pair/token_ids"][0].tolist()
    assert pair["token_type_ids"] == reference["pair/segment_ids"][0].tolist()


def test_word_vocabulary_gets_a_jieba_tokenizer(tmp_path):
    """The word-level v1 release (chinese_roformer_L-12_H-768_A-12) needs jieba pre-tokenization."""
    src = copy_fixture("roformer_v2", tmp_path / "src")
    chars = (src / "vocab.txt").read_text(encoding="utf-8").splitlines()
    words = ["今天", "天气", "公园", "我们", "一起"]
    (src / "vocab.txt").write_text("\n".join(chars[: 128 - len(words)] + words) + "\n", encoding="utf-8")
    out = convert_original_checkpoint(src, tmp_path / "out")
    assert json.loads((out / "tokenizer_config.json").read_text())["segmenter"] == "jieba"


REMOTE_SCRIPT = """
import sys
import numpy as np, torch
from transformers import AutoModelForMaskedLM, AutoTokenizer
folder, npz = sys.argv[1], sys.argv[2]
model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
assert "roformer_ext" not in sys.modules and type(model).__module__.startswith("transformers_modules")
reference = np.load(npz)
assert tokenizer("今天天气很好，我想去公园玩。")["input_ids"] == reference["single/token_ids"][0].tolist()
with torch.no_grad():
    logits = model(torch.from_numpy(reference["single/token_ids"]).long()).logits
print("max_diff", float(np.abs(logits.numpy() - reference["single/mlm_logits"]).max()))
"""


def test_converted_folder_works_as_remote_code_in_a_fresh_process(converted, tmp_path):
    """Without roformer_ext importable, trust_remote_code=True runs the copied code and gives the same logits."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), PYTHONNOUSERSITE="1")
    npz = FIXTURES / "roformer_v1" / "reference_outputs.npz"
    command = [sys.executable, "-I", "-c", REMOTE_SCRIPT, str(converted["roformer_v1"]), str(npz)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split("max_diff")[-1]) < 2e-4


# -------------------------------------------------------------------------------------- gpt, E != H
def test_gpt_variant_is_a_causal_lm(tmp_path):
    out = convert_original_checkpoint(FIXTURES / "roformer_v1", tmp_path / "gpt", variant="gpt")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["RoFormerExtForCausalLM"] and config["is_decoder"] is True
    gpt = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[2, 45, 46, 46, 47, 48, 49, 5, 50, 51]])
    mlm_folder = convert_original_checkpoint(FIXTURES / "roformer_v1", tmp_path / "mlm")
    mlm = AutoModelForMaskedLM.from_pretrained(mlm_folder).eval()
    lower_triangle = torch.ones(10, 10, dtype=torch.bool).tril()[None, None]  # bert4keras application='lm'
    with torch.no_grad():
        causal = gpt(ids).logits
        torch.testing.assert_close(causal, mlm(ids, attention_mask=lower_triangle).logits, rtol=0, atol=2e-4)
        torch.testing.assert_close(causal[:, :4], gpt(ids[:, :4]).logits, rtol=0, atol=2e-4)
        generated = gpt.generate(ids[:, :3], max_new_tokens=3, do_sample=False)
    assert generated.shape == (1, 6)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_embedding_size_differs_from_hidden(tmp_path):
    """ALBERT-style factorised embeddings: the mapping in is the projection, the MLM transform maps back to E."""
    bert_config = {**fixture_config("roformer_v1"), "embedding_size": 32}
    rng = np.random.default_rng(7)
    specs = map_original_variables(bert_config, "v1", with_pooler=False, with_mlm_head=True)
    tensors = {s.tf_name: rng.normal(size=s.tf_shape).astype(np.float32) * 0.3 for s in specs}
    assert tensors["bert/encoder/embedding_hidden_mapping_in/kernel"].shape == (32, 64)
    out = convert_original_checkpoint(release_folder(tmp_path, tensors, bert_config), tmp_path / "out")
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    assert model.config.embedding_size == 32
    ids, segments = torch.tensor([[2, 45, 46, 47, 3]]), torch.tensor([[0, 0, 0, 1, 1]])
    with torch.no_grad():
        result = model(ids, token_type_ids=segments, output_hidden_states=True)
        last = model.roformer(ids, token_type_ids=segments).last_hidden_state.numpy()
    t = tensors
    embedded = (
        t["bert/embeddings/word_embeddings"][ids[0].numpy()]
        + t["bert/embeddings/token_type_embeddings"][segments[0].numpy()]
    )
    embedded = layer_norm(embedded, t["bert/embeddings/LayerNorm/gamma"], t["bert/embeddings/LayerNorm/beta"])
    projected = (
        embedded @ t["bert/encoder/embedding_hidden_mapping_in/kernel"]
        + t["bert/encoder/embedding_hidden_mapping_in/bias"]
    )
    np.testing.assert_allclose(result.hidden_states[0][0].numpy(), projected, rtol=0, atol=1e-4)
    # MLM head: dense H -> E, exact gelu, LayerNorm, tied embeddings, output bias
    dense = last[0] @ t["cls/predictions/transform/dense/kernel"] + t["cls/predictions/transform/dense/bias"]
    dense = torch.nn.functional.gelu(torch.from_numpy(dense)).numpy()
    normed = layer_norm(
        dense, t["cls/predictions/transform/LayerNorm/gamma"], t["cls/predictions/transform/LayerNorm/beta"]
    )
    logits = normed @ t["bert/embeddings/word_embeddings"].T + t["cls/predictions/output_bias"]
    np.testing.assert_allclose(result.logits[0].numpy(), logits, rtol=0, atol=2e-4)


def test_v2_with_factorised_embeddings_is_refused(tmp_path):
    bert_config = {**fixture_config("roformer_v2"), "embedding_size": 32}
    specs = map_original_variables(bert_config, "v2", with_pooler=False, with_mlm_head=True)
    tensors = {s.tf_name: np.zeros(s.tf_shape, np.float32) for s in specs}
    with pytest.raises(CheckpointConversionError, match="Output-Mapping"):
        convert_original_checkpoint(release_folder(tmp_path, tensors, bert_config), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------- clear failures
def assert_cli_fails(capsys, tmp_path, src: Path, pattern: str, *extra: str) -> str:
    out = tmp_path / "out"
    assert main(["original", str(src), str(out), *extra]) != 0
    message = capsys.readouterr().err
    assert "roformer-ext-convert: error:" in message
    assert __import__("re").search(pattern, message), message
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # no temporary folder either
    return message


@pytest.mark.parametrize(
    "missing", ["bert_config.json", "vocab.txt", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"]
)
def test_missing_source_file(tmp_path, capsys, missing):
    src = copy_fixture("roformer_v1", tmp_path / "src")
    (src / missing).unlink()
    assert_cli_fails(capsys, tmp_path, src, rf"(Missing|No TF checkpoint).*{missing.split('.')[0]}")


def test_missing_unexpected_and_misshaped_variables_are_all_listed(tmp_path, capsys):
    tensors = read_tf_checkpoint(FIXTURES / "roformer_v1")
    del tensors["bert/encoder/layer_1/attention/self/key/bias"]
    tensors["bert/encoder/layer_1/attention/self/extra/kernel"] = np.zeros((64, 64), np.float32)
    tensors["bert/encoder/layer_0/intermediate/dense/kernel"] = np.zeros((64, 96), np.float32)
    src = release_folder(tmp_path, tensors, fixture_config("roformer_v1"))
    message = assert_cli_fails(capsys, tmp_path, src, "does not match a RoFormer v1")
    assert "missing variable bert/encoder/layer_1/attention/self/key/bias (expected shape [64])" in message
    assert "unexpected variable bert/encoder/layer_1/attention/self/extra/kernel (shape [64, 64])" in message
    assert "variable bert/encoder/layer_0/intermediate/dense/kernel has shape [64, 96], expected [64, 128]" in message


def test_config_that_does_not_fit_the_checkpoint(tmp_path, capsys):
    src = copy_fixture("roformer_v2", tmp_path / "src")
    (src / "bert_config.json").write_text(json.dumps({**fixture_config("roformer_v2"), "num_hidden_layers": 3}))
    message = assert_cli_fails(capsys, tmp_path, src, "missing variable bert/encoder/layer_2/")
    assert "bert/encoder/layer_2/output/dense/kernel (expected shape [128, 64])" in message


def test_vocabulary_larger_than_the_embeddings(tmp_path, capsys):
    src = copy_fixture("roformer_v1", tmp_path / "src")
    with open(src / "vocab.txt", "a", encoding="utf-8") as handle:
        handle.write("多\n余\n")
    assert_cli_fails(capsys, tmp_path, src, "vocab.txt has 130 entries but the embeddings only 128 rows")


def test_unknown_variant(tmp_path, capsys):
    tensors = {"model/dense/kernel": np.zeros((4, 4), np.float32), "model/dense/bias": np.zeros(4, np.float32)}
    src = release_folder(tmp_path, tensors, fixture_config("roformer_v1"))
    assert_cli_fails(capsys, tmp_path, src, r"Unknown checkpoint variant.*model/dense/kernel")
    with pytest.raises(CheckpointConversionError) as info:
        convert_original_checkpoint(src, tmp_path / "out")
    assert isinstance(info.value, ValueError)


def test_norms_without_biases_is_no_known_variant(tmp_path, capsys):
    tensors = {
        k: v for k, v in read_tf_checkpoint(FIXTURES / "roformer_v1").items() if not k.endswith(("bias", "beta"))
    }
    src = release_folder(tmp_path, tensors, fixture_config("roformer_v1"))
    assert_cli_fails(capsys, tmp_path, src, "Unknown checkpoint variant: it has norm parameters and no biases")


def test_forcing_the_wrong_variant_lists_the_differences(tmp_path, capsys):
    message = assert_cli_fails(
        capsys, tmp_path, FIXTURES / "roformer_v1", "does not match a RoFormer v2", "--variant", "v2"
    )
    assert "unexpected variable bert/embeddings/LayerNorm/gamma (shape [64])" in message
    message = assert_cli_fails(
        capsys, tmp_path, FIXTURES / "roformer_v2", "does not match a RoFormer sim", "--variant", "sim"
    )
    assert "missing variable bert/pooler/dense/kernel" in message


def test_pooler_activation_without_a_pooler(tmp_path, capsys):
    assert_cli_fails(capsys, tmp_path, FIXTURES / "roformer_v1", "no pooler", "--pooler-activation", "tanh")


def test_truncated_data_leaves_nothing(tmp_path, capsys):
    src = copy_fixture("roformer_sim", tmp_path / "src")
    data = src / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-1000])
    assert_cli_fails(capsys, tmp_path, src, "Truncated checkpoint data")


def test_corrupted_index_leaves_nothing(tmp_path, capsys):
    src = copy_fixture("roformer_sim", tmp_path / "src")
    index = bytearray((src / "bert_model.ckpt.index").read_bytes())
    index[100] ^= 0xFF
    (src / "bert_model.ckpt.index").write_bytes(bytes(index))
    assert_cli_fails(capsys, tmp_path, src, "Corrupted checkpoint index")


def test_optimizer_state_is_ignored(tmp_path):
    tensors = read_tf_checkpoint(FIXTURES / "roformer_v2")
    tensors["global_step"] = np.array(1000, np.int64)
    tensors["bert/encoder/layer_0/output/dense/kernel/adam_m"] = np.zeros((128, 64), np.float32)
    tensors["bert/encoder/layer_0/output/dense/kernel/AdamWeightDecayOptimizer_1"] = np.zeros((128, 64), np.float32)
    src = release_folder(tmp_path, tensors, fixture_config("roformer_v2"))
    plan = plan_conversion(TFCheckpointReader(src).variables, fixture_config("roformer_v2"))
    assert plan.variant == "v2" and len(plan.ignored) == 3 and "global_step" in plan.ignored
    convert_original_checkpoint(src, tmp_path / "out")


def test_existing_output_needs_force(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["original", str(FIXTURES / "roformer_v2"), str(out)]) == 0
    (out / "stale.txt").write_text("from an earlier run")
    capsys.readouterr()
    assert main(["original", str(FIXTURES / "roformer_v2"), str(out)]) == 1
    assert "already exists" in capsys.readouterr().err and (out / "stale.txt").exists()
    assert main(["original", str(FIXTURES / "roformer_v1"), str(out), "--force"]) == 0
    assert not (out / "stale.txt").exists()
    assert json.loads((out / "config.json").read_text())["use_bias"] is True  # the v1 conversion replaced v2's


def test_force_never_replaces_a_folder_it_did_not_write(tmp_path, capsys):
    """--force replaces an earlier roformer-ext output or an empty folder, not the user's other folders."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["original", str(FIXTURES / "roformer_v2"), str(out), "--force"]) == 1
    err = capsys.readouterr().err
    assert "is not a roformer-ext folder" in err and "Traceback" not in err
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()  # an empty folder may be replaced
    assert main(["original", str(FIXTURES / "roformer_v2"), str(out), "--force"]) == 0
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("roformer_v1", "Variant v1 (detected): RoFormer v1 -> RoFormerExtForMaskedLM."),
        ("roformer_v2", "Variant v2 (detected): RoFormer-V2 -> RoFormerExtForMaskedLM."),
        ("roformer_sim", "Variant sim (detected): RoFormer-Sim -> RoFormerExtForMaskedLM, pooler activation linear."),
        ("roformer_sim_ft", "Variant sim (detected): RoFormer-Sim -> RoFormerExtModel, pooler activation linear."),
    ],
)
def test_cli_prints_the_detected_variant(tmp_path, capsys, name, expected):
    assert main(["original", str(FIXTURES / name), str(tmp_path / "out")]) == 0
    assert f"roformer-ext-convert: {expected}\n" in capsys.readouterr().err


def test_cli_prints_a_forced_variant(tmp_path, capsys):
    assert main(["original", str(FIXTURES / "roformer_v1"), str(tmp_path / "out"), "--variant", "gpt"]) == 0
    assert "Variant gpt (forced with --variant): RoFormer-GPT -> RoFormerExtForCausalLM." in capsys.readouterr().err


def test_model_card_keeps_relative_arguments(tmp_path, monkeypatch):
    """Run from the folder above the fixtures: the card records the relative paths exactly as typed."""
    monkeypatch.chdir(FIXTURES.parent)
    out = tmp_path / "out"
    assert main(["original", "original_tf/roformer_v2", str(out), "--variant", "v2"]) == 0
    card = (out / "README.md").read_text()
    assert "roformer-ext-convert original original_tf/roformer_v2 out --variant v2\n" in card
    assert "# roformer_v2 (roformer-ext)" in card
    assert_no_local_paths(out, FIXTURES, tmp_path)


def test_python_api_card_has_no_local_paths(tmp_path):
    out = convert_original_checkpoint(FIXTURES / "roformer_sim", tmp_path / "sim", pooler_activation="tanh")
    card = (out / "README.md").read_text()
    assert "roformer-ext-convert original roformer_sim sim --pooler-activation tanh\n" in card
    assert_no_local_paths(out, FIXTURES, tmp_path)


def test_cli_transformers_subcommand_reports_errors(tmp_path, capsys):
    assert main(["transformers", str(tmp_path / "nowhere"), str(tmp_path / "out")]) != 0
    assert "roformer-ext-convert: error:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_python_dash_m_runs_the_cli(tmp_path):
    import subprocess
    import sys

    src_root = Path(roformer_ext.__file__).parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": str(src_root), "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "roformer_ext.conversion",
        "original",
        str(tmp_path / "none"),
        str(tmp_path / "out"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1 and "Source folder" in result.stderr and "Traceback" not in result.stderr


def test_cli_help_and_bad_variant(capsys):
    with pytest.raises(SystemExit) as info:
        main(["original", "--help"])
    assert info.value.code == 0 and "--pooler-activation" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["original", "a", "b", "--variant", "v3"])
    assert info.value.code != 0 and "invalid choice: 'v3'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ output_folder
def test_output_folder_is_all_or_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with output_folder(out) as tmp:
            (tmp / "half.json").write_text("{}")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with output_folder(out) as tmp:
        assert tmp.parent == tmp_path and tmp != out and not out.exists()
        (tmp / "config.json").write_text('{"model_type": "roformer_ext"}')  # what a converter writes
    assert [p.name for p in out.iterdir()] == ["config.json"]
    with pytest.raises(OutputExistsError):
        with output_folder(out):
            pass
    with pytest.raises(KeyboardInterrupt):  # force keeps the old folder until the new one is complete
        with output_folder(out, force=True) as tmp:
            raise KeyboardInterrupt
    assert [p.name for p in out.iterdir()] == ["config.json"]
    with output_folder(out, force=True) as tmp:
        (tmp / "new.json").write_text("{}")
    assert [p.name for p in out.iterdir()] == ["new.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(OutputExistsError, match="is not a roformer-ext folder"):  # new.json is no converter output
        with output_folder(out, force=True):
            pass
    assert [p.name for p in out.iterdir()] == ["new.json"]


def test_output_folder_refuses_sources(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for out in (src, src / "inner", tmp_path):
        with pytest.raises(OutputOverlapsSourceError):
            with output_folder(out, force=True, sources=[src]):
                pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"] and not any(src.iterdir())
