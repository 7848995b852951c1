"""Retention (``gc``), the store lock, and the gc-versus-save race."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import reliability_report
from deadlines import wait_until
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import Store, StoreLocked, lock, parse_size, retention
from ipy_resume.store import manifest as mf

KEY = bytes(range(32))
OTHER = bytes(range(7, 39))


def _files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name != "lock"}


def _array(seed: int, n: int = 10_000) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)  # 80 KB: an HDF5 blob of its own


def test_keep_last_is_per_cell_and_never_drops_a_blob_a_kept_checkpoint_uses(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s", key=KEY)
    shared = _array(999)
    a = [
        store.save("a", f"k{i}", {"x": _array(i), "shared": shared, "i": i}).manifest
        for i in range(5)
    ]
    b = [store.save("b", f"k{i}", {"y": _array(100 + i)}).manifest for i in range(2)]
    before = _files(store.root)
    report = store.gc(keep_last=2)
    after = _files(store.root)

    assert sorted(i for i, _ in report.removed_checkpoints) == sorted(m.id for m in a[:3])
    assert {c for _, c in report.removed_checkpoints} == {"a"}
    assert report.kept_checkpoints == 4
    assert {m.id for m in store.manifests()} == {m.id for m in a[3:] + b}
    assert report.removed_blobs == 6  # three private arrays and three packs; not the shared one
    for m in a[3:]:  # every kept checkpoint restores exactly
        i = int(m.key[1:])
        values = store.load_values(m)
        assert values["i"] == i
        np.testing.assert_array_equal(values["x"], _array(i))
        np.testing.assert_array_equal(values["shared"], shared)
    for m in b:
        np.testing.assert_array_equal(store.load_values(m)["y"], _array(100 + int(m.key[1:])))
    freed = sum(size for p, size in before.items() if p not in after)
    assert report.freed == freed > 3 * 80_000
    assert store.verify() == []
    assert "removed 3 checkpoint(s) of 'a', kept 4" in report.summary()


def test_max_size_drops_oldest_first_but_keeps_each_cells_newest(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", key=KEY)
    ms = [store.save(f"c{i % 2}", f"k{i}", {"x": _array(i)}).manifest for i in range(6)]
    report = store.gc(max_size=parse_size("250K"))
    kept = {m.id for m in store.manifests()}
    assert report.size_after <= 250 * 1024
    assert ms[-1].id in kept and ms[-2].id in kept  # newest of c1 and c0
    removed = [i for i, _ in report.removed_checkpoints]
    assert removed == [m.id for m in ms[: len(removed)]]  # oldest first (by created)
    # a budget smaller than the newest checkpoints: they stay, and the report says so
    report = store.gc(max_size=1000)
    assert {m.id for m in store.manifests()} == {ms[-1].id, ms[-2].id}
    assert any("never removes" in n for n in report.notes)
    assert store.verify() == []


def test_leftovers_quarantine_unreadable_untrusted_and_newer_formats(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = Store(root, key=KEY)
    kept = store.save("mine", "k", {"x": _array(1)}).manifest
    foreign = Store(root, key=OTHER).save("theirs", "k", {"y": _array(2)}).manifest
    broken = store.save("broken", "k", {"z": _array(3)}).manifest
    assert broken.path is not None
    broken.path.write_text("{not json")
    (root / "objects" / "ab").mkdir(exist_ok=True)
    temp = root / "objects" / "ab" / ".tmp-cdef-123456"
    temp.write_bytes(b"half a blob")
    (root / "quarantine").mkdir()
    (root / "quarantine" / "old.bad").write_bytes(b"x" * 100)
    report = store.gc()
    assert report.removed_temp == 1 and not temp.exists()
    assert report.removed_quarantine == 1 and not list((root / "quarantine").iterdir())
    assert report.removed_unreadable == [broken.path.relative_to(root).as_posix()]
    assert report.removed_blobs == 1  # the broken checkpoint's array
    assert report.untrusted_kept == 1
    for m in (kept, foreign):  # the foreign checkpoint and its blob are kept for `trust`
        assert all(store.blob_path(r.blob).exists() for r in m.blob_refs())
    assert Store(root, key=OTHER).find("theirs", "k") is not None

    # a newer format: this version cannot know its blobs, so it removes none
    orphan = store.save("gone", "k", {"w": _array(4)}).manifest
    assert orphan.path is not None
    orphan.path.unlink()
    newer = root / "manifests" / mf.cell_dir("future") / "k" / "ffffffffffffffff.json"
    newer.parent.mkdir(parents=True)
    newer.write_text('{"format": 99, "id": "ffffffffffffffff"}\n')
    report = store.gc()
    assert report.removed_blobs == 0 and any("newer format" in n for n in report.notes)
    assert all(store.blob_path(r.blob).exists() for r in orphan.blob_refs())


def test_cli_gc_reports_what_it_freed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    data = tmp_path / "jupyter-data"
    key_path = data / "ipy_resume" / "signing.key"
    store = Store(root, key=signing_key(key_path))
    for i in range(3):
        store.save("train", f"k{i}", {"x": _array(i)})
    env = dict(os.environ, JUPYTER_DATA_DIR=str(data))
    run = [sys.executable, "-m", "ipy_resume.frontends.cli", "gc", "--store", str(root)]
    proc = subprocess.run(
        [*run, "--keep-last", "1", "--max-size", "500M"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc
    assert "removed 2 checkpoint(s) of 'train', kept 1" in proc.stdout
    assert re.search(r"freed 1\d\d\.\d KiB", proc.stdout), proc.stdout  # two 80 KB arrays
    assert len(store.manifests()) == 1
    proc = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["removed_checkpoints"] == [] and report["freed"] == 0
    assert report["kept_checkpoints"] == 1 and report["size_after"] > 80_000
    for bad in (["--keep-last", "0"], ["--max-size", "lots"]):
        proc = subprocess.run([*run, *bad], capture_output=True, text=True, env=env)
        assert proc.returncode == 2 and "usage" in proc.stderr, proc


def signing_key(path: Path) -> bytes:
    from ipy_resume.store import signing

    return signing.load_or_create_key(path)


def test_line_magic_gc(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    for value in (1, 2, 3):
        shell.run_cell(f"v = {value}")
        assert shell.run_cell("%%checkpoint cell\nw = v * 2").success
    capsys.readouterr()
    shell.run_line_magic("checkpoint", "gc --keep-last 1 --max-size 2G")
    out = capsys.readouterr().out
    assert "removed 2 checkpoint(s) of 'cell', kept 1" in out and "freed" in out
    with pytest.raises(UsageError, match="keep-last"):
        shell.run_line_magic("checkpoint", "gc --keep-last none")
    with pytest.raises(UsageError, match="usage: %checkpoint gc"):
        shell.run_line_magic("checkpoint", "gc --max-size 5Q")


def test_parse_size() -> None:
    assert parse_size("500M") == 500 << 20
    assert parse_size("2G") == 2 << 30
    assert parse_size("1.5GB") == int(1.5 * (1 << 30))
    assert parse_size("800k") == 800 << 10
    assert parse_size("12345") == 12345
    for bad in ("", "M", "-1G", "5Q", "1e9"):
        with pytest.raises(ValueError):
            parse_size(bad)


# ---------------------------------------------------------------------------
# the lock and the gc-versus-save race

_PAUSED_SAVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from ipy_resume.store import Store, fsio
    root, ready, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    real_link = fsio._link
    def link(src, dst):  # the manifest is about to be published: pause here
        ready.touch()
        while not go.exists():
            time.sleep(0.005)
        real_link(src, dst)
    fsio._link = link
    store = Store(root, key=bytes(range(32)))
    saved = store.save("racer", "k", {"x": np.arange(20_000.0)})
    print(saved.manifest.id, saved.bytes_written)
    """
)


