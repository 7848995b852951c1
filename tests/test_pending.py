"""Staged saves: a kernel that dies before its background save is durable loses nothing.

A staged save's bytes are in temporary files and its commit in ``pending/``; the next
process that reads the store finishes the commit, after verifying the manifest's
signature and every staged blob (ipy_resume/store/pending.py).  These tests kill or
abandon real processes, corrupt what they staged, and plant records that must not
be trusted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import spy

from ipy_resume.store import Store, fsio, pending, signing
from ipy_resume.store.journal import RECOVERED
from ipy_resume.store.lock import StoreLocked

KEY = "k" * 32


def stage_and_die(root: Path, values_code: str, cell: str = "c", key: str = KEY) -> None:
    """In a child process: stage a save of the values *values_code* builds, then SIGKILL
    itself before any commit (what a kernel killed right after the cell returned leaves)."""
    code = (
        "import os, signal, numpy as np\n"
        "from ipy_resume.store import Store\n"
        f"store = Store({os.fspath(root)!r})\n"
        f"values = {values_code}\n"
        f"snap = store.snapshot({cell!r}, {key!r}, values)\n"
        "snap.stage()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def fresh_shell() -> Any:
    """A new InteractiveShell with ipy_resume loaded (background saves as configured)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(config=config)
    sh.run_line_magic("load_ext", "ipy_resume")
    return sh


def staged_files(root: Path) -> list[Path]:
    return [
        Path(here) / n
        for here, _dirs, names in os.walk(root / "objects")
        for n in names
        if fsio.is_temp_name(n)
    ]


def test_a_save_staged_by_a_killed_process_is_finished_by_the_next_reader(isolated: Path) -> None:
    root = isolated / "store"
    stage_and_die(root, "{'a': np.arange(1_000_000.0), 'label': 'run 7', 'xs': [1, 2, 3]}")
    assert len(pending.records(root)) == 1
    # (the forked child outlives the killed process: on a loaded machine it may not have
    # made its files yet when the kill returns, and it never commits them itself)
    deadline = time.monotonic() + 30
    while not staged_files(root) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert staged_files(root), "the blobs should be waiting in temporary files"
    assert list((root / "manifests").rglob("*.json")) == []  # not committed yet

    store = Store(root)
    # (8 MB: a forked child writes them, and may still be at it: a cell's lookup waits)
    m = store.find("c", KEY, waiting=lambda _text: None)
    assert m is not None, "the dead process's staged save was not finished"
    values = store.load_values(m)
    assert np.array_equal(values["a"], np.arange(1_000_000.0))  # type: ignore[arg-type]
    assert values["label"] == "run 7" and values["xs"] == [1, 2, 3]
    assert pending.records(root) == [] and staged_files(root) == []
    assert store.verify() == []
    (event,) = [e for e in store.journal().events() if e.checkpoint_id == m.id]
    assert event.detail == RECOVERED and event.cell_id == "c"


def test_reading_the_timeline_first_finishes_a_dead_kernels_save_without_a_deadlock(
    isolated: Path,
) -> None:
    # A kernel killed right after its cell returned leaves a staged save and, often, no
    # journal yet.  The first reader of the timeline (the side panel's server) rebuilds
    # the journal from the manifests; listing them finishes the staged save, whose event
    # goes to the journal this thread is opening: it used to wait for its own lock.
    import threading

    root = isolated / "store"
    Store(root).save("before", "k" * 32, {"x": 1})  # committed; its event never written
    stage_and_die(root, "{'xs': [1, 2, 3]}")
    assert not (root / "journal.sqlite").exists() and len(pending.records(root)) == 1
    found: list[list[str]] = []

    def read() -> None:
        found.append([e.cell_id for e in Store(root).journal().events()])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "reading the timeline hung"
    assert found and "before" in found[0] and pending.records(root) == []
    events = Store(root).journal().events()
    assert sorted(e.cell_id for e in events) == ["before", "c"]
    (event,) = [e for e in events if e.cell_id == "c"]
    assert event.detail == RECOVERED  # (the recovered event took the rebuilt one's place)


