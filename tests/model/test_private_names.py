"""Private names of transformers, torch and tokenizers: each one roformer-ext reaches is listed in
`compat.PRIVATE_NAMES` and still exists on the installed releases, and no module but compat.py reaches one.

A private name is where the next release can break us silently: a renamed hook we override is simply never called
again. CI runs this file on the lowest and the newest transformers release of the tested range.
"""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import torch
from torch import nn

import roformer_ext
from roformer_ext.compat import PRIVATE_NAMES

PACKAGE = Path(roformer_ext.__file__).parent
#: Python's own bookkeeping on classes (abc), not a library's hook.
_PYTHON_OWN = {"_abc_impl"}
#: Instances for names a class sets in `__init__` rather than on the class.
_INSTANCES = {nn.Module: nn.Module, torch.Tensor: lambda: torch.empty(0)}


def _owner_and_name(key: str):
    module_name, dotted = key.split(":")
    *path, name = dotted.split(".")
    owner = importlib.import_module(module_name)
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def _has(owner, name: str) -> bool:
    if hasattr(owner, name):
        return True
    make = _INSTANCES.get(owner) or next((m for cls, m in _INSTANCES.items() if owner is cls), None)
    if make is None and inspect.isclass(owner):
        try:
            make = owner
            return hasattr(make(), name)
        except Exception:
            return False
    return make is not None and hasattr(make(), name)


@pytest.mark.parametrize("key", sorted(PRIVATE_NAMES))
def test_private_name_still_exists(key):
    owner, name = _owner_and_name(key)
    assert _has(owner, name), (
        f"{key} is gone from the installed release ({PRIVATE_NAMES[key]}): update compat.py's function for it"
    )


def _our_modules():
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(roformer_ext.__path__, prefix="roformer_ext.")
        if not info.ispkg and not info.name.endswith("__main__")
    ]


def test_every_private_hook_we_override_is_listed():
    """A class of ours that defines a private name its transformers / torch base also has (an override, or a
    declaration transformers reads) must be listed: a rename upstream would silently bypass it."""
    unlisted = []
    for module in _our_modules():
        for cls in vars(module).values():
            if not inspect.isclass(cls) or not cls.__module__.startswith("roformer_ext"):
                continue
            for name in vars(cls):
                if not name.startswith("_") or name.startswith("__") or name in _PYTHON_OWN:
                    continue
                bases = [b for b in cls.__mro__[1:] if not b.__module__.startswith("roformer_ext") and name in vars(b)]
                listed = [k for k in PRIVATE_NAMES if k.endswith(f".{name}")]
                if bases and not any(issubclass(cls, _owner_and_name(k)[0]) for k in listed):
                    unlisted.append(f"{cls.__qualname__}.{name} (from {bases[0].__module__}.{bases[0].__qualname__})")
    assert not unlisted, f"private hooks overridden but not in compat.PRIVATE_NAMES: {sorted(set(unlisted))}"


def _defined_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Every name roformer-ext itself defines: functions, classes, assignments, attributes it sets."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name)
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "__setattr__",
                "setattr",
            ):  # object.__setattr__(self, "_name", ...)
                names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names


def test_no_private_name_is_reached_outside_compat():
    """Outside compat.py: no private attribute that roformer-ext does not define itself, and no `super()._x` call
    (a private parent hook: call it through compat's `parent_*` functions)."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in PACKAGE.rglob("*.py")}
    ours = _defined_names(trees) - {name for key in PRIVATE_NAMES for name in [key.rsplit(".", 1)[-1]]}
    found = []
    for path, tree in trees.items():
        if path.name == "compat.py":
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            is_super = isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "super"
            if is_super or node.attr not in ours:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.attr}")
    assert not found, f"private names reached outside compat.py: {found}"


def test_the_scan_sees_a_private_name(tmp_path):
    """The scan above can fail: a module that reads transformers' private name is reported."""
    bad = ast.parse("def f(config):\n    return config._attn_implementation\n")
    trees = {PACKAGE / "compat.py": ast.parse("x = 1"), tmp_path / "bad.py": bad}
    ours = _defined_names(trees) - {"_attn_implementation"}
    reached = [n.attr for n in ast.walk(bad) if isinstance(n, ast.Attribute) and n.attr not in ours]
    assert reached == ["_attn_implementation"]


def _relative_imports() -> dict[str, set[str]]:
    """Each module of the package -> the modules it imports with `from .x import ...`, anywhere in the file (inside a
    function or `if TYPE_CHECKING:` too: transformers copies a saved folder's code by following every one of them)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        graph[".".join(parts)] = edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = parts[: len(parts) - node.level]
                for target in [node.module] if node.module else [alias.name for alias in node.names]:
                    edges.add(".".join((*base, *target.split("."))))
    return {name: {t if t in graph else f"{t}.__init__" for t in edges} & graph.keys() for name, edges in graph.items()}


def _first_cycle(graph: dict[str, set[str]]) -> list[str]:
    done, path = set(), []

    def visit(name: str) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        path.append(name)
        cycle = next((c for c in map(visit, sorted(graph[name])) if c), [])
        path.pop()
        done.add(name)
        return cycle

    return next((c for c in map(visit, sorted(graph)) if c), [])


def test_package_has_no_import_cycle():
    """Layers: compat.py at the bottom imports nothing of the package; the self-check sits below the model."""
    graph = _relative_imports()
    assert graph["compat"] == set()
    assert _first_cycle(graph) == [], f"import cycle: {' -> '.join(_first_cycle(graph))}"


def test_the_cycle_search_finds_one():
    assert _first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
