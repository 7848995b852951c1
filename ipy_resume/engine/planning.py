"""What Run All would do: which ``%%checkpoint`` cells would restore, which would execute.

Nothing is executed and nothing is loaded. The plan walks the notebook's cells in
order and computes each checkpointed cell's key as the cell itself would, with one
difference: an input that an earlier cell *would restore* is taken from that
checkpoint's record of its outputs' fingerprints, so the plan is right after a
restart, when the kernel holds none of those values yet. An input that an earlier
cell would execute makes the cell execute too (its value is only known once that
cell has run); one bound by a cell without ``%%checkpoint`` makes it "unknown",
except a module bound by an ``import``, which is taken by name and version.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..fingerprint import Fingerprinter, Unfingerprintable
from ..runtime import file_deps
from ..runtime.analysis import AnalysisError, analyze, first_line
from ..store import StoreError
from .core import CheckpointOptions, Engine


@dataclass
class NotebookCell:
    """One code cell as the plan sees it: its checkpoint options (None when it has no
    ``%%checkpoint``) and its body after IPython's transformations."""

    position: int  # 1-based among the notebook's code cells
    body: str
    options: CheckpointOptions | None
    label: str = ""


@dataclass
class PlannedCell:
    """The verdict on one cell: restore, execute, unknown, or runs (not checkpointed)."""

    position: int
    label: str
    cell_id: str | None
    verdict: str
    reason: str = ""
    saves: float = 0.0  # seconds a restore would save
    checkpoint_id: str | None = None


@dataclass
class RunAllPlan:
    """Every cell's verdict in notebook order, and the time Run All would save."""

    cells: list[PlannedCell] = field(default_factory=list)

    @property
    def saved(self) -> float:
        return sum(c.saves for c in self.cells if c.verdict == "restore")

    def text(self, engine: Engine | None = None) -> str:
        """The plan for people: one line per cell, then the total.

        >>> print(RunAllPlan().text())
        no %%checkpoint cells in this notebook
        """
        checkpointed = [c for c in self.cells if c.cell_id is not None]
        if not checkpointed:
            return "no %%checkpoint cells in this notebook"
        lines = []
        for cell in self.cells:
            if cell.verdict == "restore":
                what = f"would restore (saves {_seconds(cell.saves)})"
                if cell.checkpoint_id and engine is not None:
                    what += f" from {engine.store.short_id(cell.checkpoint_id)}"
            elif cell.verdict == "execute":
                what = f"would execute: {cell.reason}"
            elif cell.verdict == "unknown":
                what = f"unknown: {cell.reason}"
            else:
                what = "runs as written (no %%checkpoint)"
            name = f"'{cell.cell_id}'" if cell.cell_id else ""
            lines.append(f"[{cell.position}] {name:<14} {what}  | {cell.label}")
        restoring = sum(1 for c in checkpointed if c.verdict == "restore")
        lines.append(
            f"Run All would restore {restoring} of {len(checkpointed)} checkpointed cells "
            f"and save {_seconds(self.saved)}"
        )
        return "\n".join(lines)


