"""Workload 10: a 30-cell notebook run headless with ``ipy-resume run``'s machinery.

Per repetition, each run in a fresh kernel (kernel start-up included on both sides):

* ``plain_s``: the notebook through plain nbclient;
* ``first_s``: the first run with every cell checkpointed (``headless.run_notebook``,
  what ``ipy-resume run`` calls), against a new store;
* ``resumed_s``: a run killed (SIGKILL of the kernel) in cell 25, then the same
  command again: the time of that second, resuming run, against a full plain re-run.

Targets: first run at most 1.2x plain; the resumed run a fraction of a full re-run.

The notebook stands for a batch job: each cell smooths the previous cell's array
(a moving average, about 0.2-0.3 s on these machines) and binds an 8 MB result, so
compute outweighs data as in a report or training pipeline. A notebook whose cells
produce far more data than they compute (say 32 MB of output for 0.1 s of work) is
bound by the durable save instead; see the README's notes on W8 and W10.
Array sizes scale with ``--scale`` (1M floats at scale 1).
"""

from __future__ import annotations

import copy
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import log, median, rmtree

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "10"
TARGET = 1.2
KILL_AT = 25
CELLS = 30


def notebook(n: int) -> Any:
    """30 code cells of array work; cell 25 hangs while a file named ``hang`` exists."""
    import nbformat

    v4 = nbformat.v4
    code = [
        f"import os, time\nimport numpy as np\nn = {n}\nrng = np.random.default_rng(0)\n"
        "w = np.ones(1024) / 1024"
    ]
    for i in range(1, CELLS):
        if i == KILL_AT - 1:
            code.append(
                "if os.path.exists('hang'):\n    open('hang.pid', 'w').write(str(os.getpid()))\n"
                "    time.sleep(600)\n"
                f"a{i} = np.convolve(a{i - 1}, w, mode='same')"
            )
        elif i % 5 == 0:
            code.append(
                f"a{i} = np.convolve(rng.standard_normal(n), w, mode='same')\n"
                f"print(float(a{i}.mean()))"
            )
        else:
            source = f"a{i - 1}" if i > 1 else "rng.random(n)"
            code.append(f"a{i} = np.convolve({source}, w, mode='same') * 1.0001")
    cells = [v4.new_code_cell(src) for src in code]
    for k, cell in enumerate(cells):
        cell.id = f"cell-{k}"
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return nb


def _plain(nb: Any, folder: Path) -> float:
    from nbclient import NotebookClient

    started = time.perf_counter()
    NotebookClient(copy.deepcopy(nb), kernel_name="python3").execute(cwd=str(folder))
    return time.perf_counter() - started


def _checkpointed(nb: Any, folder: Path) -> tuple[float, Any]:
    from ipy_resume.frontends import headless

    work = copy.deepcopy(nb)
    started = time.perf_counter()
    report = headless.run_notebook(
        work,
        store=folder / "store",
        cwd=folder,
        kernel="python3",
        cell_timeout=None,
        ids=headless.cell_ids(work),
    )
    return time.perf_counter() - started, report


def workload(ctx: Ctx) -> None:
    n = max(10_000, int(1_000_000 * min(ctx.sizes.scale, 1.0)))
    nb = notebook(n)
    rec = ctx.rec
    for r in range(ctx.repeat):
        folder = ctx.folder(f"batch-{r}")
        rec.add("batch", "plain_s", _plain(nb, folder))
        first, report = _checkpointed(nb, folder)
        rec.add("batch", "first_s", first)
        if not report.ok:
            rec.note("batch", f"first run stopped: {report.reason}")

        # a run killed in cell 25, then resumed, over a store of its own
        killed = ctx.folder(f"batch-killed-{r}")
        (killed / "hang").touch()
        waiter = threading.Thread(target=_kill_when_hung, args=(killed,), daemon=True)
        waiter.start()
        _checkpointed(nb, killed)
        waiter.join(timeout=5)
        (killed / "hang").unlink()
        resumed, report = _checkpointed(nb, killed)
        rec.add("batch", "resumed_s", resumed)
        rec.add("batch", "replain_s", _plain(nb, killed))
        restored = sum(1 for c in report.cells if c.outcome == "restored")
        rec.add("batch", "resumed_restored_cells", restored)
        log(
            f"  workload 10 [repetition {r + 1}] plain {rec_last(rec, 'plain_s'):.2f} s, "
            f"first {first:.2f} s, resumed {resumed:.2f} s ({restored} cells restored)"
        )
        rmtree(folder)
        rmtree(killed)


def rec_last(rec: Any, metric: str) -> float:
    return float(rec.samples["batch"][metric][-1])


def _kill_when_hung(folder: Path) -> None:
    pid_file = folder / "hang.pid"
    deadline = time.monotonic() + 300
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    if pid_file.exists():
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


# ---- summary and table (used by benchmarks.report) ------------------------------------------


def summary(samples: dict[str, Any]) -> dict[str, Any]:
    metrics = samples.get(WORKLOAD, {}).get("batch", {})
    if not metrics:
        return {}

    def m(name: str) -> float:
        return median(metrics.get(name, []))

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 and not (math.isnan(a) or math.isnan(b)) else math.nan

    first = ratio(m("first_s"), m("plain_s"))
    return {
        "plain_s": m("plain_s"),
        "first_s": m("first_s"),
        "resumed_s": m("resumed_s"),
        "replain_s": m("replain_s"),
        "first_ratio": first,
        "resumed_ratio": ratio(m("resumed_s"), m("replain_s")),
        "restored_cells": m("resumed_restored_cells"),
        "met": None if math.isnan(first) else first <= TARGET,
    }


def table(row: dict[str, Any]) -> str:
    from benchmarks.report import fmt, fmt_ratio

    met = {True: "yes", False: "**no**", None: "n/a"}[row["met"]]
    return "\n".join(
        [
            f"## W10 batch run of a {CELLS}-cell notebook (ipy-resume run; medians; "
            "kernel start-up included)",
            "",
            "| run | ipy_resume | plain nbclient | ratio | target |",
            "|---|---|---|---|---|",
            f"| first run, every cell checkpointed | {fmt(row['first_s'], 's')} "
            f"| {fmt(row['plain_s'], 's')} | {fmt_ratio(row['first_ratio'])} "
            f"| ≤ {TARGET:g}x: {met} |",
            f"| resumed after a kill in cell {KILL_AT} "
            f"({row['restored_cells']:.0f} cells restored) | {fmt(row['resumed_s'], 's')} "
            f"| {fmt(row['replain_s'], 's')} (full re-run) | {fmt_ratio(row['resumed_ratio'])} "
            "| < 1x |",
        ]
    )
