"""One contract, every backend: what the store relies on, run against each way it is kept.

Two layers, each a suite of tests parametrised by backend (as zarr's ``StoreTests`` runs
one suite against every store):

* the **backend** contract, what :class:`~ipy_resume.store.backend.Backend` promises
  (keys, listings, put-if-absent, moves, identities), on a folder and on a bucket of
  moto's S3 server;
* the **store** contract, what a user sees (a save found and loaded again from another
  process's view of the store, damage found and healed, gc, the timeline), on a folder,
  on a bucket read through a warm blob cache, and on a bucket read with a cold cache
  every time (so every blob comes from the bucket and is verified there).

A backend is added to ipy_resume by adding it to the fixtures here: it is done when this
file passes for it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ipy_resume.store import CorruptBlob, Store, Untrusted
from ipy_resume.store.backend import Backend, LocalBackend
from ipy_resume.store.blobcache import BlobCache
from ipy_resume.store.journal import events_from_manifests
from ipy_resume.store.remote import RemoteStore
from ipy_resume.store.remote_backend import FsspecBackend

KEY = bytes(range(40, 72))
OTHER_KEY = bytes(range(90, 122))

# -- the backend contract ---------------------------------------------------------------


@pytest.fixture(params=["folder", "bucket"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made: Backend
    if request.param == "folder":
        made = LocalBackend(tmp_path / "root")
    else:
        made = FsspecBackend(request.getfixturevalue("s3_url"))
    yield made
    made.close()


def test_what_is_put_is_got_back_whole_and_in_ranges(backend: Backend) -> None:
    backend.put("objects/ab/cdef", [b"hello ", memoryview(b"world")])
    assert backend.get("objects/ab/cdef") == b"hello world"
    assert backend.get("objects/ab/cdef", 6, 11) == b"world"
    found = backend.stat("objects/ab/cdef")
    assert found is not None and found.size == 11
    assert backend.exists("objects/ab/cdef") and not backend.exists("objects/ab/none")
    out = bytearray(11)
    assert (
        backend.read_into("objects/ab/cdef", memoryview(out)) == 11 and bytes(out) == b"hello world"
    )


def test_a_missing_key_is_file_not_found(backend: Backend) -> None:
    with pytest.raises(FileNotFoundError):
        backend.get("manifests/c/k/none.json")
    assert backend.stat("manifests/c/k/none.json") is None


def test_put_if_absent_never_replaces(backend: Backend) -> None:
    assert backend.put_if_absent("manifests/c/k/a.json", b"first")
    assert not backend.put_if_absent("manifests/c/k/a.json", b"second")
    assert backend.get("manifests/c/k/a.json") == b"first"


def test_listings_name_every_key_under_a_prefix_and_only_those(backend: Backend) -> None:
    for key in ["manifests/c/k1/a.json", "manifests/c/k2/b.json", "objects/ab/cd"]:
        backend.put(key, [b"x"])
    assert sorted(o.key for o in backend.list("manifests")) == [
        "manifests/c/k1/a.json",
        "manifests/c/k2/b.json",
    ]
    assert sorted(backend.keys("manifests", 3)) == [
        "manifests/c/k1/a.json",
        "manifests/c/k2/b.json",
    ]
    assert backend.has_prefix("objects") and not backend.has_prefix("quarantine")


def test_delete_and_move_change_what_is_listed(backend: Backend) -> None:
    backend.put("objects/ab/cd", [b"bad bytes"])
    backend.move("objects/ab/cd", "quarantine/cd.1")
    assert not backend.exists("objects/ab/cd")
    assert backend.get("quarantine/cd.1") == b"bad bytes"
    backend.delete("quarantine/cd.1")
    assert [o.key for o in backend.list("quarantine")] == []


def test_a_key_outside_the_store_is_refused(backend: Backend) -> None:
    with pytest.raises(ValueError):
        backend.put("../outside", [b"x"])


def test_the_shared_lock_is_taken_and_given_back(backend: Backend) -> None:
    backend.prepare()  # (where the store is created: a folder's lock file lives in it)
    with backend.lock(exclusive=False, timeout=5.0, purpose="save"):
        pass
    with backend.lock(exclusive=True, timeout=5.0, purpose="gc"):
        pass  # (no save holds the shared lock any more)


# -- the store contract -----------------------------------------------------------------

Opener = Callable[[], Store]


@pytest.fixture(params=["folder", "bucket, warm cache", "bucket, cold cache"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the store as a new process would: a new object (and, cold, an empty cache)."""
    if request.param == "folder":
        return lambda: Store(tmp_path / "store", key=KEY)
    url = request.getfixturevalue("s3_url")
    cache = tmp_path / "cache"

    def open_bucket() -> Store:
        if request.param == "bucket, cold cache":
            shutil.rmtree(cache, ignore_errors=True)
        return RemoteStore(url, key=KEY, cache=BlobCache(cache))

    return open_bucket