def plan_run_all(
    engine: Engine, namespace: MutableMapping[str, Any], cells: list[NotebookCell]
) -> RunAllPlan:
    """Say what Run All would do with *cells*, given the kernel's *namespace* now.

    >>> plan_run_all(engine, get_ipython().user_ns, cells).text()  # doctest: +SKIP
    """
    plan = RunAllPlan()
    known: dict[str, bytes] = {}  # names an earlier cell would restore: their digests
    pending: dict[str, int] = {}  # names an earlier cell would execute: that cell
    unknown: dict[str, str] = {}  # names bound by a cell without %%checkpoint: why
    for cell in cells:
        label = cell.label or first_line(cell.body)
        try:
            analysis = analyze(cell.body)
        except AnalysisError:
            plan.cells.append(PlannedCell(cell.position, label, None, "unknown", "syntax error"))
            continue
        if cell.options is None:
            plan.cells.append(PlannedCell(cell.position, label, None, "runs"))
            imports = _imported(cell.body)
            for name in analysis.outputs:
                _forget(name, known, pending, unknown)
                if name in imports and imports[name] is not None:
                    known[name] = imports[name]  # type: ignore[assignment]
                else:
                    unknown[name] = (
                        f"'{name}' comes from cell {cell.position}, which has no %%checkpoint"
                    )
            continue
        opts = cell.options
        row = PlannedCell(cell.position, label, opts.cell_id, "execute")
        plan.cells.append(row)
        inputs = analysis.reads(namespace, known, pending, unknown)
        inputs = (inputs | set(opts.inputs)) - set(opts.ignore)
        waiting = sorted(n for n in inputs if n in pending)
        unsure = sorted(n for n in inputs if n in unknown)
        restored_from = None
        if opts.force:
            row.reason = "--force"
        elif waiting:
            row.reason = (
                f"input '{waiting[0]}' comes from cell {pending[waiting[0]]}, which executes"
            )
        elif unsure:
            row.verdict, row.reason = "unknown", unknown[unsure[0]]
        else:
            restored_from = _lookup(engine, namespace, cell, known, row)
        if restored_from is not None:
            recorded = restored_from.info.get("output_digests")
            for name in set(restored_from.values) | set(restored_from.info.get("outputs", [])):
                _forget(name, known, pending, unknown)
                digest = recorded.get(name) if isinstance(recorded, dict) else None
                if digest:
                    known[name] = bytes.fromhex(digest)
                else:
                    unknown[name] = (
                        f"'{name}' comes from cell {cell.position}, whose checkpoint predates "
                        "plans (run it once again)"
                    )
        elif row.verdict == "unknown":
            for name in analysis.outputs:
                _forget(name, known, pending, unknown)
                unknown[name] = f"'{name}' comes from cell {cell.position}, which is unknown"
        else:
            for name in analysis.outputs:
                _forget(name, known, pending, unknown)
                pending[name] = cell.position
    return plan


def _lookup(
    engine: Engine,
    namespace: MutableMapping[str, Any],
    cell: NotebookCell,
    known: dict[str, bytes],
    row: PlannedCell,
) -> Any:
    """Fill *row* from the store; the checkpoint that would be restored, if any."""
    assert cell.options is not None
    opts = cell.options
    try:
        key_plan = engine.plan(namespace, cell.body, opts, known=known)
    except (StoreError, OSError) as exc:
        row.verdict, row.reason = "unknown", f"the store cannot be used ({exc})"
        return None
    if key_plan.key is None:
        row.reason = key_plan.problem or "it has no key"
        return None
    fresh = file_deps.FreshFiles()
    try:
        manifest = engine.store.find(opts.cell_id, key_plan.key, accept=fresh)
    except StoreError as exc:
        row.reason = str(exc)
        return None
    if manifest is None:
        row.reason = fresh.first or _why(engine, opts.cell_id, key_plan)
        return None
    row.verdict = "restore"
    row.saves = float(manifest.info.get("duration", 0.0))
    row.checkpoint_id = manifest.id
    return manifest


def _why(engine: Engine, cell_id: str, key_plan: Any) -> str:
    text = engine.explain(cell_id, key_plan)
    return text.split(" executes: ", 1)[1] if " executes: " in text else text


def _forget(name: str, *tables: dict[str, Any]) -> None:
    for table in tables:
        table.pop(name, None)


def _imported(source: str) -> dict[str, bytes | None]:
    """Names bound by ``import`` statements at the top of a cell, with module digests."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, bytes | None] = {}
    fingerprinter = Fingerprinter()
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            value: Any = None
            with contextlib.suppress(Exception):  # a broken import: the name stays unknown
                if isinstance(node, ast.Import):
                    module = importlib.import_module(alias.name)
                    value = module if alias.asname else importlib.import_module(bound)
                elif node.module and not node.level:
                    value = getattr(importlib.import_module(node.module), alias.name)
            digest = None
            if value is not None:
                with contextlib.suppress(Unfingerprintable):
                    digest = fingerprinter.digest(value)
            out[bound] = digest
    return out


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
