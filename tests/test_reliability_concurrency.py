"""Four kernels' worth of processes checkpointing into one store at once, with gc running.

Each worker (``tests/fuzz/concurrency_worker.py``) runs
``IPY_RESUME_CONCURRENCY_ROUNDS`` (default 200) cells through the real engine,
on a CELL_ID they all share and on one of its own; a fifth process runs ``gc``
in a loop the whole time, so the gc-versus-save race is exercised for real.
Afterwards: no worker saw a load or save error or a wrong value, every
checkpoint a worker committed is readable, ``verify`` is clean, and the
journal holds exactly one event per cell run, each pointing at a checkpoint
that exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import reliability_report
from conftest import subprocess_env

from ipy_resume.store import Store, signing
from ipy_resume.store.journal import Journal

HERE = Path(__file__).parent
WORKERS = 4
ROUNDS = int(os.environ.get("IPY_RESUME_CONCURRENCY_ROUNDS", "200"))


def test_four_processes_one_store(tmp_path: Path) -> None:
    env = subprocess_env(tmp_path)
    key = signing.load_or_create_key(tmp_path / "jupyter-data" / "ipy_resume" / "signing.key")
    root = tmp_path / "store"
    worker = str(HERE / "fuzz" / "concurrency_worker.py")
    started = time.monotonic()
    gc = subprocess.Popen(
        [sys.executable, worker, str(root), "gc"], stdout=subprocess.PIPE, text=True, env=env
    )
    procs = [
        subprocess.Popen(
            [sys.executable, worker, str(root), str(w), str(ROUNDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in range(WORKERS)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        (tmp_path / "stop").touch()
        gc_out, _ = gc.communicate(timeout=300)
        for p in procs:
            p.kill()
    assert gc.returncode == 0
    gc_result = json.loads(gc_out.strip().splitlines()[-1])
    elapsed = time.monotonic() - started

    errors = [e for r in results for e in r["errors"]]
    assert errors == [], errors[:10]
    runs = sum(r["executed"] + r["restored"] for r in results)
    assert runs == WORKERS * ROUNDS
    assert all(r["restored"] > 0 and r["executed"] > 0 for r in results)
    assert gc_result["gc_runs"] > 0

    store = Store(root, key=key)
    manifests = {m.id: m for m in store.manifests()}
    committed = [i for r in results for i in r["ids"]]
    assert len(committed) == len(set(committed))
    missing = [i for i in committed if i not in manifests]
    assert missing == [], missing
    for m in manifests.values():
        store.load_values(m)
        store.load_extras(m)
    assert store.verify() == []

    events = Journal(root).events()
    notes = ""
    if events:
        assert len(events) == runs, (len(events), runs)
        assert len({e.event_id for e in events}) == len(events)
        seqs = [e.seq for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert len({e.session for e in events}) == WORKERS
        by_outcome: dict[str, int] = {}
        for e in events:
            by_outcome[e.outcome] = by_outcome.get(e.outcome, 0) + 1
            assert e.checkpoint_id in manifests, e
        assert by_outcome.get("executed", 0) == len(committed)
        notes = f"journal {len(events)} events consistent"
    else:
        notes = "journal not written by the engine yet; manifests checked"
    reliability_report.record(
        "concurrency",
        f"{WORKERS} processes x {ROUNDS} rounds ({len(committed)} saves, "
        f"{runs - len(committed)} restores) with gc looping ({gc_result['gc_runs']} runs): "
        f"0 load errors, {len(committed)} committed checkpoints readable, verify clean, "
        f"{notes} ({elapsed:.1f} s)",
    )
