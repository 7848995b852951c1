"""A save decided now and written later: what the background writer commits.

:meth:`Store.snapshot` pickles every value, lays out every array and builds the
signed manifest's content in memory, writing nothing.  A :class:`Snapshot` then
holds the blobs still to be written as ``(address, chunks, size)``; until
:meth:`Snapshot.own` runs, the chunks of an array are views of the live array,
so a write to it in the kernel would change what is saved.  ``own`` copies those
(pickle streams are ``bytes`` already, immutable), and from then on nothing the
kernel does reaches the snapshot.

The commit is the same protocol as :meth:`Store.save`: under the store's shared
lock, every blob durable first, then the manifest published with ``os.link``.
Blobs the snapshot found present (dedup) or that links of other checkpoints
name are checked again under the lock before the manifest is published: a
``gc`` that removed one in between fails this save, it never commits a
manifest that names a missing blob.  The commit is split in two steps,
:meth:`Snapshot.write_blobs` and :meth:`Snapshot.publish`, so that a group
commit (see :mod:`ipy_resume.store.background`) can fsync each folder once for
several snapshots, between the two steps.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import numpy as np

from ipy_resume.store import blobs, fsio, lock
from ipy_resume.store.manifest import Manifest
from ipy_resume.store.results import SaveResult

if TYPE_CHECKING:
    from ipy_resume.store.store import Store, Writer

__all__ = ["Snapshot"]


def _immutable(chunk: Any) -> bool:
    if isinstance(chunk, bytes):
        return True
    return isinstance(chunk, memoryview) and chunk.readonly and isinstance(chunk.obj, bytes)


def _copy(chunk: Any) -> np.ndarray:
    view = memoryview(chunk)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    out = blobs.aligned_empty(view.nbytes)
    np.copyto(out, np.frombuffer(view, dtype=np.uint8))
    return out


class Snapshot:
    """One save serialised to memory (see the module docstring).

    >>> snap = store.snapshot("train", key, values)  # doctest: +SKIP
    >>> snap.own()  # the kernel may change the values from here on
    >>> snap.commit().manifest.id == snap.id  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        writer: Writer,
        failed: dict[str, str],
        suspect: set[PurePath] | None,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.writer = writer
        self.failed = failed
        self.suspect = suspect  # damaged manifests of this key: the save heals them
        self.owned = False
        self.manifest_bytes = 0
        self._written: set[str] = set()

    @property
    def id(self) -> str:
        """The checkpoint id the commit publishes."""
        return self.manifest.id

    @property
    def size(self) -> int:
        """Bytes of the blobs still to be written (the most the commit writes, manifest aside)."""
        return sum(size for _, _, size in self.writer.deferred or ())

    @property
    def live_bytes(self) -> int:
        """Bytes that still view live memory: what :meth:`own` copies."""
        return sum(
            memoryview(c).nbytes
            for _, chunks, _ in self.writer.deferred or ()
            for c in chunks
            if not _immutable(c)
        )

    def own(self) -> None:
        """Copy every chunk that views live memory: the kernel may change the values now."""
        for i, (address, chunks, size) in enumerate(self.writer.deferred or ()):
            if any(not _immutable(c) for c in chunks):
                owned = [c if _immutable(c) else _copy(c) for c in chunks]
                assert self.writer.deferred is not None
                self.writer.deferred[i] = (address, owned, size)
        self.owned = True

    def result(self, bytes_written: int = 0) -> SaveResult:
        """What :meth:`Store.save` would have returned (bytes as far as known)."""
        return SaveResult(
            self.manifest,
            dict(self.failed),
            bytes_written,
            sorted(self.writer.added),
            self.writer.members,
        )

    # -- the commit, in two steps -------------------------------------------

    def write_blobs(self, locked: bool, dirs: set[Path] | None = None) -> None:
        """Write the blobs (under the caller's shared lock); check the ones reused are there.

        With *dirs*, their folders are collected for the caller to fsync.
        """
        store, writer = self.store, self.writer
        fsio.makedirs(store.blobs.objects)
        for address, chunks, size in writer.deferred or ():
            writer.current = store.blobs.path(address)
            writer.bytes_written += store.blobs.put(
                address, chunks, size, touch=not locked, verify=self.suspect is not None, dirs=dirs
            )
            self._written.add(address)
        writer.current = None
        for ref in self.manifest.blob_refs():
            if ref.blob in self._written:
                continue
            if self.suspect is not None:
                problem = store.blobs.check(ref.blob, ref.algo, ref.checksum, ref.size)
            else:
                problem = None if store.blobs.exists(ref.blob, ref.size) else "is missing"
            if problem is not None:
                writer.current = store.blobs.path(ref.blob)
                raise FileNotFoundError(
                    2,
                    f"a blob it shares with other checkpoints {problem} (removed since the "
                    "cell ran?)",
                    os.fspath(writer.current),
                )
            if not locked:  # gc's grace period counts from now (see lock.py)
                with contextlib.suppress(OSError):
                    os.utime(store.blobs.path(ref.blob))
        self.manifest.bytes_written = writer.bytes_written

    def publish(self, dirs: set[Path] | None = None, background: bool = False) -> int:
        """Publish the manifest (the blobs must be durable); returns its size in bytes."""
        self.manifest_bytes = self.store._commit(
            self.manifest, self.writer, dirs=dirs, quiet=background
        )
        if self.suspect is not None and not background:
            self.store._heal(self.manifest, self.suspect)
        return self.manifest_bytes

    def withdraw(self) -> None:
        """Take a published manifest back (its folder could not be made durable)."""
        path = self.manifest.path
        if path is not None:
            with contextlib.suppress(OSError):
                fsio.remove(path)

    def commit(self) -> SaveResult:
        """Write and publish now, in this thread: :meth:`Store.save`'s protocol.

        Raises :class:`SaveError` (or :class:`StoreLocked`) like ``save``; nothing is
        committed then.
        """
        store = self.store
        try:
            with lock.hold(
                store.root, exclusive=False, timeout=store.lock_timeout, purpose="save"
            ) as locked:
                self.write_blobs(locked)
                self.publish()
        except lock.StoreLocked as exc:
            raise store._locked_error(self.manifest.cell_id, exc) from exc
        except OSError as exc:
            raise store._save_error(self.manifest.cell_id, exc, self.writer.current) from exc
        return self.result(self.writer.bytes_written + self.manifest_bytes)

    def error(self, exc: BaseException) -> Exception:
        """The user-facing error for *exc* raised by a commit step."""
        store = self.store
        if isinstance(exc, lock.StoreLocked):
            return store._locked_error(self.manifest.cell_id, exc)
        if isinstance(exc, OSError):
            return store._save_error(self.manifest.cell_id, exc, self.writer.current)
        return exc if isinstance(exc, Exception) else RuntimeError(str(exc))