def test_the_timeline_read_first_has_the_dead_kernels_last_save(isolated: Path) -> None:
    # What %resume reads first in a new kernel: the journal exists already (the dead
    # kernel's earlier cells wrote it), and the last cell's save is still staged.
    from ipy_resume.engine.queries import Timeline

    root = isolated / "store"
    Store(root).save("before", KEY, {"x": 1})
    assert [e.cell_id for e in Store(root).journal().events()] == ["before"]
    stage_and_die(root, "{'xs': [1, 2, 3]}", cell="last")
    latest = Timeline.of(Store(root)).latest_session_event()
    assert latest is not None and latest.cell_id == "last"
    assert latest.detail == RECOVERED and pending.records(root) == []


def test_a_timeline_opened_by_path_finishes_a_dead_kernels_only_save(isolated: Path) -> None:
    # The panel's view from disk (the server, the CLI) of a store whose one save a kernel
    # killed right after its first cell left staged: no manifest yet, only the record.
    from ipy_resume.engine.queries import Timeline

    root = isolated / "store"
    stage_and_die(root, "{'xs': [1, 2, 3]}", cell="first")
    assert not (root / "manifests").exists() and len(pending.records(root)) == 1
    timeline = Timeline.open(root)
    assert [m.cell_id for m in timeline.manifests()] == ["first"]
    assert [e.cell_id for e in timeline.events()] == ["first"]
    assert pending.records(root) == []


def test_a_small_save_is_staged_as_its_record_alone_and_finished_from_it(isolated: Path) -> None:
    root = isolated / "store"
    stage_and_die(root, "{'xs': [float(i) for i in range(100)], 'a': np.arange(8.0)}")
    (record,) = pending.records(root)
    assert staged_files(root) == []  # one file handed to the OS: the record holds the blobs
    doc = json.loads(record.read_text())
    assert doc["blobs"] == [] and len(doc["inline"]) >= 1
    store = Store(root)
    m = store.find("c", KEY)  # (a small save: no child process writes its blobs)
    assert m is not None, "the dead process's staged save was not finished"
    values = store.load_values(m)
    assert values["xs"] == [float(i) for i in range(100)]
    assert np.array_equal(values["a"], np.arange(8.0))  # type: ignore[arg-type]
    assert pending.records(root) == [] and store.verify() == []


