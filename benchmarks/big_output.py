"""Workload 1b: the first run of a cell that returns 512 MB, against the plain cell and joblib.

The cell is ``Y = np.random.RandomState(3).rand(n)`` with 64 million draws at ``--scale
1`` (512 MB, about 0.4 s of work).  Every run is a fresh process (a new IPython shell
with ``%load_ext ipy_resume``, numpy imported and the store made by a tiny checkpoint,
untimed), so each pays what a new kernel pays, in alternating order per repetition:

* ``plain``: the cell alone (``cell_s``);
* ``miss``: the cell under ``%%checkpoint`` against a new store (``miss_s``), with the
  engine's phases and ``%checkpoint wait`` after it (``background_s``: made durable);
* ``joblib``: ``Y = joblib.Memory(...).cache(draw)(n)`` in a shell without the extension,
  the same draws through the tool that writes its pickle before it returns.

Targets: first run at most 1.10x the plain cell; joblib.Memory's first run at least 1.2x
ipy_resume's.  Repetitions: ``--repeat``, at least 3.

``python -m benchmarks.big_output plain|miss|joblib ...`` is one process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import child_json, log, median, rmtree

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "1b"
KINDS = ("plain", "miss", "joblib")
FIRST_TARGET = 1.10
JOBLIB_TARGET = 1.2  # joblib.Memory's first run ÷ ipy_resume's, at least
MIN_REPEAT = 3


def draws(scale: float) -> int:
    """How many float64 draws the cell makes: 64 million (512 MB) at scale 1."""
    return max(1 << 20, int(64_000_000 * scale))


def draw(n: int) -> Any:
    """The cell's work, as a function joblib.Memory can cache."""
    import numpy as np

    return np.random.RandomState(3).rand(n)


def body(n: int) -> str:
    return f"Y = np.random.RandomState(3).rand({n})"


def workload(ctx: Ctx) -> None:
    """Per repetition: the plain cell, the first run and joblib.Memory's, fresh processes."""
    from benchmarks.workloads import has

    rec = ctx.rec
    n = draws(ctx.sizes.scale)
    kinds = [k for k in KINDS if k != "joblib" or has("joblib")]
    for r in range(max(ctx.repeat, MIN_REPEAT)):
        folder = ctx.folder("big_output", f"r{r}")
        env = dict(os.environ, IPY_RESUME_DIR=str(folder / "store"))
        for kind in kinds if r % 2 == 0 else list(reversed(kinds)):
            os.sync()  # (another run's write-back would land in this one)
            got = child_json(
                "benchmarks.big_output", [kind, "--n", str(n), "--dir", str(folder / kind)], env
            )
            if kind == "plain":
                rec.add("plain", "cell_s", got["seconds"])
            elif kind == "joblib":
                rec.add("joblib", "miss_s", got["seconds"])
            else:
                rec.add("ipy_resume", "miss_s", got["seconds"])
                rec.add("ipy_resume", "background_s", got["background_s"])
                # the wrapper's own time in the same run: free of the cell's own noise (a
                # fresh process's 512 MB of page faults vary by tens of percent)
                rec.add("ipy_resume", "wrapper_s", got["seconds"] - got["phases"]["cell"])
                for name, seconds in got["phases"].items():
                    rec.add("ipy_resume", f"phase_{name}_s", seconds)
                if got["outcome"] != "executed":
                    rec.note("ipy_resume", f"the first run was a {got['outcome']!r}")
        rmtree(folder)
        log(f"  workload 1b [repetition {r + 1}] done")