def test_a_save_is_found_and_loaded_by_another_opening(opener: Opener) -> None:
    values = {"a": np.arange(100_000, dtype=np.float64), "meta": {"lr": 0.1}, "s": "text"}
    saved = opener().save("train", "k1", values).manifest
    store = opener()
    found = store.find("train", "k1")
    assert found is not None and found.id == saved.id and found.complete
    loaded = store.load_values(found)
    assert np.array_equal(loaded["a"], values["a"]) and loaded["a"].dtype == np.float64
    assert loaded["meta"] == {"lr": 0.1} and loaded["s"] == "text"
    assert store.find("train", "other") is None


def test_the_newest_checkpoint_of_a_key_wins(opener: Opener) -> None:
    store = opener()
    store.save("c", "k1", {"x": 1})
    newest = store.save("c", "k1", {"x": 2}).manifest
    found = opener().find("c", "k1")
    assert found is not None and found.id == newest.id
    assert [m.id for m in opener().history("c")][-1] == newest.id


def test_values_that_share_an_object_share_it_after_a_load(opener: Opener) -> None:
    shared = [1, 2, 3]
    base = np.arange(10.0)
    opener().save("c", "k1", {"a": shared, "b": {"held": shared}, "v": base[2:5], "base": base})
    store = opener()
    found = store.find("c", "k1")
    assert found is not None
    out = store.load_values(found)
    assert out["b"]["held"] is out["a"]
    out["base"][3] = -1.0
    assert out["v"][1] == -1.0  # still a view of the array it viewed


def test_a_manifest_under_another_key_is_not_trusted(opener: Opener) -> None:
    opener().save("c", "k1", {"x": 1})
    stranger = opener()
    stranger.key = OTHER_KEY  # (a store whose signing key differs: a colleague's, say)
    with pytest.raises(Untrusted):
        stranger.find("c", "k1")


def test_a_corrupt_blob_is_caught_before_a_value_is_built(opener: Opener) -> None:
    store = opener()
    m = store.save("c", "k1", {"a": np.arange(50_000.0)}).manifest
    (ref,) = m.values.values()
    key = store.blobs.key(ref.blob)
    data = bytearray(store.backend.get(key))
    data[len(data) // 2] ^= 0xFF
    store.backend.put(key, [bytes(data)])
    again = opener()
    found = again.find("c", "k1")
    assert found is not None
    with pytest.raises(CorruptBlob):
        again.load_values(found)
    # the bad blob is moved aside, never deleted, so the next run writes it again
    assert not again.backend.exists(key)
    assert [o.key for o in again.backend.list("quarantine")] != []


def test_a_store_damaged_and_saved_again_verifies_clean(opener: Opener) -> None:
    store = opener()
    m = store.save("c", "k1", {"a": np.arange(50_000.0)}).manifest
    (ref,) = m.values.values()
    key = store.blobs.key(ref.blob)
    store.backend.put(key, [b"\0" * ref.size])
    assert opener().verify() != []
    healer = opener()
    found = healer.find("c", "k1")
    assert found is not None
    with pytest.raises(CorruptBlob):
        healer.load_values(found)
    healer.save("c", "k1", {"a": np.arange(50_000.0)})
    assert opener().verify() == []


def test_gc_keeps_the_last_and_removes_what_nothing_refers_to(opener: Opener) -> None:
    store = opener()
    for i in range(3):
        store.save("c", f"k{i}", {"a": np.full(1000, float(i))})
    report = opener().gc(keep_last=1, grace=0.0)
    assert len(report.removed_checkpoints) == 2 and report.kept_checkpoints == 1
    assert report.removed_blobs >= 2
    after = opener()
    assert [m.key for m in after.manifests()] == ["k2"]
    assert after.verify() == []


def test_the_timeline_keeps_what_is_appended_and_rebuilds_from_manifests(opener: Opener) -> None:
    store = opener()
    saved = [store.save("c", f"k{i}", {"x": i}).manifest for i in range(2)]
    journal = store.journal()
    for event in events_from_manifests(saved[:1]):
        journal.append(event)
    journal.close()
    seen = {e.checkpoint_id for e in opener().journal().events()}
    assert saved[0].id in seen
    if store.backend.local_files:  # (a folder's timeline is rebuilt from every manifest)
        assert saved[1].id in seen


def test_ids_and_their_short_forms_are_unique(opener: Opener) -> None:
    store = opener()
    ids = {store.save("c", f"k{i}", {"x": i}).manifest.id for i in range(3)}
    again = opener()
    assert again.ids() == ids
    shorts = again.short_ids()
    assert len(set(shorts.values())) == 3 and all(i.startswith(s) for i, s in shorts.items())
