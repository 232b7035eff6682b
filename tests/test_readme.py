"""The README's runnable examples (blocks marked `<!-- runnable -->`) run as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"<!-- runnable -->\n```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_runnable_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    (tmp_path / "tests").symlink_to(README.parent / "tests")  # examples name repository paths
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"README block {index}", "exec"), {"__name__": "__readme__"})
