"""The user documentation works as written: runnable blocks run, relative links and their anchors exist.

Python blocks marked `<!-- runnable -->` in README.md and docs/*.md are executed in a temporary working
directory (with `tests/` linked in, for the fixtures some examples name). Every relative link and image in those
files must point to an existing file, and a `#anchor` into a Markdown file must name one of its headings.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

RUNNABLE = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", flags=re.S)
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", flags=re.M)


def _name(page: pathlib.Path) -> str:
    return page.relative_to(ROOT).as_posix()


BLOCKS = [
    pytest.param(block, id=f"{_name(page)}-{index}")
    for page in PAGES
    for index, block in enumerate(RUNNABLE.findall(page.read_text(encoding="utf-8")))
]


def _prose(page: pathlib.Path) -> str:
    """The page without its fenced code blocks (a `# comment` in a bash block is no heading, a URL no link)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def _anchors(page: pathlib.Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    anchors: set[str] = set()
    for heading in HEADING.findall(_prose(page)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, repeat = slug, 0
        while candidate in anchors:
            repeat += 1
            candidate = f"{slug}-{repeat}"
        anchors.add(candidate)
    return anchors


def _relative_links(page: pathlib.Path) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(page))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: ...
    ]


def test_readme_has_runnable_examples():
    assert len(RUNNABLE.findall(README.read_text(encoding="utf-8"))) >= 3


def test_setup_commands_come_first():
    """The two set-up commands (main job, tests) are code blocks within the README's first 40 lines."""
    head = "\n".join(README.read_text(encoding="utf-8").splitlines()[:40])
    commands = re.findall(r"```bash\n(.*?)```", head, flags=re.S)
    assert any("main_job.json" in command for command in commands)
    assert any("pytest" in command for command in commands)


@pytest.mark.parametrize("block", BLOCKS)
def test_documented_example_runs(block, tmp_path, monkeypatch):
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # examples name repository paths such as tests/fixtures
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "documented example", "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_exist(page):
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target} (no heading #{anchor} in {_name(linked)})")
    assert not broken, f"{_name(page)} has broken links: {broken}"


def test_link_checker_sees_links_and_anchors():
    """The checker itself: it finds links outside code blocks and computes GitHub's heading ids."""
    benchmarks = ROOT / "docs" / "benchmarks.md"
    assert "small-size-with-torchcompile" in _anchors(benchmarks)
    assert "docs/benchmarks.md" in _relative_links(README)
