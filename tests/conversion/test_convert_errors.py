"""`roformer-ext-convert` turns odd config values and odd output paths into one error line, never a traceback.

Every case runs through `cli.main([...])` on a small source folder built in tmp_path (as in test_convert_safety.py),
and checks the exit code, the single `roformer-ext-convert: error:` line, and that nothing was left behind.
"""

import errno
import importlib
import json
from pathlib import Path

import pytest
from test_convert_safety import SOURCES, snapshot

from roformer_ext.conversion.cli import main

CONFIG_NAME = {"original": "bert_config.json", "transformers": "config.json"}


def edit_config(src: Path, command: str, **changes) -> Path:
    path = src / CONFIG_NAME[command]
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, **changes}))
    return path


def one_error_line(capsys) -> str:
    """stderr holds exactly one line starting `roformer-ext-convert: error:` and no traceback; that line."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("roformer-ext-convert: error: ")]
    assert len(errors) == 1, err
    return errors[0]


def nothing_written(tmp_path: Path, src: Path) -> bool:
    """Only the source folder is left in tmp_path: no output, no temporary sibling."""
    return [p.name for p in tmp_path.iterdir()] == [src.name]


# ------------------------------------------------------------------------------- config values
@pytest.mark.parametrize("command", SOURCES)
def test_unknown_hidden_act_is_one_line(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    edit_config(src, command, hidden_act="swishy")
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    line = one_error_line(capsys)
    assert "hidden_act 'swishy'" in line and "gelu" in line and CONFIG_NAME[command] in line
    assert nothing_written(tmp_path, src)


@pytest.mark.parametrize("command", SOURCES)
def test_float_vocab_size_that_does_not_fit_the_weights_is_an_error_not_a_traceback(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    edit_config(src, command, vocab_size=60.0)
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "roformer-ext-convert: error: " in err, err
    assert CONFIG_NAME[command] in err and "word_embeddings" in err
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
@pytest.mark.parametrize("value", [60.5, "60", True])
def test_non_integer_vocab_size_names_the_field(tmp_path, capsys, command, value):
    src = SOURCES[command](tmp_path)
    edit_config(src, command, vocab_size=value)
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    line = one_error_line(capsys)
    assert f"vocab_size is {value!r} (expected an integer)" in line and CONFIG_NAME[command] in line
    assert nothing_written(tmp_path, src)


# --------------------------------------------------------------------------------- output paths
@pytest.mark.parametrize("command", SOURCES)
@pytest.mark.parametrize("length", [230, 250, 255])
def test_long_output_name_that_the_file_system_allows_is_written(tmp_path, capsys, command, length):
    """The hidden temporary sibling of a long OUT is shortened, so any OUT name the file system allows works."""
    src = SOURCES[command](tmp_path)
    out = tmp_path / ("o" * length)
    assert main([command, str(src), str(out)]) == 0, capsys.readouterr().err
    assert (out / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, out.name])  # no temporary left
    assert main([command, str(src), str(out), "--force"]) == 0  # replacing it moves the old one aside, then deletes it
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, out.name])


@pytest.mark.parametrize("command", SOURCES)
def test_output_name_over_the_file_name_limit_is_one_line(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    out = tmp_path / ("o" * 256)
    assert main([command, str(src), str(out)]) == 1
    line = one_error_line(capsys)
    assert "256 bytes" in line and "255" in line and "shorter name" in line
    assert nothing_written(tmp_path, src)


@pytest.mark.parametrize("command", SOURCES)
def test_output_parent_name_over_the_limit_is_one_line(tmp_path, capsys, command):
    src = SOURCES[command](tmp_path)
    out = tmp_path / ("p" * 300) / "out"
    assert main([command, str(src), str(out)]) == 1
    assert "300 bytes" in one_error_line(capsys)
    assert nothing_written(tmp_path, src)


def test_long_names_are_counted_in_bytes(tmp_path, capsys):
    """A Chinese name of 90 characters is 270 bytes in UTF-8: over the limit although short in characters."""
    src = SOURCES["original"](tmp_path)
    assert main(["original", str(src), str(tmp_path / ("模" * 90))]) == 1
    assert "270 bytes" in one_error_line(capsys)
    assert main(["original", str(src), str(tmp_path / ("模" * 80))]) == 0


def test_leftovers_of_a_long_named_output_are_recognised(tmp_path, capsys):
    """A killed run's shortened temporary sibling is cleared by the next run, as for short names."""
    from roformer_ext.conversion.output_folder import sibling_stem

    src = SOURCES["original"](tmp_path)
    out = tmp_path / ("o" * 250)
    stem = sibling_stem(out)
    assert len(stem.encode()) < 250 and stem != out.name
    leftover = tmp_path / f".{stem}.partial-4194305-0123abcd"  # a pid no process has
    leftover.mkdir()
    other = tmp_path / f".{stem}x.partial-4194305-0123abcd"  # not ours: another name's
    other.mkdir()
    assert main(["original", str(src), str(out)]) == 0
    assert not leftover.exists() and other.is_dir()


@pytest.mark.parametrize("command", SOURCES)
def test_unwritable_output_is_one_line(tmp_path, capsys, command, monkeypatch):
    """An OSError from the file system (here a full disk while saving) is one line naming the path and the fix."""
    output_folder = importlib.import_module("roformer_ext.conversion.output_folder")  # the module, not the function

    src = SOURCES[command](tmp_path)
    before = snapshot(src)

    def full_disk(tmp, out, tag):
        raise OSError(errno.ENOSPC, "No space left on device", str(out))

    monkeypatch.setattr(output_folder, "_swap_in", full_disk)
    assert main([command, str(src), str(tmp_path / "out")]) == 1
    line = one_error_line(capsys)
    assert "No space left on device" in line and str(tmp_path / "out") in line and "free some space" in line
    assert nothing_written(tmp_path, src) and snapshot(src) == before
