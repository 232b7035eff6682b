"""Both converter commands: they never destroy a source or a folder they did not write, and bad input gives one line.

Every case runs through `cli.main([...])`, as a user would, and checks the exit code, the single
`roformer-ext-convert: error:` line (no traceback) and that nothing was written or deleted.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from test_from_transformers import their_model

from roformer_ext.conversion.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "original_tf"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` with its bytes, to show that a refused run changed nothing."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def release(tmp_path: Path, name: str = "roformer_v2") -> Path:
    """A writable copy of an original release fixture."""
    target = tmp_path / "release"
    shutil.copytree(FIXTURES / name, target)
    for path in target.iterdir():
        path.chmod(0o644)
    return target


def transformers_folder(tmp_path: Path) -> Path:
    """A transformers RoFormer MLM folder with a vocabulary."""
    folder = tmp_path / "theirs"
    their_model("RoFormerForMaskedLM", folder)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[chr(0x4E00 + i) for i in range(94)]]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return folder


SOURCES = {"original": release, "transformers": transformers_folder}


def error_line(capsys) -> str:
    """The one error line (the last line of stderr); the message must not span lines or carry a traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("roformer-ext-convert: error: "), err
    assert sum(line.startswith("roformer-ext-convert: error:") for line in lines) == 1, err
    return lines[-1]


