"""Every Python block of README.md and docs/*.md is marked and runs: `<!-- runnable -->` as written, `<!-- needs
real weights; stand-in: PATH=KIND, ... -->` on a tiny STAND_INS stand-in; unmarked blocks fail. Links resolve."""

import contextlib
import io
import pathlib
import re

import pytest
from test_convert_junnyu import write_junnyu_folder
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from roformer_ext import registries
from roformer_ext.conversion.cli import main as convert

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

RUNNABLE = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", flags=re.S)
MARKED = re.compile(r"<!-- (?:runnable|needs real weights; stand-in: ([^>]*?)) -->\n```python\n(.*?)```", flags=re.S)
PYTHON = re.compile(r"^```python\n", flags=re.M)
RELEASES = ROOT / "tests" / "fixtures" / "original_tf"
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", flags=re.M)


def _name(page: pathlib.Path) -> str:
    return page.relative_to(ROOT).as_posix()


BLOCKS = [
    pytest.param(stand_ins, block, id=f"{_name(page)}-{index}")
    for page in PAGES
    for index, (stand_ins, block) in enumerate(MARKED.findall(page.read_text(encoding="utf-8")))
]


def _quiet_convert(*argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert convert(list(argv)) == 0


def _classifier(folder: pathlib.Path) -> None:
    """A fine-tuned sentiment classifier's folder: the bundled mini checkpoint with an untrained two-label head."""
    source = ROOT / "checkpoints" / "roformer-ext-mini-zh"
    model = AutoModelForSequenceClassification.from_pretrained(source, id2label={0: "negative", 1: "positive"})
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)


#: The stand-ins a block may ask for: tiny folders in the layout of the real ones.
STAND_INS = {
    "release-v1": lambda folder: folder.symlink_to(RELEASES / "roformer_v1"),  # an unzipped original release
    "release-v2": lambda folder: folder.symlink_to(RELEASES / "roformer_v2"),
    "release-sim": lambda folder: folder.symlink_to(RELEASES / "roformer_sim"),
    "sim": lambda folder: _quiet_convert("original", str(RELEASES / "roformer_sim"), str(folder)),  # converted Sim
    "roformer": lambda folder: write_junnyu_folder("roformer_v1", folder),  # a transformers `roformer` folder
    "classifier": _classifier,
}


def _write_stand_ins(spec: str) -> None:
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        path, kind = entry.split("=")
        folder = pathlib.Path(path)
        folder.parent.mkdir(parents=True, exist_ok=True)
        STAND_INS[kind](folder)


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
    return [target for target in LINK.findall(_prose(page)) if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # no URL


def test_readme_has_runnable_examples_and_the_setup_commands_first():
    """3+ runnable blocks; the set-up commands and the CPU torch line within the first 40 lines, no placeholder URL."""
    assert len(RUNNABLE.findall(README.read_text(encoding="utf-8"))) >= 3
    head = "\n".join(README.read_text(encoding="utf-8").splitlines()[:40])
    commands = re.findall(r"```bash\n(.*?)```", head, flags=re.S)
    assert any("main_job.json" in command for command in commands)
    assert any("pytest" in command for command in commands)
    assert any("download.pytorch.org/whl/cpu" in command for command in commands)
    assert "<url" not in head.lower()


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_python_block_is_marked(page):
    """A Python block is either runnable or names the stand-in it runs on: none is left untested."""
    text = page.read_text(encoding="utf-8")
    assert len(MARKED.findall(text)) == len(PYTHON.findall(text)), f"{_name(page)} has an unmarked python block"
    for stand_ins, _ in MARKED.findall(text):
        kinds = [entry.split("=")[-1].strip() for entry in stand_ins.split(",") if entry.strip()]
        assert set(kinds) <= set(STAND_INS), f"{_name(page)}: unknown stand-in in {stand_ins!r}"


@pytest.mark.parametrize(("stand_ins", "block"), BLOCKS)
def test_documented_example_runs(stand_ins, block, tmp_path, monkeypatch):
    for name in ("tests", "checkpoints", "examples"):  # examples name repository paths such as checkpoints/...
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    _write_stand_ins(stand_ins)
    plugins = {name: r for name, r in vars(registries).items() if hasattr(r, "unregister") and not isinstance(r, type)}
    before = {name: set(registry.names()) for name, registry in plugins.items()}
    try:
        exec(compile(block, "documented example", "exec"), {"__name__": "__readme__"})
    finally:  # a block that registers a plugin leaves no trace for the next block or test
        for name, names in before.items():
            for added in set(getattr(registries, name).names()) - names:
                getattr(registries, name).unregister(added)


def test_install_instructions_name_only_what_exists():
    """Nothing names a `roformer-ext` PyPI distribution; every extra named exists in setup.cfg."""
    extras_section = (ROOT / "setup.cfg").read_text().split("[options.extras_require]")[1]
    extras = set(re.findall(r"^([\w-]+) =", extras_section, re.M))
    files = [*PAGES, *ROOT.glob("checkpoints/*/README.md"), *(ROOT / "src" / "roformer_ext").rglob("*.py")]
    wrong = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        pypi = re.findall(r"pip install -U roformer-ext|roformer-ext\[[\w,-]+\]", text)
        wrong += [f"{_name(path)}: {m}" for m in pypi]
        named = {e for group in re.findall(r"""install -e ["']\.\[([\w,-]+)\]""", text) for e in group.split(",")}
        wrong += [f"{_name(path)}: no extra {extra!r}" for extra in named - extras]
    assert not wrong, wrong


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
