"""Both commands (`cli.main`) never destroy a source or a folder they did not write; a refusal is one error line."""

import shutil
from pathlib import Path

import pytest
from test_convert_original import copy_fixture
from test_from_transformers import their_model

from roformer_ext.conversion.cli import main
from roformer_ext.conversion.output_folder import sibling_stem


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def release(tmp_path: Path) -> Path:
    return copy_fixture("roformer_v2", tmp_path / "release")


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


@pytest.mark.parametrize("command", SOURCES)
@pytest.mark.parametrize(
    ("source", "out", "phrase"),
    [
        ("{src}", "{src}", "is the source folder"),
        ("{src}", "{src}/converted", "is inside the source folder"),
        ("{src}", "{tmp}", "contains the source folder {src}"),  # replaced whole, SRC and its siblings would go with it
        ("{src}", "{tmp}/alias", "is the source folder"),  # symlinks and relative paths are resolved
        ("{tmp}/alias", "{tmp}/parent_alias", "contains the source folder"),
        (".", "../{name}", "is the source folder"),  # run from inside SRC
    ],
)
def test_out_overlapping_src_is_refused_even_with_force(tmp_path, capsys, monkeypatch, command, source, out, phrase):
    src = SOURCES[command](tmp_path)
    (tmp_path / "sibling.txt").write_text("unrelated work")
    (tmp_path / "alias").symlink_to(src, target_is_directory=True)
    (tmp_path / "parent_alias").symlink_to(tmp_path, target_is_directory=True)
    before = snapshot(tmp_path)
    paths = dict(src=src, tmp=tmp_path, name=src.name)
    monkeypatch.chdir(src)
    assert main([command, source.format(**paths), out.format(**paths), "--force"]) == 1
    assert phrase.format(src=src) in error_line(capsys)
    assert snapshot(tmp_path) == before and (tmp_path / "alias").is_symlink()


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


DEAD_PID = 4_194_305  # above Linux's largest pid_max: no such process


@pytest.mark.parametrize("name", ["out", "o" * 250])  # a long OUT's siblings have a shortened name
def test_leftovers_of_a_killed_run_are_removed(tmp_path, capsys, name):
    out, stem = tmp_path / name, sibling_stem(tmp_path / name)
    assert (stem == name) is (name == "out") and len(stem.encode()) < 250
    assert main(["original", str(release(tmp_path)), str(out)]) == 0
    partial = tmp_path / f".{stem}.partial-{DEAD_PID}-0123abcd"
    old = tmp_path / f".{stem}.old-{DEAD_PID}-89abcdef"
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    shutil.copytree(out, old)
    running = tmp_path / f".{stem}.partial-1-00000000"  # pid 1 is alive: a conversion may still be writing it
    running.mkdir()
    not_ours = [f".{stem}.partial-backup", f".{stem}.old", f".other.partial-{DEAD_PID}-0123abcd"]
    not_ours = [tmp_path / other for other in [*not_ours, f".{stem}x.partial-{DEAD_PID}-0123abcd"]]  # not our names
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