# ------------------------------------------------------------------------------- OUT overlapping SRC
@pytest.mark.parametrize("command", SOURCES)
def test_out_equal_to_src_is_refused_even_with_force(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    before = snapshot(tmp_path)
    assert main([command, str(src), str(src), "--force"]) == 1
    assert "is the source folder" in error_line(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", SOURCES)
def test_out_containing_src_is_refused(tmp_path, capsys, command):
    """An OUT that is a parent of SRC would have been replaced whole, SRC and its siblings with it."""
    src = SOURCES[command](tmp_path)
    (tmp_path / "sibling.txt").write_text("unrelated work")
    before = snapshot(tmp_path)
    assert main([command, str(src), str(tmp_path), "--force"]) == 1
    assert f"contains the source folder {src}" in error_line(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", SOURCES)
def test_out_inside_src_is_refused(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    before = snapshot(tmp_path)
    assert main([command, str(src), str(src / "converted")]) == 1
    assert "is inside the source folder" in error_line(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", SOURCES)
def test_symlinks_are_resolved(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    (tmp_path / "alias").symlink_to(src, target_is_directory=True)
    (tmp_path / "parent_alias").symlink_to(tmp_path, target_is_directory=True)
    before = snapshot(src)
    assert main([command, str(src), str(tmp_path / "alias"), "--force"]) == 1
    assert "is the source folder" in error_line(capsys)
    assert main([command, str(tmp_path / "alias"), str(tmp_path / "parent_alias"), "--force"]) == 1
    assert "contains the source folder" in error_line(capsys)
    assert snapshot(src) == before and (tmp_path / "alias").is_symlink()


def test_relative_paths_are_resolved(tmp_path, capsys, monkeypatch):
    src = release(tmp_path)
    monkeypatch.chdir(src)
    before = snapshot(src)
    assert main(["original", ".", "../release", "--force"]) == 1
    assert "is the source folder" in error_line(capsys)
    assert snapshot(src) == before


@pytest.mark.parametrize("command", SOURCES)
def test_second_run_needs_force_and_force_keeps_src(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    out = tmp_path / "out"
    source_files = snapshot(src)
    assert main([command, str(src), str(out)]) == 0
    written = snapshot(out)
    assert main([command, str(src), str(out)]) == 1
    assert "already exists" in error_line(capsys) and snapshot(out) == written
    assert main([command, str(src), str(out), "--force"]) == 0
    assert snapshot(src) == source_files and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, "out"])  # no hidden leftovers


# ------------------------------------------------------------------------- leftovers of a killed run
DEAD_PID = 4_194_305  # above Linux's largest pid_max: no such process


def test_leftovers_of_a_killed_run_are_removed(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["original", str(release(tmp_path)), str(out)]) == 0
    partial = tmp_path / f".out.partial-{DEAD_PID}-0123abcd"
    old = tmp_path / f".out.old-{DEAD_PID}-89abcdef"
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    shutil.copytree(out, old)
    running = tmp_path / ".out.partial-1-00000000"  # pid 1 is alive: a conversion may still be writing it
    running.mkdir()
    not_ours = [
        tmp_path / ".out.partial-backup",
        tmp_path / ".out.old",
        tmp_path / f".other.partial-{DEAD_PID}-0123abcd",
    ]
    for path in not_ours:
        path.mkdir()
    capsys.readouterr()
    assert main(["original", str(tmp_path / "release"), str(out), "--force"]) == 0
    assert f"Removed {partial}, left by an interrupted conversion." in capsys.readouterr().err
    assert not partial.exists() and not old.exists()
    assert running.is_dir() and all(path.is_dir() for path in not_ours)


def test_moved_aside_output_is_named_not_deleted(tmp_path, capsys):
    """Killed between moving OUT aside and moving the new folder in: `.old` is the only copy, so it is kept."""
    out = tmp_path / "out"
    assert main(["original", str(release(tmp_path)), str(out)]) == 0
    old = tmp_path / f".out.old-{DEAD_PID}-89abcdef"
    out.rename(old)
    kept = snapshot(old)
    assert main(["original", str(tmp_path / "release"), str(out), "--force"]) == 1
    line = error_line(capsys)
    assert str(old) in line and "rename it to out" in line
    assert snapshot(old) == kept and not out.exists()


# ---------------------------------------------------------------------------- damaged or odd input
def test_original_non_numeric_config_value(tmp_path, capsys):
    src = release(tmp_path)
    config = json.loads((src / "bert_config.json").read_text())
    (src / "bert_config.json").write_text(
        json.dumps({**config, "hidden_size": "sixty-four", "hidden_dropout_prob": "x"})
    )
    assert main(["original", str(src), str(tmp_path / "out")]) == 1
    line = error_line(capsys)
    assert "bert_config.json: hidden_size is 'sixty-four' (expected an integer)" in line
    assert "hidden_dropout_prob is 'x' (expected a number)" in line
    assert not (tmp_path / "out").exists()


def test_original_config_that_is_not_an_object(tmp_path, capsys):
    src = release(tmp_path)
    (src / "bert_config.json").write_text("[64, 2]")
    assert main(["original", str(src), str(tmp_path / "out")]) == 1
    assert "bert_config.json holds a JSON list, not an object of settings" in error_line(capsys)


@pytest.mark.parametrize("command", SOURCES)
def test_non_utf8_vocabulary(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    vocab = (src / "vocab.txt").read_text(encoding="utf-8")
    (src / "vocab.txt").write_bytes(vocab.encode("gb18030"))  # a Chinese vocabulary saved in GBK
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    line = error_line(capsys)
    assert f"{src / 'vocab.txt'} is not UTF-8 text (byte 0x" in line and "re-save it as UTF-8" in line
    assert not (tmp_path / "out").exists()


def test_transformers_non_numeric_config_value(tmp_path, capsys):
    src = transformers_folder(tmp_path)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "num_attention_heads": "4", "rotary_value": "no"}))
    assert main(["transformers", str(src), str(tmp_path / "out")]) == 1
    line = error_line(capsys)
    assert f"{src / 'config.json'}: num_attention_heads is '4' (expected an integer)" in line
    assert "rotary_value is 'no' (expected true or false)" in line
    assert not (tmp_path / "out").exists()


def test_transformers_config_that_is_not_json(tmp_path, capsys):
    src = transformers_folder(tmp_path)
    (src / "config.json").write_text('{"model_type": "roformer",')
    assert main(["transformers", str(src), str(tmp_path / "out")]) == 1
    assert f"{src / 'config.json'} is not valid JSON" in error_line(capsys)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_safetensors(tmp_path, capsys, damage):
    src = transformers_folder(tmp_path)
    weights = src / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00" * 7 + data[7:])
    assert main(["transformers", str(src), str(tmp_path / "out")]) == 1
    line = error_line(capsys)
    assert f"{weights} cannot be read as a safetensors weights file (" in line and "damaged or truncated" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "not_a_state_dict"])
def test_corrupt_pytorch_model_bin(tmp_path, capsys, damage):
    src = transformers_folder(tmp_path)
    from safetensors.torch import load_file

    state = load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    weights = src / "pytorch_model.bin"
    torch.save(state if damage != "not_a_state_dict" else [1, 2, 3], weights)
    data = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        weights.write_bytes(os.urandom(256))
    assert main(["transformers", str(src), str(tmp_path / "out")]) == 1
    line = error_line(capsys)
    if damage == "not_a_state_dict":
        assert f"{weights} does not hold a state dict" in line
    else:
        assert f"{weights} cannot be read as a PyTorch weights file (" in line
    assert not (tmp_path / "out").exists()


def test_missing_shard_listed_in_index(tmp_path, capsys):
    src = transformers_folder(tmp_path)
    (src / "model.safetensors").rename(src / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert main(["transformers", str(src), str(tmp_path / "out")]) == 1
    assert f"Missing {src / 'model-00002-of-00002.safetensors'}, which the weight index lists." in error_line(capsys)