def test_gc_never_deletes_a_blob_a_concurrent_save_deduplicated_against(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = Store(root, key=KEY)
    # an orphan blob with exactly the content the racer will store
    orphan = store.save("old", "k", {"x": np.arange(20_000.0)}).manifest
    assert orphan.path is not None
    orphan.path.unlink()
    (address,) = [r.blob for r in orphan.blob_refs() if r.kind == "hdf5"]
    ready, go = tmp_path / "ready", tmp_path / "go"
    saver = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_SAVER, str(root), str(ready), str(go)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # the saver has deduplicated against the orphan and holds the lock
        wait_until(ready.exists, what="the saver to pause before publishing")
        with pytest.raises(StoreLocked) as info:
            store.gc(grace=0, timeout=0.3)
        assert f"pid {saver.pid}" in str(info.value), str(info.value)
        assert store.blob_path(address).exists()

        # a gc that waits: it runs only once the save has committed
        result: list[retention.GcReport] = []
        waiting = threading.Thread(target=lambda: result.append(store.gc(grace=0, timeout=60)))
        waiting.start()
        # A window in which nothing may happen, not an ordering: however slow the thread is
        # to start, the gc must not finish while the save holds the lock.
        waiting.join(timeout=0.3)
        assert waiting.is_alive() and not result
        go.touch()
        out, _ = saver.communicate(timeout=60)
        waiting.join(timeout=60)
    finally:
        go.touch()
        saver.kill()
        saver.wait()
    ident, written = out.split()
    assert int(written) < 20_000 * 8  # the array blob was deduplicated, not rewritten
    assert result and result[0].removed_blobs == 0
    m = store.find("racer", "k")
    assert m is not None and m.id == ident
    np.testing.assert_array_equal(store.load_values(m)["x"], np.arange(20_000.0))
    assert store.verify() == []


_PAUSED_GC = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from ipy_resume.store import Store, fsio
    root, ready = Path(sys.argv[1]), Path(sys.argv[2])
    def unlink(path):
        ready.touch()
        time.sleep(3600)  # hold the exclusive lock until killed
    fsio._unlink = unlink
    Store(root, key=bytes(range(32))).gc(grace=0)
    """
)


def test_lock_of_a_killed_gc_is_recovered_and_a_live_one_is_named(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = Store(root, key=KEY)
    m = store.save("a", "k", {"x": 1}).manifest
    assert m.path is not None
    m.path.unlink()  # something for gc to delete
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", _PAUSED_GC, str(root), str(ready)])
    try:
        wait_until(ready.exists, what="the gc to pause holding the lock")
        store.lock_timeout = 0.3
        with pytest.raises(StoreLocked) as info:
            store.save("b", "k", {"y": 2})
        message = str(info.value)
        assert "could not save checkpoint 'b'" in message and "'gc'" in message
        assert f"pid {holder.pid}" in message and "values are still in memory" in message
        assert "no longer running" not in message
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
        holder.wait()
    owner = lock.owner(root)
    assert owner is not None and owner["pid"] == holder.pid  # the dead holder's record stays
    started = time.monotonic()
    store.save("b", "k", {"y": 2})  # ... but the lock itself died with it
    assert time.monotonic() - started < 0.3
    assert lock.holders(root) == []
    report = store.gc(grace=0)
    assert report.removed_blobs == 1
    assert store.verify() == []
    reliability_report.record(
        "gc and lock",
        "gc waited for a paused save that deduplicated against an orphan blob, then kept it; "
        "a killed gc's lock was free at once; a live one was named by pid",
    )


def test_misfiled_manifest_keeps_its_blobs(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", key=KEY)
    m = store.save("cell", "k1", {"x": _array(5)}).manifest
    assert m.path is not None
    wrong = m.path.parent.parent / "k2" / m.path.name
    wrong.parent.mkdir()
    m.path.rename(wrong)
    report = store.gc(keep_last=1)
    assert report.untrusted_kept == 1 and report.removed_blobs == 0
    assert wrong.exists() and all(store.blob_path(r.blob).exists() for r in m.blob_refs())


def test_a_manifest_gc_cannot_remove_keeps_its_blobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipy_resume.store import fsio

    store = Store(tmp_path / "s", key=KEY)
    old = store.save("cell", "k1", {"x": _array(1)}).manifest
    store.save("cell", "k2", {"x": _array(2)})
    real = fsio._unlink

    def refuse(path: object) -> None:
        if str(path) == str(old.path):
            raise PermissionError(13, "Permission denied", str(path))
        real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(fsio, "_unlink", refuse)
    report = store.gc(keep_last=1)
    assert report.removed_checkpoints == [] and report.removed_blobs == 0
    assert any("could not remove" in n and "Permission denied" in n for n in report.notes)
    monkeypatch.undo()
    found = store.find("cell", "k1")
    assert found is not None
    np.testing.assert_array_equal(store.load_values(found)["x"], _array(1))

    # a manifest that cannot be read at all: its blobs are unknown, so no blob goes
    orphan = store.save("gone", "k", {"w": _array(3)}).manifest
    assert orphan.path is not None
    orphan.path.unlink()
    (store.root / "manifests" / "odd" / "k").mkdir(parents=True)
    (store.root / "manifests" / "odd" / "k" / "0000000000000000.json").mkdir()
    report = store.gc()
    assert report.removed_blobs == 0 and any("cannot be read" in n for n in report.notes)


def test_without_flock_gc_spares_young_files_and_saves_refresh_what_they_reuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback where the filesystem has no locking: a grace period instead of the lock."""
    monkeypatch.setattr(lock, "_try", lambda fd, exclusive: None)  # "unsupported"
    store = Store(tmp_path / "s", key=KEY)
    shared = _array(7)
    first = store.save("a", "k", {"x": shared}).manifest
    assert first.path is not None
    first.path.unlink()  # its blob is now an orphan...
    (address,) = [r.blob for r in first.blob_refs() if r.kind == "hdf5"]
    blob = store.blob_path(address)
    two_hours_ago = time.time() - 7200
    os.utime(blob, (two_hours_ago, two_hours_ago))  # ...and an old one
    young = store.save("b", "k", {"y": _array(8)}).manifest
    assert young.path is not None
    young.path.unlink()  # a young orphan

    # a save that reuses the old orphan refreshes it, so a gc that cannot lock spares it
    again = store.save("c", "k", {"x": shared})
    assert again.bytes_written < shared.nbytes
    assert blob.stat().st_mtime > two_hours_ago + 3600
    report = store.gc()
    assert report.locked is False and report.removed_blobs == 0
    assert blob.exists()

    # once old enough, orphans go
    for path in (store.root / "objects").glob("*/*"):
        os.utime(path, (two_hours_ago, two_hours_ago))
    report = store.gc()
    assert report.removed_blobs == 1  # the young orphan's array; the reused blob is referenced
    assert store.verify() == []


_TRY_GC = """
import sys
from ipy_resume.store import lock
try:
    with lock.hold(sys.argv[1], exclusive=True, timeout=0.3, purpose="gc"):
        print("gc got the lock")
except lock.StoreLocked:
    print("gc waited")
"""


def _gc_elsewhere(root: Path) -> str:
    """What an exclusive lock attempt in another process finds (0.3 s of waiting)."""
    proc = subprocess.run(
        [sys.executable, "-c", _TRY_GC, str(root)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_saves_of_one_process_share_one_hold_of_the_lock_until_the_last_ends(
    tmp_path: Path,
) -> None:
    # A save that starts while another save of the process holds the shared lock joins
    # that hold (no descriptor of its own); gc elsewhere waits until the last one ends,
    # whichever thread ends it.
    root = tmp_path / "s"
    root.mkdir()
    first = lock.hold(root, exclusive=False, timeout=5, purpose="save")
    assert first.__enter__() is True
    with lock.hold(root, exclusive=False, timeout=5, purpose="save") as second:
        assert second is True
        assert len(lock._shared) == 1 and lock._shared[os.fspath(root / "lock")][1] == 2
        assert lock.holders(root) == [os.getpid()]
        ender = threading.Thread(target=first.__exit__, args=(None, None, None))
        ender.start()
        ender.join(10)
        assert _gc_elsewhere(root) == "gc waited"  # the second still holds it
    assert lock._shared == {}
    assert _gc_elsewhere(root) == "gc got the lock"
    # and a hold after that locks the file afresh
    with lock.hold(root, exclusive=False, timeout=5, purpose="save") as again:
        assert again is True and _gc_elsewhere(root) == "gc waited"
    assert _gc_elsewhere(root) == "gc got the lock"
