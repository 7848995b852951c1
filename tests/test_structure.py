"""The package's import graph: no cycles, no private names across modules, layers kept.

The graph is read from the source (AST), so it sees every import a module can make: at
the top, inside functions, and by name through ``importlib.import_module("ipy_resume.x")``.
Imports under ``if TYPE_CHECKING:`` are left out: they never run.  The layers are the
README's (section "Architecture"): a module imports from its own layer or below.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ipy_resume"


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    imports: set[str] = field(default_factory=set)  # modules of the package it imports
    private: list[str] = field(default_factory=list)  # "module.name" of imported _names
    external: set[str] = field(default_factory=set)  # top-level names of other packages


def _modules(root: Path = PACKAGE) -> dict[str, Module]:
    found: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def _absolute(module: Module, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _owner(name: str, modules: dict[str, Module]) -> str | None:
    """The module of the package that *name* (a dotted module path) lives in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = PACKAGE) -> dict[str, Module]:
    """Every module of the package with the modules it imports and the private names it takes."""
    modules = _modules(root)
    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, node.level, node.module)
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        targets.append(f"{base}.{alias.name}")
                        continue
                    targets.append(base)
                    owner = _owner(base, modules)
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if owner is not None and private and owner != module.name:
                        module.private.append(f"{owner}.{alias.name}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                targets = [node.args[0].value]
            for target in targets:
                owner = _owner(target, modules)
                if owner is not None and owner != module.name:
                    module.imports.add(owner)
                elif owner is None and target:
                    module.external.add(target.split(".")[0])
    return modules


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for other in sorted(modules[name].imports):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(modules):
        if name not in index:
            visit(name)
    return found


# Lowest first: the package's folders (README, "Architecture"). A module not named here is
# in the layer of its folder.
LAYERS: list[tuple[str, set[str]]] = [
    ("runtime", {"runtime", "version"}),
    ("fingerprint", {"fingerprint"}),
    ("store", {"store"}),
    ("engine", {"engine"}),
    ("front ends", {"frontends", "timeline"}),
    ("package", {""}),
]


def layer_of(name: str) -> int:
    """The index in :data:`LAYERS` of module *name* (``ipy_resume.store.blobs`` → 2)."""
    parts = name.split(".")[1:]
    first = parts[0] if parts else ""
    for index, (_, members) in enumerate(LAYERS):
        if first in members:
            return index
    raise AssertionError(f"{name} is in no layer: add it to LAYERS (and to the README)")


@pytest.fixture(scope="module")
def graph() -> dict[str, Module]:
    return import_graph()


def test_the_graph_sees_the_package(graph: dict[str, Module]) -> None:
    # a walk that found nothing would pass every check below
    assert {
        "ipy_resume.engine.core",
        "ipy_resume.store.store",
        "ipy_resume.fingerprint.core",
    } <= set(graph)
    assert "ipy_resume.store" in graph["ipy_resume.engine.core"].imports
    assert "ipy_resume.fingerprint.core" in graph["ipy_resume.fingerprint"].imports


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    # a tiny package with one cycle (through a function-level import) and one private import
    package = tmp_path / "ipy_resume"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import _hidden\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from . import c\n"
        "def f():\n    from . import a\n_hidden = 1\n"
    )
    (package / "c.py").write_text("import ipy_resume.b\nfrom IPython.core import magic\n")
    modules = import_graph(package)
    assert cycles(modules) == [["ipy_resume.a", "ipy_resume.b"]]
    assert modules["ipy_resume.a"].private == ["ipy_resume.b._hidden"]
    assert "ipy_resume.c" not in modules["ipy_resume.b"].imports  # TYPE_CHECKING only
    assert modules["ipy_resume.c"].external == {"IPython"}
    assert layer_of("ipy_resume.store.blobs") < layer_of("ipy_resume.engine.core")


def test_no_import_cycles(graph: dict[str, Module]) -> None:
    assert cycles(graph) == []


def test_no_module_imports_another_modules_private_names(graph: dict[str, Module]) -> None:
    taken = {name: module.private for name, module in sorted(graph.items()) if module.private}
    assert taken == {}


def test_each_module_imports_from_its_layer_or_below(graph: dict[str, Module]) -> None:
    upward = sorted(
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {other} ({LAYERS[layer_of(other)][0]})"
        for name, module in graph.items()
        for other in module.imports
        if layer_of(other) > layer_of(name)
    )
    assert upward == []


def test_engine_store_and_fingerprints_import_nothing_from_ipython(
    graph: dict[str, Module],
) -> None:
    kernel_side = {"IPython", "ipykernel", "ipywidgets", "anywidget", "traitlets", "comm"}
    below = [n for n in graph if layer_of(n) <= layer_of("ipy_resume.engine.core")]
    assert len(below) > 20
    assert {
        n: graph[n].external & kernel_side for n in below if graph[n].external & kernel_side
    } == {}
