"""Saves off the critical path: the background writer (ipy_resume/store/background.py).

These shells do not wait for saves after each cell (unlike the shared ``shell``
fixture): they see the pending window the user sees.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from ipy_resume.store import Store, background, fsio


@pytest.fixture
def bg_shell(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv(background.SWITCH_ENV, "1")
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(config=config)
    sh.run_line_magic("load_ext", "ipy_resume")
    yield sh
    background.flush()
    sh.history_manager.end_session()
    InteractiveShell.clear_instance()


class Gate:
    """Holds the writer thread at its first fsync until opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.reached = threading.Event()
        real = fsio._fsync

        def fsync(fd: int) -> None:
            if threading.current_thread().name == "ipy_resume-writer":
                self.reached.set()
                assert self.open.wait(30), "the gate was never opened"
            real(fd)

        monkeypatch.setattr(fsio, "_fsync", fsync)


def test_mutating_an_output_array_right_after_the_cell_does_not_change_the_save(
    bg_shell: InteractiveShell, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    bg_shell.run_cell("import numpy as np")
    assert bg_shell.run_cell(
        "%%checkpoint big\na = np.arange(1_000_000.0)\nb = {'v': a[:3]}"
    ).success
    assert gate.reached.wait(10)  # the cell has returned; its save is still being written
    assert len(background.pending()) == 1
    bg_shell.run_cell("a[:] = -1.0\nb['v'][0] = 42.0")
    gate.open.set()
    background.flush()
    (m,) = Store(isolated / "store").manifests()
    values = Store(isolated / "store").load_values(m)
    assert np.array_equal(values["a"], np.arange(1_000_000.0))  # type: ignore[arg-type]
    assert list(values["b"]["v"]) == [0.0, 1.0, 2.0]  # type: ignore[index]
    assert Store(isolated / "store").verify() == []


def test_a_hit_on_a_key_whose_save_is_pending_gives_the_new_value(
    bg_shell: InteractiveShell, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bg_shell.run_cell("runs = []")
    cell = "%%checkpoint count --ignore runs --no-seed {}\nruns.append(1)\nn = len(runs)"
    assert bg_shell.run_cell(cell.format("")).success
    background.flush()  # the first checkpoint (n == 1) is durable
    gate = Gate(monkeypatch)
    assert bg_shell.run_cell(cell.format("--force")).success  # n == 2, still being written
    assert gate.reached.wait(10)
    assert bg_shell.user_ns["n"] == 2
    del bg_shell.user_ns["n"]
    threading.Timer(0.3, gate.open.set).start()  # the hit below waits for the save
    assert bg_shell.run_cell(cell.format("")).success
    assert bg_shell.user_ns["n"] == 2, "the hit restored the older checkpoint"
    assert len(bg_shell.user_ns["runs"]) == 2  # restored, not executed


def test_checkpoint_wait_makes_everything_durable(
    bg_shell: InteractiveShell,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gate = Gate(monkeypatch)
    for i in range(3):
        assert bg_shell.run_cell(f"%%checkpoint c{i}\nv{i} = list(range({i} + 5))").success
    assert len(background.pending()) == 3
    threading.Timer(0.3, gate.open.set).start()
    early = capsys.readouterr()
    bg_shell.run_line_magic("checkpoint", "wait")
    out = capsys.readouterr()
    assert "3 pending save(s) are durable now" in out.out
    assert background.pending() == []
    assert len(Store(isolated / "store").manifests()) == 3
    # each cell says "saved checkpoint" once: a small save's bytes are staged (handed to
    # the OS) when the cell returns, and the line says so then
    assert (early.err + out.err).count("saved checkpoint") == 3, early.err + out.err
    bg_shell.run_line_magic("checkpoint", "wait")
    assert "nothing was pending" in capsys.readouterr().out


def test_a_failed_background_save_keeps_the_values_and_says_so(
    bg_shell: InteractiveShell,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real = fsio._write

    def full(fd: int, data: Any) -> int:
        if threading.current_thread().name == "ipy_resume-writer":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(fsio, "_write", full)
    assert bg_shell.run_cell("%%checkpoint fail\nx = list(range(10))").success
    background.flush()
    err = capsys.readouterr().err
    assert "could not save checkpoint 'fail'" in err and "No space left" in err, err
    assert bg_shell.user_ns["x"] == list(range(10))
    store = Store(isolated / "store")
    assert store.manifests() == [] and store.verify() == []
    events = store.journal().events()
    assert [e.outcome for e in events] == ["failed"]
    monkeypatch.setattr(fsio, "_write", real)
    assert bg_shell.run_cell("%%checkpoint fail\nx = list(range(10))").success
    background.flush()
    assert "executed 'fail'" in capsys.readouterr().err  # executed again, then saved
    assert len(store.manifests()) == 1


def test_a_zero_budget_saves_synchronously(
    bg_shell: InteractiveShell,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(background.BUDGET_ENV, "0")
    assert bg_shell.run_cell("%%checkpoint sync\nx = 1").success
    assert background.pending() == []
    assert "saved checkpoint" in capsys.readouterr().err
    assert len(Store(isolated / "store").manifests()) == 1


def test_a_large_save_says_saving_then_saved(
    bg_shell: InteractiveShell, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bg_shell.run_cell("import numpy as np")
    assert bg_shell.run_cell("%%checkpoint big\na = np.ones(5_000_000)").success
    first = capsys.readouterr().err
    background.flush()
    later = capsys.readouterr().err
    assert "executed 'big'" in first and "saving checkpoint" in first, first
    assert "saved checkpoint" in first + later and "of 'big'" in first + later


def test_group_commit_fsyncs_each_folder_once(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(isolated / "store")
    gate = threading.Event()
    first = threading.Event()
    dirs: list[str] = []
    real_dir = fsio.fsync_dir

    def fsync_dir(path: Any) -> None:
        if threading.current_thread().name == "ipy_resume-writer":
            first.set()
            assert gate.wait(30)
            dirs.append(os.fspath(path))
        real_dir(path)

    monkeypatch.setattr(fsio, "fsync_dir", fsync_dir)
    jobs = []
    for i in range(6):
        snap = store.snapshot("same", "k1", {"v": [i] * 10})
        job = store.writer.submit(snap)
        assert job is not None
        jobs.append(job)
        if i == 0:
            assert first.wait(10)  # the writer is busy with the first: the rest queue up
    gate.set()
    background.flush()
    assert all(job.error is None for job in jobs)
    assert len({m.id for m in store.manifests()}) == 6
    # six manifests in one folder: one fsync of it for the first save, one for the five
    # queued behind it (a group commit), instead of one each
    key_dir = os.fspath(store.root / "manifests")
    assert sum(1 for d in dirs if d.startswith(key_dir) and d.endswith("/k1")) == 2, dirs


def test_kernel_exit_flushes_pending_saves(isolated: Path, tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "from traitlets.config import Config\n"
        "c = Config(); c.HistoryManager.hist_file = ':memory:'\n"
        "sh = InteractiveShell.instance(config=c)\n"
        "sh.run_line_magic('load_ext', 'ipy_resume')\n"
        "sh.run_cell('import numpy as np')\n"
        "sh.run_cell('%%checkpoint big\\na = np.ones(20_000_000)')\n"
        "from ipy_resume.store import background\n"
        "print(len(background.pending()))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), IPY_RESUME_BACKGROUND="1")
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=isolated,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    store = Store(isolated / "store")
    (m,) = store.manifests()
    assert float(store.load_values(m)["a"][-1]) == 1.0  # type: ignore[index]
    assert store.verify() == []


def test_the_budget_counts_a_save_until_it_is_durable_and_then_no_more(tmp_path: Path) -> None:
    # (large saves staged to files, small ones held in their record: both released once
    # durable, so a long session never runs out of budget)
    store = Store(tmp_path / "st", key=b"k" * 32)
    assert background.held() == 0
    jobs = []
    for i, n in enumerate([200_000, 50, 300_000, 10]):
        snap = store.snapshot(f"c{i}", f"k{i}", {"a": np.arange(float(n)) + i})
        size = snap.size
        job = store.writer.submit(snap)
        assert job is not None and job.held == size > 0
        jobs.append(job)
    background.flush()
    assert all(job.error is None for job in jobs)
    assert background.held() == 0
    for i, n in enumerate([200_000, 50, 300_000, 10]):
        m = store.find(f"c{i}", f"k{i}")
        assert m is not None and np.array_equal(store.load_values(m)["a"], np.arange(float(n)) + i)
    assert store.verify() == []
