"""Create a virtual environment at VENV that sees the running interpreter's packages behind its own.

CI installs the lowest declared transformers into it and keeps everything else (torch, the project, the test
tools) from the environment `.ci/run` runs in. `python -m venv --system-site-packages` would see the BASE
interpreter's packages instead, which inside a virtual environment (the README's set-up) lack torch and the
project; this works inside a virtual environment and outside one.

Usage: python .ci/overlay_venv.py VENV
"""

import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path


def parent_site_dirs() -> list[str]:
    """The running interpreter's site-packages folders, in its own order."""
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(d for d in dirs if Path(d).is_dir()))


def main(target: str) -> None:
    venv.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(target)
    python = Path(target) / "bin" / "python"
    own = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    lines = [f"import site; site.addsitedir({d!r})" for d in parent_site_dirs()]
    # addsitedir runs the parent's .pth files too (an editable install's finder) and appends after the venv's own
    (Path(own.decode().strip()) / "_parent_environment.pth").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
