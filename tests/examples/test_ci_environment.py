"""`.ci/run`'s lowest-release overlay sees torch and the project, built from this interpreter and from a venv."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import sys, torch, roformer_ext, pytest; print(sys.prefix)"


def _overlay(python: str, target: Path) -> Path:
    subprocess.run([python, str(ROOT / ".ci" / "overlay_venv.py"), str(target)], check=True, timeout=120)
    return target / "bin" / "python"


def _output(python, code: str) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_overlay_sees_the_environment_it_was_made_from_and_its_own_packages_first(tmp_path):
    outer = _overlay(sys.executable, tmp_path / "outer")
    inner = _overlay(str(outer), tmp_path / "inner")  # made from inside a virtual environment
    for python, prefix in ((outer, tmp_path / "outer"), (inner, tmp_path / "inner")):
        assert Path(_output(python, PROBE)) == prefix  # its own environment, where pip installs the lowest release
    # what `.ci/run` installs into the overlay (the lowest transformers) shadows this environment's copy
    site = Path(_output(outer, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (site / "transformers").mkdir()
    (site / "transformers" / "__init__.py").write_text("__version__ = 'overlay'\n")
    assert _output(outer, "import transformers; print(transformers.__version__)") == "overlay"


def test_ci_script_builds_the_lowest_environment_with_the_overlay():
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert any("python .ci/overlay_venv.py" in line for line in commands)
    assert not any("--system-site-packages" in line for line in commands)
