"""`%resume` after a SIGKILL brings back every cell that returned, whatever the next cell
was doing; the journal is derived from the manifests, event for event.

A background save's event used to be appended on the main thread, when it was next
free: a kernel killed in the middle of the next cell lost the event of the cell before,
and ``%resume`` came back one cell short.  Now the writer journals it as soon as it is
durable, and a manifest names its event (``journal.stamp``), so a reader appends that
very event for a kernel that ended before it could.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kernel_utils import Kernel, kernel_env

from ipy_resume.engine.queries import Timeline
from ipy_resume.store import Store
from ipy_resume.store.journal import ADOPTED, Event, Journal, stamp

CELLS = [
    "%%checkpoint a\nimport numpy as np\nA = np.arange(10)",
    "%%checkpoint b\nB = np.repeat(A, 100_000).astype(np.float64)",  # 8 MB: the forked child
    "%%checkpoint c\nC = float(B.sum()) + 1",
]
SLEEPER = "%%checkpoint d\nimport time\nD = 1\ntime.sleep(30)"
KEY = "k" * 32


def _dead_writer(tmp_path: Path) -> dict[str, Any]:
    """What names a process that has ended, as a manifest's stamp names its writer."""
    code = "import json; from ipy_resume.store import pending; print(json.dumps(pending.owner()))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    return dict(json.loads(out.stdout))


def _stamp_of_another_process(parent: str | None, writer: dict[str, Any]) -> dict[str, Any]:
    """What ``journal.stamp`` makes in the process *writer* names (one made here would
    be this process's to append, and left to it)."""
    return {"id": uuid.uuid4().hex, "parent": parent, "started": time.time(), "writer": writer}


def _events(root: Path) -> list[Event]:
    return [e for e in Journal(root).events() if e.checkpoint_id]


def test_a_dead_writers_checkpoint_gets_its_own_event_with_its_parent(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    first = store.save("a", KEY, {"x": 1}).manifest
    journal = store.journal()
    parent = journal.append(
        Event(cell_id="a", session="s1", outcome="executed", checkpoint_id=first.id)
    )
    made = _stamp_of_another_process(parent.event_id, _dead_writer(tmp_path))
    second = store.save("b", KEY, {"y": 2}, info={"session": "s1", "event": made}).manifest
    assert [e.checkpoint_id for e in _events(root)] == [first.id]  # its kernel never wrote it

    assert Store(root).journal().reconcile() == 1
    (event,) = [e for e in _events(root) if e.checkpoint_id == second.id]
    assert (event.event_id, event.parent, event.started) == (
        made["id"],
        parent.event_id,
        made["started"],
    )
    assert event.detail == ADOPTED and event.session == "s1" and event.names == ["y"]
    assert Store(root).journal().reconcile() == 0  # once


def test_a_live_writers_young_checkpoint_is_left_to_it_and_its_append_keeps_one_row(
    tmp_path: Path,
) -> None:
    from ipy_resume.store import pending

    root = tmp_path / "store"
    store = Store(root)
    store.journal().append(Event(cell_id="other", session="s0", outcome="uncached"))
    made = stamp(None, pending.owner())  # this process: alive
    saved = store.save("b", KEY, {"y": 2}, info={"session": "s1", "event": made}).manifest
    assert Store(root).journal().reconcile() == 0  # its kernel is about to append it
    assert _events(root) == []
    own = Event(
        cell_id="b",
        session="s1",
        outcome="executed",
        checkpoint_id=saved.id,
        event_id=made["id"],
        started=made["started"],
        bytes=123,
    )
    store.journal().append(own)
    # a reader that took it for dead meanwhile made the same row: the append updates it
    store.journal().append(own)
    (event,) = _events(root)
    assert event.event_id == made["id"] and event.bytes == 123


def test_a_damaged_parent_link_falls_back_to_the_sessions_previous_event(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    first = store.save("a", KEY, {"x": 1}).manifest
    before = store.journal().append(
        Event(cell_id="a", session="s1", outcome="executed", checkpoint_id=first.id)
    )
    # its parent was a restore's event, which a crash may lose before it is written
    made = _stamp_of_another_process("lost-restore-event", _dead_writer(tmp_path))
    store.save("b", KEY, {"y": 2}, info={"session": "s1", "event": made})
    Store(root).journal().reconcile()
    latest = Timeline.of(Store(root)).latest_session_event()
    assert latest is not None and latest.event_id == made["id"]
    assert latest.parent == before.event_id


def _kill(kernel: Kernel) -> None:
    os.kill(kernel.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while kernel.manager.is_alive():
        assert time.monotonic() < deadline, "the kernel did not die"
        time.sleep(0.02)


@pytest.mark.slow
def test_resume_after_a_kill_during_the_next_cell_has_every_cell_that_returned(
    tmp_path: Path,
) -> None:
    # Kills from the moment the next cell starts to well into it: the last cell's save
    # (C, small) and the one before (B, 8 MB, by the forked child) may still be in flight.
    delays = [0.0, 0.05, 0.3, 0.8, 1.5]
    results = []
    for i, delay in enumerate(delays):
        work = tmp_path / f"round{i}"
        work.mkdir()
        with Kernel(work, kernel_env(work)) as kernel:
            assert kernel.run("%load_ext ipy_resume").status == "ok"
            for cell in CELLS:
                out = kernel.run(cell)
                assert out.status == "ok", out.error
            kernel.client.execute(SLEEPER)
            time.sleep(delay)
            _kill(kernel)
            kernel.restart()
            assert kernel.run("%load_ext ipy_resume").status == "ok"
            resumed = kernel.run("%resume")
            assert resumed.status == "ok", resumed.error
            probe = kernel.run(
                "import json\n"
                "print(json.dumps([A.tolist(), float(B.sum()), C] if 'C' in globals() else None))"
            )
            results.append((delay, probe.stdout.strip(), resumed.stdout.strip()))
    want = json.dumps([list(range(10)), 4_500_000.0, 4_500_001.0])
    short = [r for r in results if r[1] != want]
    assert not short, f"{len(short)} of {len(delays)} rounds came back wrong or short: {short}"
