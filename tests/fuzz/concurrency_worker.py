"""One of several processes checkpointing into one store at once (see test_reliability_concurrency).

``python concurrency_worker.py STORE WORKER ROUNDS`` runs ROUNDS cells through
the real engine: half of them under a CELL_ID every worker uses (same keys, so
concurrent saves of one key and dedup against each other's blobs), half under
its own CELL_ID; every third round is ``--force`` so saves keep happening.
After each round it checks the namespace holds exactly what the cell computes.
It prints one JSON line: counts, errors, and the checkpoint ids it committed.
``gc`` instead of WORKER runs gc in a loop until the file STORE/../stop exists.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ipy_resume.engine.core import CheckpointOptions, Engine
from ipy_resume.engine.execution import PlainHost
from ipy_resume.store import Store

SOURCE = "y = np.arange(9_000) * x\nz = [x, str(x), {'w': x}]\n"
BAD_WORDS = ("corrupt", "could not", "cannot", "missing", "not trusted", "malformed", "locked")


def expected(x: int) -> tuple[np.ndarray, list[Any]]:
    return np.arange(9_000) * x, [x, str(x), {"w": x}]


def work(root: Path, worker: int, rounds: int) -> dict[str, Any]:
    engine = Engine(Store(root))
    counts: dict[str, Any] = {"executed": 0, "restored": 0, "other": 0, "errors": [], "ids": []}
    for r in range(rounds):
        shared = r % 2 == 0
        cell_id = "shared" if shared else f"own-{worker}"
        x = r % 5 if shared else 100 + r % 7
        ns: dict[str, Any] = {"np": np, "x": x}
        host = PlainHost(SOURCE, ns)
        opts = CheckpointOptions(cell_id, force=r % 3 == 0, quiet=True)
        engine.run(ns, SOURCE, opts, host)
        outcome = engine.last_outcome
        status = outcome.status if outcome else "none"
        if status in ("executed", "restored"):
            counts[status] += 1
        else:
            counts["other"] += 1
            counts["errors"].append(f"round {r}: outcome {status}")
        if status == "executed" and outcome and outcome.checkpoint_id:
            counts["ids"].append(outcome.checkpoint_id)
        y, z = expected(x)
        if not (np.array_equal(ns.get("y"), y) and ns.get("z") == z):
            counts["errors"].append(f"round {r}: wrong values after {status}")
        for message in host.messages:
            if any(word in message for word in BAD_WORDS):
                counts["errors"].append(f"round {r}: {message}")
    return counts


def gc_loop(root: Path) -> dict[str, Any]:
    stop = root.parent / "stop"
    runs = removed = 0
    store = Store(root)
    while not stop.exists():
        if root.is_dir():
            report = store.gc(grace=0, timeout=120)
            runs += 1
            removed += report.removed_blobs + report.removed_temp
        time.sleep(0.02)
    return {"gc_runs": runs, "removed": removed, "errors": []}


def main() -> int:
    root = Path(sys.argv[1])
    if sys.argv[2] == "gc":
        result = gc_loop(root)
    else:
        result = work(root, int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