@pytest.mark.parametrize("damage", ["bytes", "base64", "size"])
def test_a_small_saves_record_with_damaged_blob_bytes_is_never_committed(
    isolated: Path, damage: str
) -> None:
    import base64

    root = isolated / "store"
    stage_and_die(root, "{'obj': {'k': [1, 2]}, 'n': 'x' * 300}")
    (record,) = pending.records(root)
    doc = json.loads(record.read_text())
    address, size, text = doc["inline"][0]
    raw = bytearray(base64.b64decode(text))
    if damage == "bytes":  # valid base64 of other bytes: the manifest's checksum tells
        raw[len(raw) // 2] ^= 0xFF
        doc["inline"][0][2] = base64.b64encode(bytes(raw)).decode()
    elif damage == "base64":
        doc["inline"][0][2] = text[:-4] + "!!!!"
    else:
        doc["inline"][0][1] = size + 1
    record.write_text(json.dumps(doc))
    result = pending.recover(Store(root).ctx)
    assert result.finished == [] and list(result.abandoned) == [record.stem]
    assert Store(root).find("c", KEY) is None  # the cell will execute again
    assert pending.records(root) == [] and list((root / "manifests").rglob("*.json")) == []
    assert not (root / "objects" / address[:2] / address[2:]).exists()


def test_a_staged_blob_damaged_before_recovery_is_never_committed(isolated: Path) -> None:
    root = isolated / "store"
    stage_and_die(root, "{'a': np.arange(100_000.0), 'obj': {'k': [1, 2]}}")
    for temp in staged_files(root):  # what a power loss before the fsync can leave
        data = bytearray(temp.read_bytes())
        data[len(data) // 2] ^= 0xFF
        temp.write_bytes(bytes(data))
    store = Store(root)
    assert store.find("c", KEY) is None  # the cell will execute again
    assert pending.records(root) == [] and staged_files(root) == []
    assert list((root / "manifests").rglob("*.json")) == []
    assert store.verify() == []


def test_a_record_under_another_key_is_refused_and_its_pickle_never_runs(
    isolated: Path, tmp_path: Path
) -> None:
    root = isolated / "store"
    marker = tmp_path / "planted-pickle-ran"
    # a pickle that would create the marker file when unpickled
    planted = (
        f"type('P', (), {{'__reduce__': lambda self: (open, ({os.fspath(marker)!r}, 'w'))}})()"
    )
    other = tmp_path / "other-key"
    env_key = {"IPY_RESUME_KEY_FILE": os.fspath(other)}
    os.environ.update(env_key)
    try:
        stage_and_die(root, f"{{'p': {planted}}}")
    finally:
        del os.environ["IPY_RESUME_KEY_FILE"]
    assert signing.load_or_create_key() != other.read_bytes()
    (record,) = pending.records(root)
    result = pending.recover(Store(root).ctx)
    assert result.finished == [] and "does not verify" in result.abandoned[record.stem]
    assert Store(root).find("c", KEY) is None
    assert pending.records(root) == [] and staged_files(root) == []
    assert not marker.exists()


def test_a_record_naming_a_file_outside_the_objects_is_abandoned(
    isolated: Path, tmp_path: Path
) -> None:
    root = isolated / "store"
    stage_and_die(root, "{'a': np.arange(10_000.0)}")
    (record,) = pending.records(root)
    doc = json.loads(record.read_text())
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    doc["blobs"][0][0] = os.path.relpath(outside, root)
    record.write_text(json.dumps(doc))
    result = pending.recover(Store(root).ctx)
    assert result.finished == [] and list(result.abandoned) == [record.stem]
    assert "outside" in result.abandoned[record.stem]
    assert outside.read_text() == "keep me"


def test_a_live_writers_staged_save_is_left_to_it_and_spared_by_gc(isolated: Path) -> None:
    root = isolated / "store"
    store = Store(root)
    snap = store.snapshot("c", KEY, {"a": np.arange(50_000.0)})
    snap.stage()  # this process is the writer and is alive
    assert pending.recover(Store(root).ctx).finished == []
    # the staged save holds the store's shared lock: gc waits for it
    with pytest.raises(StoreLocked):
        Store(root).gc(keep_last=1, timeout=0.3)
    # and where there is no lock to wait for, gc still spares the live writer's files
    snap.release()
    report = store.gc(keep_last=1, grace=0)
    assert report.removed_temp == 0
    assert all(s.temp.exists() for s in snap.staged or ())
    result = snap.commit()
    assert result.manifest.id == snap.id
    assert pending.records(root) == [] and staged_files(root) == []
    assert store.verify() == []


def test_the_scan_before_a_read_skips_this_processs_own_records_unread(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of the store scans pending/; this process's own records (a live
    writer's) are told by name after one check of their file, not read again and again."""
    root = isolated / "store"
    store = Store(root)
    snap = store.snapshot("c", KEY, {"a": np.arange(1000.0)})
    snap.stage()
    assert snap.record is not None
    other = store.snapshot("d", KEY, {"b": np.arange(10.0)})
    other.stage()
    assert other.record is not None
    loads = spy(monkeypatch, pending, "_load")
    for _ in range(3):
        assert pending.recover(Store(root).ctx).finished == []
    assert loads == []
    # a record that is not the one this process wrote (another process's, here one
    # planted under the name of a record this process removed) is read, and finished
    data = other.record.read_bytes()
    name = other.record
    other.settle()  # removed: the name is no longer this process's
    doc = json.loads(data)
    doc["owner"]["boot"] = "another-boot"
    name.write_text(json.dumps(doc))
    other.release()
    assert pending.recover(Store(root).ctx).finished == [name.stem]
    assert loads == [name]
    snap.release()


def test_this_processs_own_saves_coming_and_going_do_not_rescan_pending_at_every_read(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of small cells outpaces the writer: its own records change pending/ at
    every save.  Those changes are scanned at most every OWN_CHURN_RESCAN seconds, and a
    dead process's save that appears meanwhile is still finished within that bound."""
    from ipy_resume.store import committer as store_module

    # (long enough that the loop below stays within it on a slow machine)
    monkeypatch.setattr(store_module, "OWN_CHURN_RESCAN", 0.9)
    root = isolated / "store"
    store = Store(root)
    own = store.snapshot("c", KEY, {"a": [1.0, 2.0]})
    own.stage()
    assert pending.own_in_flight()
    scans = spy(monkeypatch, pending, "recover")
    assert store.find("c", "0" * 32) is None
    assert len(scans) == 1
    staged = [own]
    for i in range(5):  # more own records: the folder changes, no scan
        staged.append(store.snapshot(f"m{i}", KEY, {"b": [float(i)]}))
        staged[-1].stage()
        assert store.find("c", "0" * 32) is None
    assert len(scans) == 1
    # another process's save, staged by a process that then died
    stage_and_die(root, "{'z': [7.0, 8.0]}", cell="dead")
    started = time.monotonic()
    found = None
    while found is None and time.monotonic() - started < 5:
        found = store.find("dead", KEY)
    assert found is not None
    assert time.monotonic() - started < store_module.OWN_CHURN_RESCAN + 1.0
    assert len(scans) == 2
    # a scan that saw another process's record rescans at the next change
    stage_and_die(root, "{'y': [1.0]}", cell="dead2")
    assert store.find("dead2", KEY) is not None
    assert len(scans) == 3
    for snap in staged:  # (committed: this worker has no records of its own left over)
        snap.commit()
    assert pending.records(root) == []


def test_a_staged_manifest_is_published_as_signed_unless_its_bytes_written_changed(
    isolated: Path,
) -> None:
    """The manifest signed for the commit record is published as it is; when a blob was
    written meanwhile by another save (so this commit writes fewer bytes), it is signed
    again with the true count, and verifies."""
    root = isolated / "store"
    store = Store(root)
    same = store.snapshot("c", KEY, {"a": np.arange(1000.0)})
    same.stage()
    assert same.record is not None
    recorded = json.loads(same.record.read_bytes())["manifest"].encode("utf-8")
    published = same.commit().manifest
    assert published.path is not None and published.path.read_bytes() == recorded

    values = {"b": np.arange(2000.0)}
    raced = store.snapshot("d", KEY, values)
    raced.stage()
    assert raced.record is not None
    recorded = json.loads(raced.record.read_bytes())["manifest"].encode("utf-8")
    store.save("e", KEY, values)  # writes the same blob first
    m = raced.commit().manifest
    assert m.path is not None and m.path.read_bytes() != recorded
    assert m.bytes_written == 0
    assert Store(root).find("d", KEY) is not None and Store(root).verify() == []


def test_a_forked_child_does_not_take_its_parents_records_for_its_own(isolated: Path) -> None:
    root = isolated / "store"
    snap = Store(root).snapshot("c", KEY, {"a": np.arange(1000.0)})
    snap.stage()
    assert snap.record is not None
    assert pending._is_mine(os.fspath(snap.record))
    pid = os.fork()
    if pid == 0:  # the child: the parent's records are read (and left: the parent lives)
        code = 0 if not pending._is_mine(os.fspath(snap.record)) else 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    record = os.fspath(snap.record)
    snap.commit()  # the record is removed with its entry: a later file of that name is read
    assert not pending._is_mine(record)


@pytest.mark.parametrize("fork", ["0", "1"], ids=["staged", "forked"])
def test_a_kernel_killed_while_its_save_is_pending_loses_nothing(
    isolated: Path, tmp_path: Path, fork: str
) -> None:
    """A real shell whose background writer never gets to commit, killed with SIGKILL;
    a new process runs the same cell and restores it without executing.  The 24 MB
    are written by a forked child (see snapshot.FORK_MIN), or by the kernel itself."""
    n = 3_000_000
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, time, threading\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "from traitlets.config import Config\n"
        "c = Config(); c.HistoryManager.hist_file = ':memory:'\n"
        "sh = InteractiveShell.instance(config=c)\n"
        "sh.run_line_magic('load_ext', 'ipy_resume')\n"
        "if sys.argv[1] == 'hang':\n"
        "    from ipy_resume.store import fsio\n"
        "    real = fsio.settle\n"
        "    def stuck(*a, **k):\n"
        "        if threading.current_thread().name == 'ipy_resume-writer':\n"
        "            time.sleep(600)\n"
        "        return real(*a, **k)\n"
        "    fsio.settle = stuck\n"
        "sh.run_cell('import numpy as np')\n"
        f"sh.run_cell('%%checkpoint big\\nprint(\"ran\")\\na = np.arange({n}.0)')\n"
        "print('a' in sh.user_ns and float(sh.user_ns['a'][-1]), flush=True)\n"
        "if sys.argv[1] == 'hang':\n"
        "    time.sleep(600)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("IPY_RESUME_BACKGROUND", None)  # the default: background saves on
    env["IPY_RESUME_FORK"] = fork
    proc = subprocess.Popen(
        [sys.executable, str(script), "hang"],
        cwd=isolated,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ran"
    line = proc.stdout.readline()
    assert line.strip() == f"{n - 1}.0", line
    deadline = time.monotonic() + 30
    while not pending.records(isolated / "store") and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert pending.records(isolated / "store"), "the save should still be pending"

    again = subprocess.run(
        [sys.executable, str(script), "run"],
        cwd=isolated,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert f"{n - 1}.0" in again.stdout
    assert "restored 'big'" in again.stderr, again.stderr
    assert again.stdout.count("ran") == 1  # replayed once, not executed
    store = Store(isolated / "store")
    assert store.verify() == [] and pending.records(isolated / "store") == []


@pytest.mark.parametrize("field", ["pid", "boot"])
def test_a_record_of_a_reused_pid_or_an_earlier_boot_is_taken_for_dead(
    isolated: Path, field: str
) -> None:
    root = isolated / "store"
    store = Store(root)
    snap = store.snapshot("c", KEY, {"a": np.arange(1000.0)})
    snap.stage()
    assert snap.record is not None
    doc = json.loads(snap.record.read_text())
    if field == "pid":  # our pid, but another process's start time: pid reuse
        doc["owner"]["start"] = "1"
    else:
        doc["owner"]["boot"] = "another-boot"
    snap.record.write_text(json.dumps(doc))
    assert pending.recover(Store(root).ctx).finished == [snap.record.stem]
    assert Store(root).find("c", KEY) is not None


def test_a_large_save_is_written_by_a_forked_child_that_sees_the_values_as_they_were(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from ipy_resume.store import background, snapshot

    monkeypatch.setattr(snapshot, "FORK_MIN", 1 << 20)  # fork from 1 MB
    forks: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.delenv(background.SWITCH_ENV, raising=False)
    sh = fresh_shell()
    try:
        assert sh.run_cell("import numpy as np").success
        assert sh.run_cell("%%checkpoint big --quiet\na = np.full(1_000_000, 3.0)").success
        sh.run_cell("a[:] = -1.0")  # at once: the child must still write 3.0
        assert background.flush()
    finally:
        InteractiveShell.clear_instance()
    assert len(forks) == 1
    store = Store(isolated / "store")
    (m,) = store.manifests()
    saved = store.load_values(m)["a"]
    assert float(saved.min()) == 3.0 == float(saved.max())  # type: ignore[union-attr]
    assert store.verify() == [] and pending.records(isolated / "store") == []


def test_a_forked_child_that_fails_fails_the_save_once_and_keeps_the_values(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    from IPython.core.interactiveshell import InteractiveShell

    from ipy_resume.store import background, snapshot

    monkeypatch.setattr(snapshot, "FORK_MIN", 1 << 20)
    real = pending.stage_blob

    def full(*args: object, **kwargs: object) -> Path:
        if os.getpid() != parent:  # only in the child
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "objects/xx")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    parent = os.getpid()
    monkeypatch.setattr(pending, "stage_blob", full)
    sh = fresh_shell()
    try:
        sh.events.register("post_run_cell", lambda *_: background.flush())
        assert sh.run_cell("import numpy as np").success
        capsys.readouterr()
        assert sh.run_cell("%%checkpoint big\na = np.full(1_000_000, 3.0)").success
        err = capsys.readouterr().err
        assert float(sh.user_ns["a"][0]) == 3.0  # the values stay in the kernel
    finally:
        InteractiveShell.clear_instance()
    assert err.count("could not save checkpoint 'big'") == 1, err
    assert os.strerror(errno.ENOSPC) in err
    assert Store(isolated / "store").manifests() == []
    assert pending.records(isolated / "store") == [] and staged_files(isolated / "store") == []


def test_in_a_kernel_a_background_saves_event_follows_the_commit_not_the_next_cell(
    tmp_path: Path,
) -> None:
    """The writer wakes the kernel's main thread when a save is durable: its timeline
    event (what the panel shows) is written then, with no further cell run."""
    from kernel_utils import Kernel, kernel_env

    from ipy_resume.store.journal import Journal

    env = kernel_env(tmp_path)
    env.pop("IPY_RESUME_BACKGROUND", None)
    with Kernel(tmp_path, env) as kernel:
        kernel.run("%load_ext ipy_resume")
        ran = kernel.run("%%checkpoint late --quiet\nimport numpy as np\nx = np.ones(2_000_000)")
        assert ran.error is None, ran.stderr
        store = Path(env["IPY_RESUME_DIR"])
        deadline = time.monotonic() + 30
        events: list[object] = []
        while time.monotonic() < deadline:
            if (store / "journal.sqlite").exists():
                events = [e for e in Journal(store).events() if e.cell_id == "late"]
                if events:
                    break
            time.sleep(0.1)
        assert events, "the save's event waited for another cell"


def test_a_fork_that_fails_stages_the_save_in_the_kernel(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from ipy_resume.store import snapshot

    monkeypatch.setattr(snapshot, "FORK_MIN", 1 << 10)

    def no_fork() -> int:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    monkeypatch.setattr(os, "fork", no_fork)
    store = Store(isolated / "store")
    snap = store.snapshot("c", KEY, {"a": np.arange(10_000.0)})
    snap.stage()
    assert snap.child is None and snap.record is not None and snap.record.exists()
    assert snap.commit().manifest.id == snap.id
    (m,) = store.manifests()
    assert np.array_equal(store.load_values(m)["a"], np.arange(10_000.0))  # type: ignore[arg-type]


def test_a_kernel_restarted_right_after_a_large_cell_returns_restores_it(isolated: Path) -> None:
    """Jupyter's restart kills the kernel's whole process group at once.  The forked child
    writing the 200 MB is a session of its own: it finishes, and the new kernel restores
    the cell (waiting for the child where it is still writing) instead of running it twice."""
    from kernel_utils import Kernel, kernel_env

    cell = (
        "%%checkpoint big\n"
        "import numpy as np\n"
        "open('ran', 'a').write('x')\n"
        "a = np.arange(25_000_000.0)\n"
        "float(a[-1])"
    )
    with Kernel(isolated, kernel_env(isolated)) as kernel:
        assert kernel.run("%load_ext ipy_resume").status == "ok"
        first = kernel.run(cell)
        assert first.status == "ok", first.error
        assert "saving checkpoint" in first.stderr, first.stderr  # not durable yet
        kernel.manager.restart_kernel(now=True)  # SIGKILL to the process group
        kernel.client.wait_for_ready(timeout=120)
        assert kernel.run("%load_ext ipy_resume").status == "ok"
        again = kernel.run(cell)
        assert again.status == "ok", again.error
        assert "restored 'big'" in again.stderr, again.stderr
        assert again.result is not None and again.result["text/plain"] == "24999999.0"
    assert (isolated / "ran").read_text() == "x"  # executed once
    store = Store(isolated / "store")
    assert store.verify() == [] and pending.records(isolated / "store") == []


WRITER = """
import os, sys, time
import numpy as np
from ipy_resume.store import Store
store = Store(sys.argv[1])
snap = store.snapshot(sys.argv[2], sys.argv[3], {"a": np.arange(2_000_000.0)})
snap.stage()
print("staged", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline:
    time.sleep(0.02)
snap.commit()
"""


def live_writer(root: Path, cell: str, key: str, go: Path) -> subprocess.Popen[str]:
    """Another process that stages a save of (cell, key) and commits it once *go* exists."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), IPY_RESUME_FORK="0")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, os.fspath(root), cell, key, os.fspath(go)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "staged"
    return proc


def test_a_lookup_waits_for_another_live_process_saving_the_same_key(isolated: Path) -> None:
    root = isolated / "store"
    Store(root)  # (the key file, made once)
    go = isolated / "go"
    writer = live_writer(root, "c", KEY, go)
    try:
        assert Store(root).find("c", KEY) is None  # not asked to wait: a live writer's save
        said: list[str] = []

        def waiting(text: str) -> None:  # the writer commits once the lookup waits for it
            said.append(text)
            go.touch()

        m = Store(root).find("c", KEY, waiting=waiting)
        assert m is not None, "the other process's save was not waited for"
        assert len(said) == 1 and f"process {writer.pid}" in said[0], said
        assert np.array_equal(Store(root).load_values(m)["a"], np.arange(2_000_000.0))  # type: ignore[arg-type]
    finally:
        go.touch()
        assert writer.wait(timeout=60) == 0


def test_a_lookup_does_not_wait_for_a_live_save_of_another_key(isolated: Path) -> None:
    root = isolated / "store"
    Store(root)
    go = isolated / "go"
    writer = live_writer(root, "c", "o" * 32, go)  # (holds its save until told)
    try:
        said: list[str] = []
        started = time.monotonic()
        assert Store(root).find("c", KEY, waiting=said.append) is None
        assert said == [] and time.monotonic() - started < 30  # (a wait would be 120 s)
    finally:
        go.touch()
        assert writer.wait(timeout=60) == 0


def test_a_record_waits_while_the_child_writing_its_blobs_runs(isolated: Path) -> None:
    # The kernel (this record's owner) is dead; its forked child, named as the helper,
    # still runs: the record is a live writer's until the child has ended.
    root = isolated / "store"
    stage_and_die(root, "{'a': np.arange(100_000.0)}")
    (path,) = pending.records(root)
    doc = json.loads(path.read_text())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        doc["owner"]["helper"] = pending.helper(child.pid)
        path.write_text(json.dumps(doc))
        assert pending.recover(Store(root).ctx).finished == []
        assert pending.writing(Store(root).ctx, "c", KEY) == [child.pid]  # (the one running)
    finally:
        child.kill()
        child.wait()
    assert pending.writing(Store(root).ctx, "c", KEY) == []
    assert pending.recover(Store(root).ctx).finished == [path.stem]
    assert Store(root).find("c", KEY) is not None


def test_a_dead_kernels_save_that_cannot_be_finished_is_said_once(isolated: Path) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    root = isolated / "store"
    stage_and_die(root, "{'a': np.arange(100_000.0)}", cell="other")
    for temp in staged_files(root):
        temp.write_bytes(b"damaged")
    sh = fresh_shell()
    try:
        from IPython.utils.capture import capture_output

        with capture_output() as first:
            assert sh.run_cell("%%checkpoint c\nx = 1").success
        with capture_output() as second:
            assert sh.run_cell("%%checkpoint c\nx = 1").success
    finally:
        InteractiveShell.clear_instance()
    assert "staged by a kernel that died" in first.stderr, first.stderr
    assert "could not be finished" in first.stderr and "executes again" in first.stderr
    assert "staged by a kernel that died" not in second.stderr


def test_a_forked_writer_is_out_of_the_kernels_process_group_when_the_stage_returns(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether or not the child has been scheduled yet: a kill of the kernel's group right
    # after the cell returns (Jupyter's restart) must not reach it.  Its first action,
    # setsid, could come too late on a loaded machine: the parent moves it first.
    from ipy_resume.store import snapshot

    monkeypatch.setattr(snapshot, "FORK_MIN", 1 << 20)
    monkeypatch.delenv(snapshot.FORK_ENV, raising=False)
    for i in range(8):
        snap = Store(isolated / "store").snapshot("c", KEY, {"a": np.arange(300_000.0) + i})
        snap.stage()
        assert snap.child is not None
        pid = snap.child[0]
        assert os.getpgid(pid) != os.getpgid(0)  # (a zombie still has its group)
        assert pending.writing(Store(isolated / "store").ctx, "c", KEY) == []  # (our own)
        snap.commit()
