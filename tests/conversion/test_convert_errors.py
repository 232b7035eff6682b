"""`roformer-ext-convert` (`cli.main`) on odd input or OUT paths: one error line, no traceback, nothing left behind."""

import errno
import importlib
import json
import os
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file
from test_convert_safety import SOURCES, error_line, snapshot

from roformer_ext.conversion.cli import main

CONFIG_NAME = {"original": "bert_config.json", "transformers": "config.json"}


def edit_config(src: Path, command: str, **changes) -> Path:
    path = src / CONFIG_NAME[command]
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return path


def nothing_written(tmp_path: Path, src: Path) -> bool:
    """Only the source folder is left in tmp_path: no output, no temporary sibling."""
    return [p.name for p in tmp_path.iterdir()] == [src.name]


def _as_bin(src: Path, damage: str) -> None:
    """The weights as pytorch_model.bin: truncated, garbage, or not a state dict."""
    state = load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    weights = src / "pytorch_model.bin"
    torch.save(state if damage != "not_a_state_dict" else [1, 2, 3], weights)
    data = weights.read_bytes()
    if damage != "not_a_state_dict":
        weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else os.urandom(256))


def _sharded(src: Path) -> None:
    (src / "model.safetensors").rename(src / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _damage_safetensors(src: Path, damage: str) -> None:
    data = (src / "model.safetensors").read_bytes()
    (src / "model.safetensors").write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\0" * 7 + data[7:])


BOTH = tuple(CONFIG_NAME)
# fmt: off
BAD_INPUT = {  # commands, damage to the source, key phrases of the error line ({src}: the source folder)
    "unknown hidden_act": (BOTH, lambda src, c: edit_config(src, c, hidden_act="swishy"), ["hidden_act 'swishy'", "gelu", "{config}"]),
    "vocab_size that does not fit the weights": (BOTH, lambda src, c: edit_config(src, c, vocab_size=60.0), ["{config}", "word_embeddings"]),
    **{f"vocab_size {value!r}": (BOTH, lambda src, c, v=value: edit_config(src, c, vocab_size=v), [f"vocab_size is {value!r} (expected an integer)", "{config}"])
       for value in (60.5, "60", True)},
    "non-numeric values": (BOTH, lambda src, c: edit_config(src, c, hidden_size="sixty-four", hidden_dropout_prob="x", rotary_value="no"), [
        "{config}: hidden_size is 'sixty-four' (expected an integer)", "hidden_dropout_prob is 'x' (expected a number)"]),
    "a flag that is not true or false": (("transformers",), lambda src, c: edit_config(src, c, num_attention_heads="4", rotary_value="no"), [
        "{config}: num_attention_heads is '4' (expected an integer)", "rotary_value is 'no' (expected true or false)"]),
    "config that is not an object": (BOTH, lambda src, c: (src / CONFIG_NAME[c]).write_text("[64, 2]"), ["{config} holds a JSON list, not an object of settings"]),
    "config that is not JSON": (BOTH, lambda src, c: (src / CONFIG_NAME[c]).write_text('{"model_type": "roformer",'), ["{config} is not valid JSON"]),
    "vocabulary saved in GBK": (BOTH, lambda src, c: (src / "vocab.txt").write_bytes((src / "vocab.txt").read_text(encoding="utf-8").encode("gb18030")),
        ["{src}/vocab.txt is not UTF-8 text (byte 0x", "re-save it as UTF-8"]),
    **{f"{damage} safetensors": (("transformers",), lambda src, c, d=damage: _damage_safetensors(src, d), [
        "{src}/model.safetensors cannot be read as a safetensors weights file (", "damaged or truncated"]) for damage in ("truncated", "garbage")},
    **{f"{damage} pytorch_model.bin": (("transformers",), lambda src, c, d=damage: _as_bin(src, d), [
        "{src}/pytorch_model.bin cannot be read as a PyTorch weights file ("]) for damage in ("truncated", "garbage")},
    "pytorch_model.bin without a state dict": (("transformers",), lambda src, c: _as_bin(src, "not_a_state_dict"), [
        "{src}/pytorch_model.bin does not hold a state dict"]),
    "missing shard": (("transformers",), lambda src, c: _sharded(src), [
        "Missing {src}/model-00002-of-00002.safetensors, which the weight index lists."]),
    "hidden_size that does not fit the weights": (("transformers",), lambda src, c: edit_config(src, c, hidden_size=64), [
        "does not fit its {src}/config.json", "mis-shaped: lm_head.transform.dense.weight: expected (32, 64)"]),
    "model_type that is not roformer": (("transformers",), lambda src, c: edit_config(src, c, model_type="bert"), [
        "config.json has model_type 'bert'; this converter reads transformers' 'roformer' folders"]),
}
# fmt: on
CASES = [(command, case) for case, (commands, _, _) in BAD_INPUT.items() for command in commands]


@pytest.mark.parametrize(("command", "case"), CASES)
def test_bad_input_is_one_line(tmp_path, capsys, command, case):
    src = SOURCES[command](tmp_path)
    _, damage, phrases = BAD_INPUT[case]
    damage(src, command)
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("roformer-ext-convert: error: ") == 1, err
    message = err[err.index("roformer-ext-convert: error: ") :].strip()
    assert "\n" not in message or case.endswith("does not fit the weights")  # those list the misfits
    for phrase in phrases:
        assert phrase.format(src=src, config=CONFIG_NAME[command]) in message, message
    assert nothing_written(tmp_path, src)


@pytest.mark.parametrize("command", SOURCES)
def test_integral_float_sizes_are_read_as_integers(tmp_path, capsys, command):
    """JSON written by some tools has 128.0 for 128: both converters accept it and write an int."""
    src = SOURCES[command](tmp_path)
    config = json.loads((src / CONFIG_NAME[command]).read_text())
    edit_config(src, command, vocab_size=float(config["vocab_size"]), num_hidden_layers=2.0)
    assert main([command, str(src), str(tmp_path / "out")]) == 0, capsys.readouterr().err
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["vocab_size"] == config["vocab_size"] and isinstance(written["vocab_size"], int)
    assert written["num_hidden_layers"] == 2 and isinstance(written["num_hidden_layers"], int)


@pytest.mark.parametrize("command", SOURCES)
@pytest.mark.parametrize("name", ["o" * 230, "o" * 250, "o" * 255, "模" * 80])  # 模: 3 bytes, cut whole when shortened
def test_long_output_name_that_the_file_system_allows_is_written(tmp_path, capsys, command, name):
    """The hidden temporary sibling of a long OUT is shortened, so any OUT name the file system allows works."""
    src = SOURCES[command](tmp_path)
    out = tmp_path / name
    assert main([command, str(src), str(out)]) == 0, capsys.readouterr().err
    assert (out / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, out.name])  # no temporary left
    assert main([command, str(src), str(out), "--force"]) == 0  # replacing it moves the old one aside, then deletes it
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, out.name])


