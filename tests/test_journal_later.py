"""Restore events written later (``Journal.append_later``): in order, never missing from
anything that reads the timeline, written at exit; a crash loses at most those."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import subprocess_env
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import journal as journal_module
from ipy_resume.store.journal import Journal

LOAD = "%%checkpoint load\ndata = [1, 2, 3]"
FIT = "%%checkpoint fit\nmodel = sum(data)"


def run(shell: InteractiveShell, source: str) -> None:
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec or result.error_before_exec


def raw_outcomes(store: Path) -> list[str]:
    """The journal's rows as the file holds them (not through Journal, which writes the
    queue first)."""
    conn = sqlite3.connect(store / "journal.sqlite")
    try:
        return [row[0] for row in conn.execute("SELECT outcome FROM events ORDER BY seq")]
    finally:
        conn.close()


def test_restore_events_keep_their_order_and_parents(
    shell: InteractiveShell, isolated: Path
) -> None:
    run(shell, LOAD)
    run(shell, LOAD)  # a hit: its event is queued
    run(shell, FIT)  # an execution: written at once, after the queued one
    run(shell, FIT)  # a hit again
    events = Journal(isolated / "store").events()  # another Journal object of the file
    assert [(e.outcome, e.cell_id) for e in events] == [
        ("executed", "load"),
        ("restored", "load"),
        ("executed", "fit"),
        ("restored", "fit"),
    ]
    assert [e.parent for e in events[1:]] == [e.event_id for e in events[:-1]]
    seqs = [e.seq for e in events]
    assert None not in seqs
    assert seqs == sorted(s for s in seqs if s is not None)


def test_list_and_the_panel_snapshot_show_every_hit(
    shell: InteractiveShell, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ipy_resume import timeline

    run(shell, LOAD)
    for _ in range(3):
        run(shell, LOAD)
    snap = timeline.snapshot(isolated / "store")
    assert [e["outcome"] for e in snap["events"]] == ["executed"] + ["restored"] * 3
    assert snap["summary"]["restored"] == 3
    capsys.readouterr()
    shell.run_line_magic("checkpoint", "stats")
    assert "1 executed, 3 restored" in capsys.readouterr().out


def test_the_helper_writes_queued_events_within_the_bound(
    shell: InteractiveShell, isolated: Path
) -> None:
    run(shell, LOAD)
    run(shell, LOAD)
    deadline = time.monotonic() + journal_module.DEFER_SECONDS + 10
    while raw_outcomes(isolated / "store") != ["executed", "restored"]:
        assert time.monotonic() < deadline, raw_outcomes(isolated / "store")
        time.sleep(0.05)


CHILD = """
import os, sys
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
from ipy_resume.store import journal
journal.DEFER_SECONDS = 600  # only the exit (or a read) writes the queue
config = Config()
config.HistoryManager.hist_file = ":memory:"
shell = InteractiveShell.instance(config=config)
shell.run_line_magic("load_ext", "ipy_resume")
for cell in [{load!r}, {load!r}, {fit!r}, {fit!r}]:
    assert shell.run_cell(cell).success
if sys.argv[1] == "crash":
    os._exit(0)
"""


@pytest.mark.parametrize("how", ["exit", "crash"])
def test_exit_writes_the_queue_and_a_crash_loses_only_restore_events(
    isolated: Path, how: str
) -> None:
    code = CHILD.format(load=LOAD, fit=FIT)
    proc = subprocess.run(
        [sys.executable, "-c", code, how],
        cwd=isolated,
        env=subprocess_env(isolated),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    outcomes = raw_outcomes(isolated / "store")
    if how == "exit":
        assert outcomes == ["executed", "restored", "executed", "restored"]
    else:
        # the execution after the first hit wrote that hit first; the last one was queued
        assert outcomes == ["executed", "restored", "executed"]


HITS_ONLY = """
import os
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
from ipy_resume.store import journal
journal.DEFER_SECONDS = 600
config = Config()
config.HistoryManager.hist_file = ":memory:"
shell = InteractiveShell.instance(config=config)
shell.run_line_magic("load_ext", "ipy_resume")
for cell in [{load!r}, {fit!r}]:
    assert shell.run_cell(cell).success
os._exit(0)
"""


def test_a_lost_journal_names_every_checkpoint_even_if_the_hits_then_crash(
    shell: InteractiveShell, isolated: Path
) -> None:
    run(shell, LOAD)
    run(shell, FIT)
    shell.run_line_magic("checkpoint", "wait")
    for suffix in ("", "-wal", "-shm"):
        (isolated / "store" / f"journal.sqlite{suffix}").unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", HITS_ONLY.format(load=LOAD, fit=FIT)],
        cwd=isolated,
        env=subprocess_env(isolated),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "restored 'load'" in proc.stderr and "restored 'fit'" in proc.stderr
    # rebuilt by the first hit, before the crash lost the queued restore events
    assert raw_outcomes(isolated / "store") == ["executed", "executed"]


def test_a_journal_deleted_under_a_kernel_is_rebuilt_by_its_next_hit(
    shell: InteractiveShell, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the queue is not written meanwhile: only the hit's own check can rebuild the file
    monkeypatch.setattr(journal_module, "DEFER_SECONDS", 60.0)
    run(shell, LOAD)
    shell.run_line_magic("checkpoint", "wait")
    run(shell, LOAD)  # a hit: the journal named its checkpoint, and the kernel knows it
    store = isolated / "store"
    for suffix in ("", "-wal", "-shm"):
        (store / f"journal.sqlite{suffix}").unlink(missing_ok=True)
    run(shell, LOAD)
    assert raw_outcomes(store) == ["executed"]  # rebuilt at once; the two hits still queued
    journal_module.flush_deferred()
    assert raw_outcomes(store)[0] == "executed" and raw_outcomes(store).count("restored") >= 1


def test_the_writers_connection_follows_a_journal_made_again(tmp_path: Path) -> None:
    """append_detached keeps one connection per thread; a journal removed and made again
    in its place (a rebuild) gets the events written after, not the removed file."""
    from concurrent.futures import ThreadPoolExecutor

    from ipy_resume.store.journal import Event

    root = tmp_path / "store"
    root.mkdir()
    Journal(root).append(Event(cell_id="first", session="s", outcome="executed"))

    def detached(cell: str) -> bool:
        return Journal(root).append_detached(Event(cell_id=cell, session="s", outcome="executed"))

    with ThreadPoolExecutor(max_workers=1) as writer:  # one thread for both, as the writer's
        assert writer.submit(detached, "before").result(10)
        assert [e.cell_id for e in Journal(root).events()] == ["first", "before"]
        for name in ("journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm"):
            (root / name).unlink(missing_ok=True)
        Journal(root).append(Event(cell_id="again", session="s", outcome="executed"))
        assert writer.submit(detached, "after").result(10)
    assert [e.cell_id for e in Journal(root).events()] == ["again", "after"]
