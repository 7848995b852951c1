"""I/O error injection: fail the N-th write / fsync / rename / mkdir / open of a save, for every N.

Through a real IPython shell running ``%%checkpoint``: for each kind of
operation and each N up to the number of such operations one save makes, the
N-th one raises ENOSPC or EIO.  Every time: the cell's values stay in the
kernel, the user gets exactly one line saying what was not saved, the store
verifies, nothing of the failed save is committed, and after ``gc`` no
temporary file or unreferenced blob is left.  The same cell then runs again
without injection and hits a fresh, correct checkpoint.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_report
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.store import Store, fsio

CELL = (
    "%%checkpoint io --ignore runs\n"
    "runs.append(1)\n"
    "big = np.arange(20_000, dtype=np.float64) * factor\n"  # HDF5 blob
    "meta = {'inner': np.ones(10_000) * factor}\n"  # raw out-of-band blob + pack
    "small = [factor, 'text']\n"  # packed
)
KINDS: dict[str, tuple[str, ...]] = {
    "write": ("_write",),
    "fsync": ("_fsync",),
    "rename": ("_replace", "_link"),
    "mkdir": ("_mkdir",),
    "open": ("_open",),  # creating a file fails too when a disk runs out of inodes
}


def _count_hooks(monkeypatch: pytest.MonkeyPatch, counts: dict[str, int]) -> None:
    for kind, names in KINDS.items():
        for name in names:
            real = getattr(fsio, name)

            def counted(
                *a: Any, _real: Callable[..., Any] = real, _k: str = kind, **kw: Any
            ) -> Any:
                counts[_k] = counts.get(_k, 0) + 1
                return _real(*a, **kw)

            monkeypatch.setattr(fsio, name, counted)


def _fail_nth(
    monkeypatch: pytest.MonkeyPatch, kind: str, n: int, code: int, fired: list[str]
) -> None:
    seen = 0
    for name in KINDS[kind]:
        real = getattr(fsio, name)

        def failing(*a: Any, _real: Callable[..., Any] = real, _name: str = name, **kw: Any) -> Any:
            nonlocal seen
            seen += 1
            if seen == n:
                fired.append(_name)
                raise OSError(code, os.strerror(code), str(a[0]) if a else None)
            return _real(*a, **kw)

        monkeypatch.setattr(fsio, name, failing)


def _io_manifests(root: Path) -> list[Path]:
    return sorted(p for p in (root / "manifests").rglob("*.json") if "io-" in str(p))


def _check_values(shell: InteractiveShell) -> None:
    ns = shell.user_ns
    np.testing.assert_array_equal(ns["big"], np.arange(20_000) * 3.0)
    np.testing.assert_array_equal(ns["meta"]["inner"], np.ones(10_000) * 3)
    assert ns["small"] == [3, "text"]


def _clean(store: Store) -> None:
    """gc must leave no temporary file and no unreferenced blob."""
    store.gc(grace=0)
    assert not [p for p in store.root.rglob("*") if fsio.is_temp_name(p.name)]
    referenced = {r.blob for m in store.manifests() for r in m.blob_refs()}
    orphans = [
        p for p in (store.root / "objects").glob("*/*") if p.parent.name + p.name not in referenced
    ]
    assert not orphans


def test_every_failed_operation_keeps_values_and_says_so_once(
    shell: InteractiveShell,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = isolated / "store"
    shell.run_cell("import numpy as np\nfactor = 3\nruns = []")
    assert shell.run_cell("%%checkpoint warmup\nw = 1").success  # store and key exist
    store = Store(root)

    # how many operations of each kind one save of the cell makes
    counts: dict[str, int] = {}
    with monkeypatch.context() as m:
        _count_hooks(m, counts)
        assert shell.run_cell(CELL).success
    assert all(counts.get(kind, 0) > 0 for kind in KINDS), counts
    for path in _io_manifests(root):  # back to the state before that save
        path.unlink()
    _clean(store)
    capsys.readouterr()

    trials = 0
    for kind in KINDS:
        for n in range(1, counts[kind] + 1):
            for code in (errno.ENOSPC, errno.EIO):
                fired: list[str] = []
                runs_before = len(shell.user_ns["runs"])
                for name in ("big", "meta", "small"):
                    shell.user_ns.pop(name, None)
                with monkeypatch.context() as m:
                    _fail_nth(m, kind, n, code, fired)
                    result = shell.run_cell(CELL)
                where = f"{kind} #{n} {errno.errorcode[code]}"
                assert result.success, where
                assert fired, f"{where}: the injected failure never happened"
                assert len(shell.user_ns["runs"]) == runs_before + 1, where
                _check_values(shell)  # the values stay in the kernel
                err = capsys.readouterr().err
                lines = [line for line in err.splitlines() if line.strip()]
                assert len(lines) == 1, f"{where}: expected one message, got {lines}"
                message = lines[0]
                assert "could not save checkpoint 'io'" in message, message
                assert os.strerror(code) in message, message
                assert all(name in message for name in ("big", "meta", "small")), message
                if code == errno.ENOSPC:
                    assert "gc" in message, message  # says how to free space
                assert _io_manifests(root) == [], f"{where}: a failed save committed"
                assert store.verify() == [], where
                _clean(store)
                trials += 1

    # without injection the cell commits and then hits
    assert shell.run_cell(CELL).success
    assert len(_io_manifests(root)) == 1
    runs = len(shell.user_ns["runs"])
    assert shell.run_cell(CELL).success
    assert len(shell.user_ns["runs"]) == runs  # restored, not executed
    _check_values(shell)
    assert store.verify() == []
    reliability_report.record(
        "I/O error injection",
        f"{trials} failed saves through %%checkpoint ("
        + ", ".join(f"{k} 1..{counts[k]}" for k in KINDS)
        + " x ENOSPC/EIO): values kept, one message each, store verified, no temp file or "
        "orphan blob after gc",
    )


def test_failure_after_the_manifest_is_published_takes_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder fsync after the manifest's link fails: the error must not be a lie."""
    store = Store(tmp_path / "store", key=bytes(32))
    store.save("warm", "k", {"a": 1})
    calls: list[str] = []
    real_link, real_fsync = fsio._link, fsio._fsync

    def link(src: Any, dst: Any) -> None:
        real_link(src, dst)
        calls.append(str(dst))

    def fsync(fd: int) -> None:
        if calls and calls[-1].endswith(".json") and len(calls) == 1:
            calls.append("failed")
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(fsio, "_link", link)
    monkeypatch.setattr(fsio, "_fsync", fsync)
    with pytest.raises(fsio.SaveError, match="nothing was committed"):
        store.save("cell", "k", {"x": 1})
    assert "failed" in calls
    assert store.find("cell", "k") is None
    assert store.history("cell") == []
