"""`roformer-ext-convert transformers` on junnyu's layouts, rebuilt by his TF loader's naming rule, matches bert4keras."""

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from test_convert_original import FIXTURES, INPUTS, assert_generator, assert_reproduces, fixture_config
from test_from_transformers import their_model
from transformers import AutoModel

from roformer_ext.conversion.cli import main
from roformer_ext.conversion.from_transformers import convert_transformers_checkpoint, detect_source_kind
from roformer_ext.conversion.tf_checkpoint import read_tf_checkpoint

#: Each fixture as junnyu's Hub folder (config keys, architecture, weights file), its detection, what it becomes.
LAYOUTS = {
    "roformer_v1": dict(
        config={"norm_type": "layer_norm", "use_bias": True, "pooler_activation": "linear"},  # his defaults
        architecture="RoFormerForMaskedLM", weights="model.safetensors", kind="junnyu-v1", shown="junnyu v1",
        ours=("RoFormerExtForMaskedLM", None),
    ),
    "roformer_v2": dict(  # junnyu/roformer_v2_chinese_char_{small,base,large}
        config={"norm_type": "rms_norm", "use_bias": False},
        architecture="RoFormerForMaskedLM", kind="junnyu-v2", shown="junnyu V2", ours=("RoFormerExtForMaskedLM", None),
        weights="legacy.bin",  # his converter: torch.save(..., _use_new_zipfile_serialization=False)
    ),
    "roformer_sim": dict(  # junnyu/roformer_chinese_sim_char_{small,base}
        config={"pooler_activation": "linear"}, architecture="RoFormerForCausalLM", weights="model.safetensors",
        kind="junnyu-sim", shown="junnyu Sim", ours=("RoFormerExtForMaskedLM", "linear"),
    ),
    "roformer_sim_ft": dict(  # junnyu/roformer_chinese_sim_char_ft_{small,base}: a bare model, no prefix
        config={"pooler_activation": "linear"}, architecture="RoFormerModel", weights="pytorch_model.bin",
        kind="junnyu-sim", shown="junnyu Sim", ours=("RoFormerExtModel", "linear"), bare=True,
    ),
}  # fmt: skip


HIS_NAMES = {"kernel": "weight", "gamma": "weight", "beta": "bias"}


def junnyu_name(tf_name: str) -> str:
    """junnyu's state-dict key for a bert4keras variable (his TF loader's naming rule)."""
    parts = []
    for part in tf_name.replace("bert", "roformer").split("/"):
        layer = re.fullmatch(r"layer_(\d+)", part)
        parts += ["layer", layer[1]] if layer else [HIS_NAMES.get(part, part)]
    if parts[-1] == "output_bias":  # cls/predictions/output_bias -> the predictions' bias
        parts[-1] = "bias"
    if parts[-1].endswith("_embeddings"):
        parts.append("weight")
    return ".".join(parts)


def sinusoidal_table(positions: int, dim: int) -> torch.Tensor:
    """His `RoFormerSinusoidalPositionalEmbedding` weight: sin of the even angles, then cos of the odd ones."""
    angles = np.array([[p / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for p in range(positions)])
    return torch.from_numpy(np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)).float()


