"""A checkpoint store in an object store: :class:`RemoteStore` (``s3://bucket/prefix``).

The layout is the local one, as keys under the prefix::

    store.json                          {"format", "created", "seed_base", "check"}
    objects/ab/cdef…                    content-addressed blobs, immutable
    manifests/<cell-dir>/<key>/<id>.json signed manifests, created with put-if-absent
    events/<ms>-<event id>.json         the timeline, one immutable object per event
    leases/<id>.json                    saves in progress (see "gc" below)
    gc/<id>.json                        a gc deleting blobs
    quarantine/                         what failed verification

What the local store gets from ``fsync``/``rename``/``flock`` comes from the object
store's own guarantees here:

* **Atomic objects.** A PUT (or a completed multipart upload) is visible whole or not
  at all, so a blob is never half-written; a save killed mid-upload leaves no object.
* **The manifest is the commit point**, written last with a conditional put
  (``If-None-Match: *``): two writers never overwrite each other, and a crash before
  it leaves no checkpoint (only unreferenced blobs, which ``gc`` removes).
* **Nothing is trusted before it verifies.**  Manifests are HMAC-checked under the
  user's key (never kept in the bucket), every blob against the manifest's checksum,
  before any byte reaches ``pickle.loads``, including blobs from the local cache.
* **gc and saves exclude each other without a lock** (there is no ``flock`` on a
  bucket), by two-phase marking: a save writes a lease, then looks for a gc marker
  (and waits while one is there); gc writes its marker, then looks for leases, and
  deletes no blob while a live one exists.  With the strong read-after-write
  consistency of S3, at least one of them sees the other, so gc never deletes a blob
  a concurrent save found and decided to reuse.  Leases of dead processes (same host)
  or older than the grace period are stale and ignored.  The lease is the backend's
  shared ``lock`` (:func:`.leases.hold`), which ``Store.save`` takes on every backend.

Everything else is :class:`Store`'s own code on the backend's keys and capabilities
(backend.py): finding, reading and verifying manifests (the listing's entity tags for
the manifest cache), saving, verify, trust, and the timeline (one object per event,
:mod:`.remote_journal`, because the backend has no ``local_files``).  Only ``gc``
differs: its side of the lease protocol (:mod:`.remote_maintenance`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ipy_resume.store import blobs
from ipy_resume.store.backend import Backend
from ipy_resume.store.blobcache import BlobCache
from ipy_resume.store.blobs import algo_of, aligned_empty, new_hasher
from ipy_resume.store.fsio import (
    CorruptBlob,
    MissingBlob,
    StoreError,
)
from ipy_resume.store.leases import LEASE_STALE
from ipy_resume.store.remote_backend import FsspecBackend
from ipy_resume.store.store import Store

__all__ = ["LEASE_STALE", "RemoteBlobs", "RemoteStore"]


class RemoteBlobs:
    """``objects/`` and ``quarantine/`` of a remote store, with a local read-through cache.

    The same interface as :class:`.blobs.BlobStore`, on string keys.
    """

    def __init__(self, backend: Backend, cache: BlobCache | None) -> None:
        self.backend = backend
        self.cache = cache
        self.objects = PurePosixPath("objects")
        self.quarantine_dir = PurePosixPath("quarantine")

    def key(self, address: str) -> str:
        if not blobs.valid_address(address):
            raise ValueError(f"bad blob address {address!r}")
        return f"objects/{address[:2]}/{address[2:]}"

    def path(self, address: str) -> PurePosixPath:
        return PurePosixPath(self.key(address))

    def relpath(self, address: str) -> str:
        return self.key(address)

    def ready(self) -> None:
        """Nothing to make before a save: a bucket has no folders."""

    def has(self, address: str) -> bool:
        return self.backend.exists(self.key(address))

    def exists(self, address: str, size: int) -> bool:
        found = self.backend.stat(self.key(address))
        return found is not None and found.size == size

    def put(
        self,
        address: str,
        chunks: Iterable[Any],
        size: int,
        *,
        touch: bool = False,
        verify: bool = False,
    ) -> int:
        """Upload a blob unless an object of its size is there already; bytes uploaded."""
        if (
            verify
            and self.exists(address, size)
            and self.check(address, algo_of(address), address, size) is not None
        ):
            self.quarantine(address)
        if self.exists(address, size):
            return 0  # content-addressed: the same bytes (checked when they are read)
        self.backend.put(self.key(address), chunks, size)
        return size

    def _fetch(self, address: str, size: int, sink: Any = None) -> tuple[np.ndarray, int]:
        buf = aligned_empty(size)
        if size == 0:
            return buf, 0
        got = self.backend.read_into(self.key(address), buf.data, sink=sink)
        return buf, got

    def read(
        self, address: str, algo: str, checksum: str, size: int, *, context: str
    ) -> np.ndarray:
        """The verified bytes of a blob: from the cache when a copy there verifies."""
        if self.cache is not None:
            cached = self.cache.read(address, algo, checksum, size)
            if cached is not None:
                return cached
        rel = self.key(address)
        entry = self.cache.writer(address, size) if self.cache is not None else None
        try:
            try:
                buf, got = self._fetch(address, size, None if entry is None else entry.piece)
            except FileNotFoundError:
                raise MissingBlob(
                    f"{context} cannot be restored: {rel} is missing; it will be recomputed. "
                    "Run 'ipy-resume verify' to list others.",
                    path=rel,
                    reason="missing",
                ) from None
            problem = None
            if got < size:
                problem = f"is truncated ({got} of {size} bytes)"
            else:
                h = new_hasher(algo)
                h.update(buf.data)
                if h.hexdigest() != checksum:
                    problem = "failed its checksum"
        except BaseException:
            if entry is not None:
                entry.abandon()
            raise
        if problem is None:
            if entry is not None:
                entry.commit()
            return buf
        if entry is not None:
            entry.abandon()
        moved = self.quarantine(address)
        where = "it was moved to quarantine/ and" if moved else "it"
        raise CorruptBlob(
            f"{context} is corrupt: {rel} {problem}; {where} will be recomputed. "
            "Run 'ipy-resume verify' to list others.",
            path=rel,
            reason=problem,
        )

    def check(self, address: str, algo: str, checksum: str, size: int) -> str | None:
        """Verify the object in the store itself (not the cache); None when sound."""
        found = self.backend.stat(self.key(address))
        if found is None:
            return "is missing"
        if found.size != size:
            if found.size < size:
                return f"is truncated ({found.size} of {size} bytes)"
            return f"has the wrong size ({found.size} bytes, expected {size})"
        buf, got = self._fetch(address, size)
        if got < size:
            return f"is truncated ({got} of {size} bytes)"
        h = new_hasher(algo)
        h.update(buf.data)
        return None if h.hexdigest() == checksum else "failed its checksum"

    def quarantine(self, address: str, only: Any = None) -> str | None:
        """Move a bad blob to ``quarantine/`` (and out of the cache); its new key."""
        if self.cache is not None:
            self.cache.drop(address)
        name = f"quarantine/{address}.{int(time.time() * 1000)}.{secrets.token_hex(3)}"
        try:
            self.backend.move(self.key(address), name)
        except (FileNotFoundError, StoreError, OSError):
            return None
        return name


class RemoteStore(Store):
    """A checkpoint store at an object-store URL; the same API as :class:`Store`.

    >>> store = RemoteStore("s3://bucket/team")  # doctest: +SKIP
    >>> store.save("train", "k1", {"x": 1}).manifest.cell_id  # doctest: +SKIP
    'train'
    """

    lease_stale: float = LEASE_STALE

    def __init__(
        self,
        url: str,
        key: bytes | None = None,
        *,
        backend: Backend | None = None,
        cache: BlobCache | None = None,
    ) -> None:
        self.url = url
        remote = FsspecBackend(url) if backend is None else backend
        super().__init__(Path("/"), key=key, backend=remote)  # root is never a folder here
        self.root = PurePosixPath(".")
        self.blobs = RemoteBlobs(self.backend, BlobCache() if cache is None else cache)  # type: ignore[assignment]

    # -- maintenance -----------------------------------------------------------------------

    def gc(
        self,
        *,
        keep_last: int | None = None,
        max_size: int | None = None,
        grace: float | None = None,
        timeout: float = 60.0,
    ) -> Any:
        from ipy_resume.store import remote_maintenance

        return remote_maintenance.collect(
            self.parts, self.lease_stale, keep_last=keep_last, max_size=max_size, grace=grace
        )
