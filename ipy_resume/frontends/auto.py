"""``%checkpoint auto``: protect a notebook without editing it.

While auto mode is on, each eligible cell is run as if it began with
``%%checkpoint auto-<cell id>``: a cell with a checkpoint for its current key is
restored, and a cell that executes is checkpointed when it ran for at least
``--min-seconds``. The rewrite happens on the cell's syntax tree (an IPython AST
transformer), after IPython has decided the cell is complete, so typing in a
terminal is unaffected.

A cell is never auto-checkpointed when (``reason`` says which):

- it has a cell magic of its own (``%%checkpoint`` keeps its options);
- it uses a line magic, a shell escape or help (``%time``, ``!ls``, ``x?``): what
  they do is outside the analysis;
- it only imports, defines functions or classes (instant, and its code is part
  of the keys of the cells that use it);
- it reads names in ways the analysis cannot see through (``eval``, ``exec``,
  ``globals()``, ``locals()``, ``vars()``, ``__import__``), declares ``global`` or
  ``nonlocal``, or awaits at top level;
- in this kernel it already ran faster than ``--min-seconds``, or its outputs could
  not be stored, with the same source (so it is not retried on every run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import xxhash

from ..runtime.analysis import first_line, only_definitions

_OPAQUE_CALLS = frozenset({"eval", "exec", "globals", "locals", "vars", "__import__"})


def reason_to_skip(raw: str, transformed: str) -> str | None:
    """Why a cell is not auto-checkpointed, or None when it is.

    >>> reason_to_skip("x = load()", "x = load()") is None
    True
    >>> reason_to_skip("%time x = 1", "get_ipython().run_line_magic('time', 'x = 1')")
    'it uses a line magic, a shell escape or help'
    """
    if not raw.strip():
        return "it is empty"
    if raw.lstrip().startswith("%%"):
        return "it has a cell magic of its own"
    if "get_ipython()" in transformed:
        return "it uses a line magic, a shell escape or help"
    try:
        tree = ast.parse(transformed)
    except SyntaxError:
        return "it does not parse"
    if only_definitions(transformed):
        return "it only imports and defines functions or classes"
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return "it declares global or nonlocal names"
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)) and _top_level(tree, node):
            return "it awaits at top level"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _OPAQUE_CALLS
        ):
            return f"it calls {node.func.id}(), which the analysis cannot see through"
    return None


def _top_level(tree: ast.Module, target: ast.AST) -> bool:
    """Whether *target* lies outside every function (an ``await`` a cell itself runs)."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if any(node is target for node in ast.walk(stmt)):
            return True
    return False


def source_digest(raw: str) -> str:
    """A short digest of a cell's text, for CELL_IDs and the kernel's memory of cells.

    >>> len(source_digest("x = 1"))
    12
    """
    return xxhash.xxh3_64(raw.strip().encode("utf-8")).hexdigest()[:12]


@dataclass
class AutoMode:
    """Auto mode of one IPython shell: its switch, its threshold and what it learnt."""

    shell: Any
    on: bool = False
    min_seconds: float = 1.0
    labels: dict[str, str] = field(default_factory=dict)  # CELL_ID -> first line
    # (CELL_ID, source digest) -> why the cell is no longer wrapped in this kernel
    skipped: dict[tuple[str, str], str] = field(default_factory=dict)
    _pending: Any = None  # the ExecutionInfo of the cell about to run
    _current: tuple[str, str] | None = None
    _installed: bool = False

    def enable(self, min_seconds: float) -> None:
        """Turn auto mode on (again, with a new threshold)."""
        self.on, self.min_seconds = True, min_seconds
        if not self._installed:
            self.shell.events.register("pre_run_cell", self._pre_run_cell)
            self.shell.events.register("post_run_cell", self._post_run_cell)
            self.shell.ast_transformers.append(_Rewriter(self))
            self._installed = True

    def disable(self) -> None:
        """Turn auto mode off; cells run as written from the next one on."""
        self.on = False

    def status(self) -> str:
        """One line for ``%checkpoint auto``."""
        if not self.on:
            return "auto checkpoints are off (turn on: %checkpoint auto on [--min-seconds S])"
        kinds: dict[str, int] = {}
        for why in self.skipped.values():
            kinds[why] = kinds.get(why, 0) + 1
        learnt = "; ".join(f"{n} {why}" for why, n in sorted(kinds.items()))
        return (
            f"auto checkpoints are on: cells that run at least {self.min_seconds:g} s are "
            "checkpointed, and cells with a checkpoint for their key are restored"
            + (f" ({learnt})" if learnt else "")
        )

    # ---- IPython hooks ----------------------------------------------------------------------

    def _pre_run_cell(self, info: Any) -> None:
        self._pending = info if self.on else None

    def _post_run_cell(self, result: Any) -> None:
        current, self._current = self._current, None
        if current is None:
            return
        magics = getattr(self.shell, "_ipy_resume_magics", None)
        engine = getattr(magics, "last_engine", None)
        outcome = getattr(engine, "last_outcome", None)
        status = getattr(outcome, "status", None)
        if status == "fast":
            self.skipped[current] = f"ran under {self.min_seconds:g} s"
        elif status in ("incomplete", "failed"):
            self.skipped[current] = "could not be stored"

    def rewrite(self, module: ast.Module) -> ast.Module:
        """The cell as a ``%%checkpoint`` call, when auto mode takes it."""
        info, self._pending = self._pending, None
        if not self.on or info is None:
            return module
        raw = info.raw_cell
        transformed = self.shell.transform_cell(raw)
        if reason_to_skip(raw, transformed) is not None:
            return module
        own = getattr(info, "cell_id", None)
        cell_id = (
            f"auto-{own}" if isinstance(own, str) and own else f"auto-src-{source_digest(raw)}"
        )
        memory = (cell_id, source_digest(raw))
        if memory in self.skipped:
            return module
        self._current = memory
        self.labels[cell_id] = first_line(raw)
        line = f"{cell_id} --min-seconds {self.min_seconds!r}"
        call = ast.Call(
            func=ast.Attribute(
                value=ast.Call(func=ast.Name("get_ipython", ast.Load()), args=[], keywords=[]),
                attr="run_cell_magic",
                ctx=ast.Load(),
            ),
            args=[ast.Constant("checkpoint"), ast.Constant(line), ast.Constant(raw)],
            keywords=[],
        )
        new = ast.Module(body=[ast.Expr(call)], type_ignores=[])
        return ast.fix_missing_locations(ast.copy_location(new, module))


class _Rewriter(ast.NodeTransformer):
    def __init__(self, mode: AutoMode) -> None:
        self.mode = mode

    def visit_Module(self, node: ast.Module) -> ast.Module:
        return self.mode.rewrite(node)