def junnyu_state(name: str) -> dict[str, torch.Tensor]:
    """What junnyu's model holds after loading the release: renamed variables, table, tied decoder (and bias)."""
    state = {}
    for tf_name, array in read_tf_checkpoint(FIXTURES / name).items():
        array = array.T if tf_name.endswith("kernel") else array
        state[junnyu_name(tf_name)] = torch.from_numpy(np.ascontiguousarray(array))
    config = fixture_config(name)
    table = sinusoidal_table(config["max_position_embeddings"], config["hidden_size"] // config["num_attention_heads"])
    state["roformer.encoder.embed_positions.weight"] = table
    if name != "roformer_sim_ft":  # his MLM head: the decoder tied to the embeddings (v1: the bias tied too)
        state["cls.predictions.decoder.weight"] = state["roformer.embeddings.word_embeddings.weight"]
        if "cls.predictions.bias" in state:
            state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    if LAYOUTS[name].get("bare"):
        state = {k.removeprefix("roformer."): v for k, v in state.items()}
    return state


def junnyu_config(name: str) -> dict:
    layout = LAYOUTS[name]
    bert_config = fixture_config(name)
    his = dict(model_type="roformer", architectures=[layout["architecture"]], embedding_size=bert_config["hidden_size"])
    return {**bert_config, **his, "layer_norm_eps": 1e-12, "pad_token_id": 0, "rotary_value": False, **layout["config"]}


def write_junnyu_folder(name: str, folder: Path, config: dict | None = None, state: dict | None = None) -> Path:
    """A Hub-style folder: config.json, the weights (default: his) in the layout's file format, vocab.txt."""
    folder.mkdir(parents=True)
    state = state or junnyu_state(name)
    weights = LAYOUTS[name]["weights"]
    if weights == "model.safetensors":
        tied = {k: v.clone() for k, v in state.items()}  # safetensors refuses shared storage
        save_file(tied, folder / weights, metadata={"format": "pt"})
    else:
        torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=weights != "legacy.bin")
    (folder / "config.json").write_text(json.dumps(config or junnyu_config(name), indent=2))
    (folder / "vocab.txt").write_bytes((FIXTURES / name / "vocab.txt").read_bytes())
    return folder


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Each layout converted once by the CLI (its stderr kept under "NAME/stderr")."""
    root = tmp_path_factory.mktemp("junnyu")
    out = {}
    for name in LAYOUTS:
        src = write_junnyu_folder(name, root / "hub" / name)
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert main(["transformers", str(src), str(root / name)]) == 0
        out[name], out[f"{name}/stderr"] = root / name, err.getvalue()
    return out


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("input_name", INPUTS)
def test_reproduces_bert4keras_outputs(converted, name, input_name):
    assert_reproduces(converted[name], name, input_name)


@pytest.mark.parametrize("name", LAYOUTS)
def test_written_folder(converted, name):
    layout = LAYOUTS[name]
    architecture, pooler = layout["ours"]
    assert f"roformer-ext-convert: Detected {layout['shown']} -> {architecture}.\n" in converted[f"{name}/stderr"]
    assert detect_source_kind(junnyu_config(name), junnyu_state(name)) == layout["kind"]
    config = json.loads((converted[name] / "config.json").read_text())
    v2 = name == "roformer_v2"
    assert config["architectures"] == [architecture] and config["model_type"] == "roformer_ext"
    assert config["use_bias"] is not v2 and config["norm_type"] == ("rms_scale_free" if v2 else "layer_norm")
    assert config["mlm_head_transform"] is not v2 and config["pooler_activation"] == pooler
    assert config["is_decoder"] is False and config["layer_norm_eps"] == 1e-12
    saved = load_file(converted[name] / "model.safetensors")
    prefix = "" if architecture == "RoFormerExtModel" else "roformer."
    assert (f"{prefix}pooler.dense.weight" in saved) is (pooler is not None)
    if architecture == "RoFormerExtForMaskedLM":
        assert ("lm_head.bias" in saved) is not v2  # V2's head: the tied decoder only
        assert not v2 or not any("transform" in k for k in saved)
    assert not any("bias" in k for k in saved if k.startswith(prefix + "layers.")) if v2 else True
    card = (converted[name] / "README.md").read_text()
    assert "junnyu's `roformer` package" in card and f"roformer-ext-convert transformers {name} {name}\n" in card
    assert_generator(converted[name], config, name == "roformer_sim")  # his Sim RoFormerForCausalLM: UniLM
    assert (converted[name] / "modules.json").is_file() is (pooler is not None)  # sentence-transformers


def test_missing_vocabulary_is_warned_about(tmp_path, capsys, caplog):
    """No vocab.txt: no tokenizer, no Sim generation config ([SEP] is read there); the CLI and logging say so."""
    src, out = write_junnyu_folder("roformer_sim", tmp_path / "hub"), tmp_path / "out"
    (src / "vocab.txt").unlink()
    with caplog.at_level("WARNING", logger="roformer_ext.conversion"):
        assert main(["transformers", str(src), str(out)]) == 0
    assert (
        f"roformer-ext-convert: warning: {src} has no vocab.txt, so {out} gets no tokenizer: put the model's "
        f"vocab.txt into {src} and convert again" in capsys.readouterr().err
    )
    assert [r.levelname for r in caplog.records if "has no vocab.txt" in r.getMessage()] == ["WARNING"]
    assert (out / "model.safetensors").is_file() and not (out / "tokenizer_config.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["decoder_attention"] == "unilm" and not (out / "generation_config.json").exists()
    assert (out / "modules.json").is_file()


def test_detection_of_transformers_folders():
    plain = {"model_type": "roformer", "hidden_size": 64}
    assert detect_source_kind(plain, ["roformer.embeddings.word_embeddings.weight"]) == "transformers"
    assert detect_source_kind({**plain, "use_bias": False}, []) == "junnyu-v2"
    assert detect_source_kind({**plain, "norm_type": "layer_norm"}, ["roformer.pooler.dense.weight"]) == "junnyu-sim"


def test_junnyu_key_names():
    """The helper's names are his: spot checks against the names his modeling_roformer.py defines."""
    query = "roformer.encoder.layer.1.attention.self.query.weight"
    assert junnyu_name("bert/encoder/layer_1/attention/self/query/kernel") == query
    assert junnyu_name("bert/embeddings/word_embeddings") == "roformer.embeddings.word_embeddings.weight"
    assert junnyu_name("bert/encoder/layer_0/output/LayerNorm/beta") == "roformer.encoder.layer.0.output.LayerNorm.bias"
    assert junnyu_name("cls/predictions/output_bias") == "cls.predictions.bias"
    assert junnyu_name("bert/pooler/dense/kernel") == "roformer.pooler.dense.weight"
    v2 = junnyu_state("roformer_v2")
    assert len(v2) == 14 + 1 + 1 and "cls.predictions.decoder.weight" in v2 and "cls.predictions.bias" not in v2


