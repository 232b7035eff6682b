"""Every private name of transformers we reach is in `compat.PRIVATE_NAMES`, still exists, is reached from compat.py
only; no import cycle."""

import ast
import graphlib
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import roformer_ext
from roformer_ext.compat import PRIVATE_NAMES

PACKAGE = Path(roformer_ext.__file__).parent
SETTERS = ("__setattr__", "setattr")  # object.__setattr__(self, "_name", ...) defines "_name"


def _owner_and_name(key: str):
    module_name, dotted = key.split(":")
    *path, name = dotted.split(".")
    owner = importlib.import_module(module_name)
    for part in path:
        owner = getattr(owner, part)
    return owner, name


@pytest.mark.parametrize("key", sorted(PRIVATE_NAMES))
def test_private_name_still_exists(key):
    assert hasattr(*_owner_and_name(key)), f"{key} is gone ({PRIVATE_NAMES[key]}): update compat.py"


def test_every_private_hook_we_override_is_listed():
    """A private name a class of ours defines and its transformers base has too (an override or a declaration)."""
    unlisted = set()
    for info in pkgutil.walk_packages(roformer_ext.__path__, prefix="roformer_ext."):
        if info.ispkg or info.name.endswith("__main__"):
            continue
        for cls in vars(importlib.import_module(info.name)).values():
            if not inspect.isclass(cls) or not cls.__module__.startswith("roformer_ext"):
                continue
            for name in vars(cls):
                if not name.startswith("_") or name.startswith("__") or name == "_abc_impl":
                    continue
                bases = [b for b in cls.__mro__[1:] if not b.__module__.startswith("roformer_ext") and name in vars(b)]
                listed = [k for k in PRIVATE_NAMES if k.endswith(f".{name}")]
                if bases and not any(issubclass(cls, _owner_and_name(k)[0]) for k in listed):
                    unlisted.add(f"{cls.__qualname__}.{name} (from {bases[0].__qualname__})")
    assert not unlisted, f"private hooks overridden but not in compat.PRIVATE_NAMES: {sorted(unlisted)}"


def _reached_outside_compat(trees: dict[Path, ast.Module]) -> list[str]:
    """Private attributes read outside compat.py that the package does not define itself, and `super()._x` calls."""
    ours = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    ours.add(node.attr)
            elif isinstance(node, ast.alias):
                ours.add(node.asname or node.name)
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in SETTERS:
                ours |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    ours -= {key.rsplit(".", 1)[-1] for key in PRIVATE_NAMES}
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree) if path.name != "compat.py" else ():
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            is_super = isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "super"
            if is_super or node.attr not in ours:
                found.append(f"{path.name}:{node.lineno}: {node.attr}")
    return found


def test_no_private_name_is_reached_outside_compat(tmp_path):
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in PACKAGE.rglob("*.py")}
    assert _reached_outside_compat(trees) == [], "private names reached outside compat.py"
    trees[tmp_path / "bad.py"] = ast.parse("def f(config):\n    return config._attn_implementation\n")
    assert _reached_outside_compat(trees) == ["bad.py:2: _attn_implementation"]  # the scan can fail


def _first_cycle(graph: dict[str, set[str]]) -> list[str]:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return error.args[1]
    return []


def test_package_has_no_import_cycle():
    """Every `from .x import` (in functions too: transformers copies a saved folder's code by following them)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        graph[".".join(parts)] = edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = parts[: len(parts) - node.level]
                for target in [node.module] if node.module else [alias.name for alias in node.names]:
                    edges.add(".".join((*base, *target.split("."))))
    graph = {
        name: {t if t in graph else f"{t}.__init__" for t in edges} & graph.keys() for name, edges in graph.items()
    }
    assert graph["compat"] == set()
    assert _first_cycle(graph) == [], f"import cycle: {' -> '.join(_first_cycle(graph))}"
    assert sorted(_first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})[1:]) == ["a", "b", "c"]