@pytest.mark.parametrize("command", SOURCES)
@pytest.mark.parametrize(  # 模 * 90: 90 characters, 270 bytes in UTF-8; names are counted in bytes
    ("out", "phrases"), [("o" * 256, ["256 bytes", "255", "shorter name"]), ("p" * 300 + "/out", ["300 bytes"]),
                         ("模" * 90, ["270 bytes"])],
)  # fmt: skip
def test_output_name_over_the_file_name_limit_is_one_line(tmp_path, capsys, command, out, phrases):
    src = SOURCES[command](tmp_path)
    assert main([command, str(src), str(tmp_path / out)]) == 1
    line = error_line(capsys)
    assert all(phrase in line for phrase in phrases), line
    assert nothing_written(tmp_path, src)


@pytest.mark.parametrize("command", SOURCES)
def test_unwritable_output_is_one_line(tmp_path, capsys, command, monkeypatch):
    """An OSError from the file system (here a full disk while saving) is one line naming the path and the fix."""
    output_folder = importlib.import_module("roformer_ext.conversion.output_folder")  # the module, not the function
    src = SOURCES[command](tmp_path)
    before = snapshot(src)
    full_disk = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out"))
    monkeypatch.setattr(output_folder, "_swap_in", mock.Mock(side_effect=full_disk))
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    line = error_line(capsys)
    assert "No space left on device" in line and str(tmp_path / "out") in line and "free some space" in line
    assert nothing_written(tmp_path, src) and snapshot(src) == before
