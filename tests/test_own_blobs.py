"""Small blobs this process wrote, kept in memory for its hits (docs/guarantees.md).

They stand for a read of the file only while the file keeps the identity it had right
after the write, once it has settled, and only when they match the manifest's
checksum; every other case reads (and verifies) the file as before.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ipy_resume.store import Store, blobs, fsio
from ipy_resume.store import backend as backend_module
from ipy_resume.store import store as store_module

KEY = bytes(range(100, 132))


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    store_module.forget_verified()
    blobs.forget_own_blobs()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The small blob files loads read from disk."""
    seen: list[str] = []
    real = blobs.BlobStore._read_small

    def observed(self: Any, address: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(address)
        return real(self, address, *args, **kwargs)

    monkeypatch.setattr(blobs.BlobStore, "_read_small", observed)
    return seen


def _margin(monkeypatch: pytest.MonkeyPatch, ns: int) -> None:
    monkeypatch.setattr(backend_module, "_RACY_NS", ns)
    monkeypatch.setattr(backend_module, "_RACY_FINE_NS", ns)


def _blob_file(store: Store, m: Any, name: str) -> Path:
    return Path(store.blobs.path(m.values[name].blob))


def test_a_settled_small_blob_this_process_wrote_is_not_read_again(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _margin(monkeypatch, 0)
    store = Store(tmp_path / "st", key=KEY)
    m = store.save("c", "k1", {"x": [1.0, 2.0, 3.0], "label": "run 7"}).manifest
    for _ in range(3):
        values = store.load_values(m)
        assert values == {"x": [1.0, 2.0, 3.0], "label": "run 7"}
    assert reads == []
    # each load gets objects of its own
    assert store.load_values(m)["x"] is not store.load_values(m)["x"]


def test_a_blob_that_has_not_settled_is_read(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _margin(monkeypatch, 10**12)  # (nothing settles during the test)
    store = Store(tmp_path / "st", key=KEY)
    m = store.save("c", "k1", {"x": [1.0, 2.0]}).manifest
    assert store.load_values(m) == {"x": [1.0, 2.0]}
    assert reads == [m.values["x"].blob]


def test_a_blob_changed_in_place_after_it_settled_is_read_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _margin(monkeypatch, 0)
    store = Store(tmp_path / "st", key=KEY)
    m = store.save("c", "k1", {"x": [1.0, 2.0, 3.0]}).manifest
    assert store.load_values(m) == {"x": [1.0, 2.0, 3.0]}
    path = _blob_file(store, m, "x")
    before = os.stat(path)
    time.sleep(0.05)  # (a later tick of the filesystem's clock: the ctime moves)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(path, "r+b") as f:  # same inode, same size
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(fsio.CorruptBlob):
        store.load_values(m)


def test_a_removed_blob_is_missing_although_its_bytes_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _margin(monkeypatch, 0)
    store = Store(tmp_path / "st", key=KEY)
    m = store.save("c", "k1", {"x": [4.0]}).manifest
    assert store.load_values(m) == {"x": [4.0]}
    _blob_file(store, m, "x").unlink()
    with pytest.raises(fsio.MissingBlob):
        store.load_values(m)


def test_kept_bytes_that_fail_the_manifests_checksum_are_not_used(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _margin(monkeypatch, 0)
    store = Store(tmp_path / "st", key=KEY)
    m = store.save("c", "k1", {"x": [5.0, 6.0]}).manifest
    name = os.fspath(_blob_file(store, m, "x"))
    ident, data, settled = blobs._own.files[name]
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    blobs._own.files[name] = (ident, bytes(damaged), settled)
    assert store.load_values(m) == {"x": [5.0, 6.0]}  # from the file, verified
    assert reads == [m.values["x"].blob]


def test_a_blob_above_the_size_kept_is_read(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _margin(monkeypatch, 0)
    store = Store(tmp_path / "st", key=KEY)
    big = np.arange(blobs.OWN_BLOB_MAX // 8 + 100, dtype=np.float64)
    m = store.save("c", "k1", {"big": big}).manifest
    assert m.values["big"].size > blobs.OWN_BLOB_MAX
    assert np.array_equal(store.load_values(m)["big"], big)  # type: ignore[arg-type]
    assert reads == [m.values["big"].blob]