def _process(kind: str, n: int, folder: Path) -> dict[str, Any]:
    from benchmarks.harness import new_shell, run

    folder.mkdir(parents=True, exist_ok=True)
    shell = new_shell()
    if kind == "joblib":
        import joblib

        shell.push({"cached": joblib.Memory(folder, verbose=0).cache(draw)})
        run(shell, "import numpy as np", "imports")
        return {"seconds": run(shell, f"Y = cached({n})", "joblib first run")}
    shell.run_line_magic("load_ext", "ipy_resume")
    run(shell, "import numpy as np", "imports")
    # a notebook's store is made long before its big cell: not this cell's cost
    run(shell, "%%checkpoint big_init --quiet\n_init = 0", "store init")
    run(shell, "%checkpoint wait", "wait")
    if kind == "plain":
        return {"seconds": run(shell, body(n), "plain cell")}
    seconds = run(shell, f"%%checkpoint big\n{body(n)}", "first run")
    engine = shell._ipy_resume_magics.engine()
    phases, outcome = dict(engine.last_phases), engine.last_outcome
    background = run(shell, "%checkpoint wait", "wait")
    return {
        "seconds": seconds,
        "phases": phases,
        "background_s": background,
        "outcome": None if outcome is None else outcome.status,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one process of workload 1b")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    print(json.dumps(_process(args.kind, args.n, args.dir)))
    return 0


def summary(samples: dict[str, Any]) -> dict[str, Any]:
    """Medians, the two target ratios and the first run's phases."""
    by = samples.get(WORKLOAD, {})
    ours = by.get("ipy_resume", {})
    if not ours.get("miss_s"):
        return {}

    def med(system: str, metric: str) -> float:
        values = by.get(system, {}).get(metric, [])
        return median(values) if values else math.nan

    out: dict[str, Any] = {
        "runs": len(ours["miss_s"]),
        "cell_s": med("plain", "cell_s"),
        "miss_s": med("ipy_resume", "miss_s"),
        "joblib_s": med("joblib", "miss_s"),
        "background_s": med("ipy_resume", "background_s"),
        "wrapper_s": med("ipy_resume", "wrapper_s"),
        "phases": {
            m[len("phase_") : -len("_s")]: med("ipy_resume", m)
            for m in ours
            if m.startswith("phase_")
        },
    }
    out["first_ratio"] = out["miss_s"] / out["cell_s"] if out["cell_s"] else math.nan
    out["joblib_ratio"] = out["joblib_s"] / out["miss_s"] if out["miss_s"] else math.nan
    out["wrapper_ratio"] = (
        (out["cell_s"] + out["wrapper_s"]) / out["cell_s"] if out["cell_s"] else math.nan
    )
    return out


def table(data: dict[str, Any]) -> str:
    from benchmarks.report import fmt, fmt_ratio

    def met(ok: bool, value: float) -> str:
        return "n/a" if math.isnan(value) else ("yes" if ok else "**no**")

    first, peer = data["first_ratio"], data["joblib_ratio"]
    lines = [
        "## W1b a cell returning 512 MB (fresh processes; medians)",
        "",
        "| runs | plain cell | first run | first ÷ plain | ≤ 1.10x | wrapper's own time | "
        "(plain + it) ÷ plain | joblib.Memory first run | joblib ÷ ipy_resume | ≥ 1.2x | "
        "made durable after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {data['runs']} | {fmt(data['cell_s'], 's')} | {fmt(data['miss_s'], 's')} | "
        f"{fmt_ratio(first)} | {met(first <= FIRST_TARGET, first)} | "
        f"{fmt(data['wrapper_s'], 's')} | {fmt_ratio(data['wrapper_ratio'])} | "
        f"{fmt(data['joblib_s'], 's')} | {fmt_ratio(peer)} | "
        f"{met(peer >= JOBLIB_TARGET, peer)} | {fmt(data['background_s'], 's')} |",
        "",
        "The wrapper's own time is the first run less the cell's own time in the same run "
        "(its `cell` phase): the same cell in a fresh process varies by tens of percent "
        "from one run to the next (512 MB of new pages), more than the wrapper adds.",
        "",
        "The first run's phases (`Engine.last_phases`, medians in ms): "
        + ", ".join(f"{k} {v * 1000:.1f}" for k, v in data["phases"].items())
        + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