def test_pooler_without_its_activation_needs_the_option(tmp_path, capsys):
    config = {k: v for k, v in junnyu_config("roformer_sim").items() if k != "pooler_activation"}
    src = write_junnyu_folder("roformer_sim", tmp_path / "sim", config)
    assert main(["transformers", str(src), str(tmp_path / "out")]) == 1
    assert "no pooler_activation; pass --pooler-activation linear (RoFormer-Sim) or tanh" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["transformers", str(src), str(tmp_path / "out"), "--pooler-activation", "linear"]) == 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["pooler_activation"] == "linear"
    assert "--pooler-activation linear" in (tmp_path / "out" / "README.md").read_text()


def _untie(state: dict) -> dict:
    return {**state, "cls.predictions.decoder.weight": state["cls.predictions.decoder.weight"] + 1.0}


# fmt: off
REFUSALS = {  # layout, config changes, state edit, extra arguments, key phrase of the error
    "unsupported pooler activation": ("roformer_sim", {"pooler_activation": "relu"}, None, [], "Unknown pooler_activation 'relu'"),
    "--pooler-activation without a pooler": ("roformer_v2", {}, None, ["--pooler-activation", "tanh"], "the checkpoint has no pooler"),
    "untied decoder": ("roformer_v2", {}, _untie, [], "differs from the word embeddings"),
    # a V2 config over v1 weights: the biases and norms have nowhere to go, and the error says which
    "V2 config over v1 weights": ("roformer_v1", {"use_bias": False, "norm_type": "rms_norm"}, None, [], r"unexpected: .*roformer\.embeddings\.norm\.bias"),
}
# fmt: on


@pytest.mark.parametrize("case", REFUSALS)
def test_refusals(tmp_path, capsys, case):
    name, changes, edit, extra, phrase = REFUSALS[case]
    state = edit(junnyu_state(name)) if edit else None
    src = write_junnyu_folder(name, tmp_path / "src", {**junnyu_config(name), **changes}, state)
    assert main(["transformers", str(src), str(tmp_path / "out"), *extra]) == 1
    assert re.search(phrase, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_use_bias_and_norm_type_are_independent(tmp_path):
    """`use_bias: false` with `norm_type: layer_norm`: his code keeps the LayerNorms and drops only the biases."""
    src = tmp_path / "theirs"
    theirs = their_model("RoFormerModel", src)
    state = load_file(src / "model.safetensors")
    linear_biases = [k for k in state if k.endswith("bias") and "LayerNorm" not in k]
    with torch.no_grad():  # their model without Linear biases computes what a bias-free model does
        for name, param in theirs.named_parameters():
            if "roformer." + name in linear_biases or name in linear_biases:
                param.zero_()
    save_file({k: v for k, v in state.items() if k not in linear_biases}, src / "model.safetensors")
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "use_bias": False, "norm_type": "layer_norm"}))
    ours = convert_transformers_checkpoint(src, tmp_path / "ours")
    saved = json.loads((ours / "config.json").read_text())
    assert saved["use_bias"] is False and saved["norm_type"] == "layer_norm"
    ids = torch.tensor([[5, 17, 42, 8, 9]])
    with torch.no_grad():
        expected = theirs(ids).last_hidden_state
        actual = AutoModel.from_pretrained(ours).eval()(ids).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
