"""Workload 9: keys of object graphs that used to stall — library figures and large shared graphs.

Each case digests one value as a ``%%checkpoint`` cell's input would (a fresh
``Fingerprinter`` per sample) and, as the baseline measured in the same run, pickles
it (``pickle.dumps``, protocol 5: a C-speed walk of the same graph, each object
once).  The figures are the key time and the ratio key ÷ pickle.

* ``hist``: the tuple ``plt.hist(x, bins=30)`` returns (two arrays and a container of
  30 patches); target: under 100 ms;
* ``figure-10k``: a figure holding 10,000 rectangles, and ``lines-10k`` one holding
  10,000 lines; target: under 1 s;
* ``dag-N``: N lists in 25 layers, each holding two lists of the layer below (2**25
  paths from the top, N objects); ``dag-2N`` doubles N: linear time means the ratio
  of the two key times is ~2.
"""

from __future__ import annotations

import math
import pickle
import time
from typing import TYPE_CHECKING, Any

from benchmarks.harness import log, median

if TYPE_CHECKING:
    from benchmarks.workloads import Ctx

WORKLOAD = "9"
TARGETS = {"hist": 0.1, "figure-10k": 1.0, "lines-10k": 1.0}


def _dag(n: int, layers: int = 25) -> list[Any]:
    """*n* lists in *layers* layers, each holding two lists of the layer below.

    The number of paths from the top doubles with each layer (2**25 here), the number of
    objects is *n*: a digest that revisits shared objects would never finish.
    """
    width = max(2, n // layers)
    below: list[Any] = [[i % 7] for i in range(width)]
    for layer in range(1, layers):
        below = [[layer, below[i], below[(i * 7 + 1) % width]] for i in range(width)]
    return below


def _cases(scale: float) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    plt.close("all")
    x = np.random.default_rng(0).normal(size=1000)
    plt.figure()
    hist = plt.hist(x, bins=30, density=True)
    artists = max(100, int(10_000 * min(scale, 1.0)))
    fig_r, ax_r = plt.subplots()
    for i in range(artists):
        ax_r.add_patch(Rectangle((i, 0), 1, i % 7))
    fig_l, ax_l = plt.subplots()
    for i in range(artists):
        ax_l.plot([0, 1], [i, i + 1])
    n = max(10_000, int(1_000_000 * min(scale, 1.0)))
    return {
        "hist": hist,
        "figure-10k": fig_r,
        "lines-10k": fig_l,
        f"dag-{n}": _dag(n),
        f"dag-{2 * n}": _dag(2 * n),
    }


def workload(ctx: Ctx) -> None:
    """Each case ``ctx.repeat`` times: key and pickle, alternating."""
    import sys

    from ipy_resume.fingerprint import Fingerprinter

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 100_000))  # the DAG's pickle recurses per level
    try:
        cases = _cases(ctx.sizes.scale)
        for name, value in cases.items():
            for r in range(ctx.repeat):
                started = time.perf_counter()
                Fingerprinter().digest(value)
                key = time.perf_counter() - started
                started = time.perf_counter()
                try:
                    pickle.dumps(value, protocol=5)
                    baseline = time.perf_counter() - started
                except Exception:  # a figure that does not pickle: no baseline
                    baseline = math.nan
                ctx.rec.add(f"graph:{name}", "key_s", key)
                ctx.rec.add(f"graph:{name}", "pickle_s", baseline)
                log(f"  workload 9 [{name}, repetition {r + 1}] key {key * 1000:.1f} ms")
    finally:
        sys.setrecursionlimit(limit)


def summary(samples: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per case: median key time, median pickle time, their ratio, the target."""
    rows = []
    for system, metrics in samples.get(WORKLOAD, {}).items():
        if not system.startswith("graph:"):
            continue
        name = system.split(":", 1)[1]
        key, base = median(metrics.get("key_s", [])), median(metrics.get("pickle_s", []))
        target = TARGETS.get(name)
        rows.append(
            {
                "case": name,
                "key_s": key,
                "pickle_s": base,
                "ratio": key / base if base and not math.isnan(base) else math.nan,
                "target_s": target,
                "met": None if target is None else key <= target,
            }
        )
    dags = sorted((r for r in rows if r["case"].startswith("dag-")), key=lambda r: r["case"])
    dags.sort(key=lambda r: int(r["case"].split("-")[1]))
    if len(dags) == 2:
        small, big = dags
        small["doubling"] = big["doubling"] = big["key_s"] / small["key_s"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    from benchmarks.report import fmt, fmt_ratio

    lines = [
        "## W9 keys of library figures and large shared graphs (medians; baseline: pickle.dumps)",
        "",
        "| value | key | pickle | key ÷ pickle | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        target = "" if row["target_s"] is None else f"< {fmt(row['target_s'], 's')}"
        met = {True: "yes", False: "**no**", None: ""}[row["met"]]
        if "doubling" in row:
            target, met = "linear", f"2x objects → {fmt_ratio(row['doubling'])} time"
        lines.append(
            f"| {row['case']} | {fmt(row['key_s'], 's')} | {fmt(row['pickle_s'], 's')} "
            f"| {fmt_ratio(row['ratio'])} | {target} | {met} |"
        )
    return "\n".join(lines)
