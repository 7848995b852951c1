"""Workload 8: the corpus of realistic notebooks (``tests/corpus/``), run three ways.

For each notebook and repetition, ``tests/corpus_runner.py`` runs it in three fresh
kernels: plain, a first wrapped run (every code cell under ``%%checkpoint``, a new
store) and a restored run over that store. The wrapped runs get one extra cell
before the notebook that times every ``Engine.plan`` call in the kernel — the key
of each cell — and one after it that reports those times.

Samples, per notebook (system ``corpus:<notebook stem>``), in seconds:

* ``plain_s``, ``wrapped_s``, ``restored_s``: the notebook's cells as the kernel ran
  them (plus ``%load_ext`` in the wrapped runs); kernel start-up and the inserted
  cells are left out;
* ``key_max_s``: the longest key of one cell in the restored run (``key_max_cell``
  is that cell's position), and ``wrapped_key_max_s`` the same in the first run;
* ``findings``: differences between the restored and the first wrapped run (the
  corpus test's checks); a restore that is not exact is noted.

The target: a first wrapped run at most 1.1x the plain run, as for any public notebook.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import log, median, rmtree

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = "8"
TARGET = 1.1
QUICK_SCALE = 0.05
"""Below this ``--scale`` (a quick check of the harness) only the first three notebooks run."""


def _runner() -> Any:
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import corpus_runner

    return corpus_runner


def notebooks_and_data(runner: Any) -> tuple[list[Path], tuple[Path, ...]]:
    """The corpus's notebooks, or those of ``$IPY_RESUME_BENCH_CORPUS`` with its other files.

    A folder of notebooks fetched from elsewhere (say a tutorial's ``notebooks/``) is
    measured the same way; every other file and folder in it (``data/``) is copied next
    to each notebook for each run, as the notebooks expect to find it.  Their cells get
    ``$IPY_RESUME_BENCH_CELL_TIMEOUT`` seconds (default 600) before counting as stalled:
    a tutorial's slowest cell on a loaded machine outlasts the corpus's limit.
    """
    folder = os.environ.get("IPY_RESUME_BENCH_CORPUS")
    if not folder:
        return runner.corpus_notebooks(), ()
    where = Path(folder)
    data = tuple(sorted(p for p in where.iterdir() if p.suffix != ".ipynb"))
    return sorted(where.glob("*.ipynb")), data


def workload(ctx: Ctx) -> None:
    """Every corpus notebook, ``ctx.repeat`` times, notebook after notebook."""
    runner = _runner()
    notebooks, data = notebooks_and_data(runner)
    timeout: dict[str, float] = {}
    if data or os.environ.get("IPY_RESUME_BENCH_CORPUS"):
        timeout["cell_timeout"] = float(os.environ.get("IPY_RESUME_BENCH_CELL_TIMEOUT", "600"))
    if ctx.sizes.scale < QUICK_SCALE:
        notebooks = notebooks[:3]
    for r in range(ctx.repeat):
        for notebook in notebooks:
            system = f"corpus:{notebook.stem}"
            folder = ctx.folder(f"corpus-{r}", notebook.stem)
            result = runner.run_three_ways(
                notebook, folder, explain=False, instrument=True, data=data, **timeout
            )
            plain, wrapped, restored = (result.runs[k] for k in runner.RUNS)
            rec = ctx.rec
            rec.add(system, "cells", len(plain.notebook_cells()))
            rec.add(system, "plain_s", plain.cells_s)
            rec.add(system, "wrapped_s", wrapped.cells_s)
            rec.add(system, "restored_s", restored.cells_s)
            rec.add(system, "wall_plain_s", plain.wall_s)
            rec.add(system, "wall_wrapped_s", wrapped.wall_s)
            rec.add(system, "wall_restored_s", restored.wall_s)
            for prefix, run in (("", restored), ("wrapped_", wrapped)):
                if run.plan_s:
                    cell, seconds = max(run.plan_s.items(), key=lambda kv: kv[1])
                    rec.add(system, f"{prefix}key_max_s", seconds)
                    rec.add(system, f"{prefix}key_max_cell", float(cell.lstrip("c") or -1))
                    rec.add(system, f"{prefix}key_total_s", sum(run.plan_s.values()))
            rec.add(system, "findings", len(result.findings))
            if result.findings:  # in any repetition: the table counts the worst
                first = result.findings[0]
                rec.note(
                    system,
                    f"repetition {r + 1}: restore not exact ({len(result.findings)} "
                    f"differences; first: "
                    f"[{first.check} {first.cell or ''}] {first.detail[:300]})",
                )
            log(
                f"  workload 8 [{notebook.stem}, repetition {r + 1}] plain {plain.cells_s:.2f} s, "
                f"wrapped {wrapped.cells_s:.2f} s, restored {restored.cells_s:.2f} s"
            )
            rmtree(folder)


# ---- summary and table (used by benchmarks.report) ------------------------------------------


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not (math.isnan(a) or math.isnan(b)) else math.nan


def summary(samples: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per notebook: medians, ratios to the plain run, the slowest key."""
    rows = []
    for system, metrics in sorted(samples.get(WORKLOAD, {}).items()):
        if not system.startswith("corpus:"):
            continue

        def m(name: str, metrics: dict[str, list[float]] = metrics) -> float:
            return median(metrics.get(name, []))

        plain, wrapped, restored = m("plain_s"), m("wrapped_s"), m("restored_s")
        cells = metrics.get("key_max_cell", [])
        worst = max(
            zip(metrics.get("key_max_s", []), cells, strict=True), default=(math.nan, math.nan)
        )
        wrapped_ratio = _ratio(wrapped, plain)
        rows.append(
            {
                "notebook": system.split(":", 1)[1],
                "cells": int(m("cells")) if metrics.get("cells") else 0,
                "plain_s": plain,
                "wrapped_s": wrapped,
                "restored_s": restored,
                "wrapped_ratio": wrapped_ratio,
                "restored_ratio": _ratio(restored, plain),
                "key_max_s": m("key_max_s"),
                "key_max_cell": None if math.isnan(worst[1]) else f"c{int(worst[1])}",
                "wrapped_key_max_s": m("wrapped_key_max_s"),
                "findings": int(max(metrics.get("findings", [0]))),
                "met": None if math.isnan(wrapped_ratio) else wrapped_ratio <= TARGET,
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table in the style of the other workloads."""
    from benchmarks.report import fmt, fmt_ratio

    lines = [
        "## W8 corpus notebooks (tests/corpus/; medians; cells only, each run in a fresh kernel)",
        "",
        "| notebook | cells | plain | first wrapped run | ratio | restored run | ratio "
        f"| slowest key (restored) | exact restore (worst run) | wrapped ≤ {TARGET:g}x |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        met = {True: "yes", False: "**no**", None: "n/a"}[row["met"]]
        key = fmt(row["key_max_s"], "s") + (
            f" ({row['key_max_cell']})" if row["key_max_cell"] else ""
        )
        exact = "yes" if row["findings"] == 0 else f"**no** ({row['findings']} differences)"
        lines.append(
            f"| {row['notebook']} | {row['cells']} | {fmt(row['plain_s'], 's')} "
            f"| {fmt(row['wrapped_s'], 's')} | {fmt_ratio(row['wrapped_ratio'])} "
            f"| {fmt(row['restored_s'], 's')} | {fmt_ratio(row['restored_ratio'])} "
            f"| {key} | {exact} | {met} |"
        )
    if rows:
        plain = sum(r["plain_s"] for r in rows)
        wrapped = sum(r["wrapped_s"] for r in rows)
        restored = sum(r["restored_s"] for r in rows)
        total = _ratio(wrapped, plain)
        met = "n/a" if math.isnan(total) else ("yes" if total <= TARGET else "**no**")
        lines.append(
            f"| all notebooks | {sum(r['cells'] for r in rows)} | {fmt(plain, 's')} "
            f"| {fmt(wrapped, 's')} | {fmt_ratio(total)} | {fmt(restored, 's')} "
            f"| {fmt_ratio(_ratio(restored, plain))} | - | "
            f"{sum(1 for r in rows if r['findings'] == 0)} of {len(rows)} | {met} |"
        )
    return "\n".join(lines)
