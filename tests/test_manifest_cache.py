"""The process-local cache of verified manifests (docs/guarantees.md): what it trusts.

A hit does not read a settled manifest again while the file's identity is unchanged;
every change to the file (in place, by rename, under another key) is still seen.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import spy

from ipy_resume.store import ManifestError, Store, StoreError, Untrusted, manifest
from ipy_resume.store import backend as backend_module
from ipy_resume.store import reader as reader_module
from ipy_resume.store import store as store_module

KEY = bytes(range(100, 132))
OTHER = bytes(range(1, 33))


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    store_module.forget_verified()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The manifest files the store reads (an observing wrapper of the folder backend's
    one read of a file and its status)."""
    return spy(monkeypatch, backend_module, "_read_fd")


def _settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat files as settled at once (the margin has its own tests)."""
    monkeypatch.setattr(backend_module, "_RACY_NS", 0)
    monkeypatch.setattr(backend_module, "_RACY_FINE_NS", 0)


def _next_tick() -> None:
    # a change must land in a later tick of the filesystem clock than the file's last one
    # for its ctime to differ; the 2 s rule covers changes within one tick
    time.sleep(0.05)


def _flip_in_place(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data and len(old) == len(new)
    with open(path, "r+b") as f:  # same inode, same size
        f.write(data.replace(old, new, 1))


def test_a_settled_manifest_is_not_read_again(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _settle(monkeypatch)
    store = Store(tmp_path / "st", key=KEY)
    saved = store.save("c", "k1", {"x": 1}).manifest
    first = store.find("c", "k1")
    assert first is not None and first.id == saved.id
    assert reads == [str(saved.path)]  # the bytes this process signed, compared once
    again = Store(tmp_path / "st", key=KEY).find("c", "k1")  # another Store, same process
    assert again is first
    assert reads == [str(saved.path)]
    # verify reads every manifest whatever the cache holds
    assert store.verify() == []
    assert reads == [str(saved.path)] * 2


def test_a_fresh_manifest_is_compared_until_it_settles(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend_module, "_RACY_FINE_NS", 10_000_000_000)  # a slow test machine
    store = Store(tmp_path / "st", key=KEY)
    saved = store.save("c", "k1", {"x": 1}).manifest
    for _ in range(3):
        assert store.find("c", "k1") is not None
    # changed a moment ago: read (and compared by sha256) each time
    assert reads == [str(saved.path)] * 3


def test_a_rewrite_in_place_within_one_tick_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no settling and no sleep: the tamper may share the file's mtime and ctime exactly
    monkeypatch.setattr(backend_module, "_RACY_FINE_NS", 10_000_000_000)  # a slow test machine
    store = Store(tmp_path / "st", key=KEY)
    saved = store.save("c", "k1", {"x": 1}).manifest
    assert store.find("c", "k1") is not None
    assert saved.path is not None
    _flip_in_place(Path(saved.path), b'"x"', b'"z"')
    with pytest.raises(StoreError):
        store.find("c", "k1")


def test_a_settled_manifest_tampered_in_place_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settle(monkeypatch)
    store = Store(tmp_path / "st", key=KEY)
    saved = store.save("c", "k1", {"x": 1}).manifest
    assert store.find("c", "k1") is not None
    assert store.find("c", "k1") is not None  # now served from the cache
    path = Path(str(saved.path))
    before = os.stat(path)
    _next_tick()
    _flip_in_place(path, b'"x"', b'"z"')
    # even with the old mtime put back, the ctime moved
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert os.stat(path).st_size == before.st_size
    with pytest.raises(ManifestError):
        store.find("c", "k1")


def test_a_manifest_replaced_by_rename_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settle(monkeypatch)
    store = Store(tmp_path / "st", key=KEY)
    old = store.save("c", "k1", {"x": 1}, info={"tag": "old"}).manifest
    assert store.find("c", "k1") is not None
    assert store.find("c", "k1") is not None
    # a sound manifest of another key, signed by this key, renamed over the cached one:
    # it is filed under the wrong key, which only a fresh read can tell
    other = store.save("c", "k2", {"x": 2}, info={"tag": "new"}).manifest
    _next_tick()
    os.replace(str(other.path), str(old.path))
    with pytest.raises(ManifestError, match="wrong cell or key"):
        store.find("c", "k1")


def test_a_manifest_cached_under_one_key_is_not_trusted_under_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settle(monkeypatch)
    mine = Store(tmp_path / "st", key=KEY)
    mine.save("c", "k1", {"x": 1})
    assert mine.find("c", "k1") is not None
    assert mine.find("c", "k1") is not None  # cached under KEY
    theirs = Store(tmp_path / "st", key=OTHER)
    with pytest.raises(Untrusted):
        theirs.find("c", "k1")
    assert theirs.manifests() == []
    # and the same Store object after its key changed
    mine.key = OTHER
    with pytest.raises(Untrusted):
        mine.find("c", "k1")
    mine.key = KEY
    assert mine.find("c", "k1") is not None


def test_trust_re_signs_and_the_new_key_then_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settle(monkeypatch)
    theirs = Store(tmp_path / "st", key=OTHER)
    theirs.save("c", "k1", {"x": 1})
    assert theirs.find("c", "k1") is not None
    mine = Store(tmp_path / "st", key=KEY)
    with pytest.raises(Untrusted):
        mine.find("c", "k1")
    assert mine.trust() == 1
    found = mine.find("c", "k1")
    assert found is not None and mine.load_values(found) == {"x": 1}
    # the old signer's cached entry is of a file that was replaced: it reads it afresh
    with pytest.raises(Untrusted):
        theirs.find("c", "k1")


def test_blobs_are_verified_on_every_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _settle(monkeypatch)
    store = Store(tmp_path / "st", key=KEY)
    store.save("c", "k1", {"x": list(range(100))})
    found = store.find("c", "k1")
    assert found is not None and store.load_values(found) == {"x": list(range(100))}
    found = store.find("c", "k1")  # from the cache
    assert found is not None
    ref = found.values["x"]
    blob = store.blob_path(ref.blob)
    data = bytearray(Path(blob).read_bytes())
    data[ref.offset + 5] ^= 0xFF
    os.chmod(blob, 0o644)
    Path(blob).write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt"):
        store.load_values(found)


def test_a_deleted_manifest_is_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _settle(monkeypatch)
    store = Store(tmp_path / "st", key=KEY)
    saved = store.save("c", "k1", {"x": 1}).manifest
    assert store.find("c", "k1") is not None
    assert store.find("c", "k1") is not None
    os.remove(str(saved.path))
    assert store.find("c", "k1") is None


def test_signer_of_cached_entries_is_the_key_id(tmp_path: Path) -> None:
    # the cache is keyed by a digest of the key, never by the signer field of the file
    store = Store(tmp_path / "st", key=KEY)
    store.save("c", "k1", {"x": 1})
    (slot,) = list(reader_module._verified)
    assert slot[1] != manifest.signer(KEY).encode() and slot[1] != KEY
    assert slot[1] == store.ctx.trust()


def test_the_margin_follows_the_timestamps_precision() -> None:
    now = time.time_ns()
    fine = now - 150_000_000 + 123  # 0.15 s ago, with sub-millisecond digits
    assert backend_module._settled_at(fine, fine, now)
    assert not backend_module._settled_at(fine, now - 50_000_000 + 7, now)  # changed 50 ms ago
    # whole milliseconds (or seconds): perhaps a coarse filesystem, the 2 s margin applies
    whole = (now // 10**9 - 1) * 10**9
    assert not backend_module._settled_at(whole, whole, now)
    assert backend_module._settled_at(whole - 2 * 10**9, whole - 2 * 10**9, now)


def test_a_real_file_settles(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    st = os.stat(path)
    if not (st.st_mtime_ns % 1_000_000 and st.st_ctime_ns % 1_000_000):
        pytest.skip("this filesystem's timestamps are coarse")
    deadline = time.monotonic() + 10
    while not backend_module._settled(os.stat(path)):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert time.time_ns() - st.st_ctime_ns > backend_module._RACY_FINE_NS


def test_a_new_checkpoint_of_a_listed_key_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settle(monkeypatch)
    store = Store(tmp_path / "st", key=KEY)
    store.save("c", "k1", {"x": 1})
    assert store.find("c", "k1") is not None
    assert store.find("c", "k1") is not None  # the listing is reused now
    _next_tick()
    newer = Store(tmp_path / "st", key=KEY).save("c", "k1", {"x": 2}).manifest
    found = store.find("c", "k1")
    assert found is not None and found.id == newer.id


def _background_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A store holding ("c", "k1") -> {"x": 1}, saved as a kernel's cell saves it: staged,
    then committed on the writer thread."""
    from ipy_resume.store import background

    monkeypatch.delenv(background.SWITCH_ENV, raising=False)
    store = Store(tmp_path / "st", key=KEY)
    job = store.writer.submit(store.snapshot("c", "k1", {"x": 1}))
    assert job is not None
    assert background.flush() and job.error is None
    return store


def test_a_manifest_this_process_published_is_not_read_once_settled(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer thread parses the bytes it signed and notes the file's identity right
    # after the publish; once the file has settled with that identity, a hit reads nothing.
    store = _background_save(tmp_path, monkeypatch)
    _settle(monkeypatch)
    found = store.find("c", "k1")
    assert found is not None and store.load_values(found) == {"x": 1}
    assert reads == []
    assert store.find("c", "k1") is found and reads == []


def test_a_manifest_this_process_published_and_then_changed_is_refused(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _background_save(tmp_path, monkeypatch)
    (path,) = (tmp_path / "st" / "manifests").rglob("*.json")
    before = os.stat(path)
    _next_tick()
    _flip_in_place(path, b'"x"', b'"z"')
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # (the ctime still moved)
    _settle(monkeypatch)
    with pytest.raises(ManifestError):
        store.find("c", "k1")
    assert reads == [str(path)]
