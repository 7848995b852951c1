"""Workload 12: a restore as after a crash, against ``np.load``, each in a fresh process.

Nothing is pre-touched: every restore runs in a new Python process (a new IPython
shell, ``%load_ext ipy_resume``, then the ``%%checkpoint`` cell that hits), and every
``np.load`` of the same array (a ``.npy`` file next to the store) in another new
process.  The two alternate, restore first in even repetitions and ``np.load`` first
in odd ones, so drift of the machine hits both alike.  Both files are in the page
cache, as after a kernel crash on a machine that kept running.

Per repetition, with one float64 array of 1 GiB at ``--scale 1``:

* ``restore_s``: the hit cell, timed inside the fresh process (key, manifest, map or
  read, verification, binding), and ``restore_sum_s``: summing the array afterwards
  (the first touch of every page);
* ``np_load_s`` and ``np_load_sum_s``: the same for ``np.load``.

Repetitions: ``--repeat``, at least 5; ``IPY_RESUME_BENCH_CRASH_REPEAT=N`` sets that
floor to N instead (the smoke test lowers it).  Targets: the median restore at most 0.6x the median ``np.load``, and the
spread (max - min) of the restores no wider than that of ``np.load``.

``python -m benchmarks.crash restore|npload ...`` is the fresh process itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import TYPE_CHECKING, Any

from benchmarks.harness import child_json, log, median

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "12"
TARGET = 0.6
MIN_REPEAT = 5
BODY = "a = bc.make_full(n, v)"
CELL = f"%%checkpoint crash --quiet\n{BODY}"


def repeats(requested: int) -> int:
    """Repetitions of this workload: *requested*, at least 5 (or the env floor)."""
    floor = int(os.environ.get("IPY_RESUME_BENCH_CRASH_REPEAT", str(MIN_REPEAT)))
    return max(requested, floor, 1)


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = child_json("benchmarks.crash", args, env, timeout=600)
    return result


def workload(ctx: Ctx) -> None:
    import numpy as np

    from benchmarks import cells as bc
    from benchmarks.harness import close_shell, new_shell, run, settle, use_store

    n = ctx.sizes.elems(1.0)
    v = 3.0
    store = ctx.folder("crash") / "store"
    npy = ctx.folder("crash") / "a.npy"
    shell = new_shell()
    shell.run_line_magic("load_ext", "ipy_resume")
    run(shell, "import numpy as np\nfrom benchmarks import cells as bc", "setup")
    shell.push({"n": n, "v": v})
    use_store(store)
    run(shell, CELL, "first run")
    np.save(npy, bc.make_full(n, v))
    close_shell(shell)
    del shell
    settle()
    env = dict(os.environ, IPY_RESUME_DIR=str(store))
    rec = ctx.rec
    for r in range(repeats(ctx.repeat)):
        order = ["restore", "npload"] if r % 2 == 0 else ["npload", "restore"]
        for kind in order:
            if kind == "restore":
                got = _child(["restore", "--n", str(n), "--v", str(v)], env)
                if got["how"] != "mapped":
                    rec.note("ipy_resume", f"restore path was {got['how']!r}, not 'mapped'")
                rec.add("ipy_resume", "restore_s", got["seconds"])
                rec.add("ipy_resume", "restore_sum_s", got["sum_s"])
            else:
                got = _child(["npload", "--path", str(npy)], env)
                rec.add("baseline", "np_load_s", got["seconds"])
                rec.add("baseline", "np_load_sum_s", got["sum_s"])
            if got["check"] != v * n:
                raise RuntimeError(f"{kind} gave the wrong array (sum {got['check']})")
        log(f"  workload 12 [repetition {r + 1}] done")


# ---- the fresh processes ---------------------------------------------------------------------


def _restore(n: int, v: float) -> dict[str, Any]:
    from benchmarks.harness import new_shell, run

    shell = new_shell()
    shell.run_line_magic("load_ext", "ipy_resume")
    run(shell, "import numpy as np\nfrom benchmarks import cells as bc", "setup")
    shell.push({"n": n, "v": v})
    seconds = run(shell, CELL, "restore")
    started = time.perf_counter()
    check = float(shell.user_ns["a"].sum())
    sum_s = time.perf_counter() - started
    from ipy_resume.store import open_store

    events = open_store(os.environ["IPY_RESUME_DIR"]).journal().events()
    last = events[-1] if events else None
    if last is None or last.outcome != "restored":
        raise RuntimeError(f"the cell was not restored: {last}")
    how = "mapped" if last.detail.startswith("mapped") else "read"
    return {"seconds": seconds, "sum_s": sum_s, "check": check, "how": how}


def _npload(path: str) -> dict[str, Any]:
    import numpy as np

    started = time.perf_counter()
    a = np.load(path)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    check = float(a.sum())
    return {"seconds": seconds, "sum_s": time.perf_counter() - started, "check": check}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one fresh-process side of workload 12")
    parser.add_argument("kind", choices=["restore", "npload"])
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--v", type=float, default=0.0)
    parser.add_argument("--path", default="")
    args = parser.parse_args(argv)
    out = _restore(args.n, args.v) if args.kind == "restore" else _npload(args.path)
    print(json.dumps(out))
    return 0


# ---- summary and table (used by benchmarks.report) ------------------------------------------


def summary(samples: dict[str, Any]) -> dict[str, Any]:
    ours = samples.get(WORKLOAD, {}).get("ipy_resume", {}).get("restore_s", [])
    base = samples.get(WORKLOAD, {}).get("baseline", {}).get("np_load_s", [])
    if not ours or not base:
        return {}
    by = samples[WORKLOAD]

    def spread(values: list[float]) -> list[float]:
        return [min(values), max(values)]

    ratio = median(ours) / median(base) if median(base) > 0 else math.nan
    width = (max(ours) - min(ours), max(base) - min(base))
    return {
        "restore_s": median(ours),
        "np_load_s": median(base),
        "ratio": ratio,
        "restore_range": spread(ours),
        "np_load_range": spread(base),
        "spread_ratio": width[0] / width[1] if width[1] > 0 else math.nan,
        "restore_sum_s": median(by.get("ipy_resume", {}).get("restore_sum_s", [])),
        "np_load_sum_s": median(by.get("baseline", {}).get("np_load_sum_s", [])),
        "runs": len(ours),
    }


def table(data: dict[str, Any]) -> str:
    from benchmarks.report import fmt, fmt_ratio

    def met(ok: bool | None) -> str:
        return {True: "yes", False: "**no**", None: "n/a"}[ok]

    ratio, spread = data["ratio"], data["spread_ratio"]
    lo, hi = data["restore_range"]
    blo, bhi = data["np_load_range"]
    return "\n".join(
        [
            f"## W12 restore as after a crash (fresh processes, {data['runs']} runs each; medians)",
            "",
            "| | ipy_resume restore | np.load | ratio | target |",
            "|---|---|---|---|---|",
            f"| median | {fmt(data['restore_s'], 's')} | {fmt(data['np_load_s'], 's')} | "
            f"{fmt_ratio(ratio)} | ≤ {TARGET:g}x: "
            f"{met(None if math.isnan(ratio) else ratio <= TARGET)} |",
            f"| min-max | {fmt(lo, 's')} to {fmt(hi, 's')} | {fmt(blo, 's')} to {fmt(bhi, 's')} | "
            f"{fmt_ratio(spread)} | no wider: "
            f"{met(None if math.isnan(spread) else spread <= 1.0)} |",
            f"| then summing it | {fmt(data['restore_sum_s'], 's')} | "
            f"{fmt(data['np_load_sum_s'], 's')} | "
            f"{fmt_ratio(_ratio(data['restore_sum_s'], data['np_load_sum_s']))} | |",
        ]
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not (math.isnan(a) or math.isnan(b)) else math.nan


if __name__ == "__main__":
    raise SystemExit(main())
