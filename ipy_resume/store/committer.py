"""Publishing checkpoints: the commit point of every save, and what goes with it.

A manifest is published last, with put-if-absent, once every blob it names is durable
(:meth:`Committer.commit_manifest`); a save that replaces a checkpoint which failed to
load retires the damaged ones (:meth:`Committer.heal`); the staged saves of kernels
that died are finished before the store is read (:meth:`Committer.settle_pending`);
and a save that fails says in one line what was not saved and how to go on
(:meth:`Committer.save_error`, :meth:`Committer.locked_error`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Hashable, Iterator
from pathlib import Path, PurePath

from ipy_resume.store import manifest, pending
from ipy_resume.store.context import StoreContext, manifest_prefix
from ipy_resume.store.fsio import FormatTooNew, SaveError, StoreError, Untrusted
from ipy_resume.store.lock import StoreLocked
from ipy_resume.store.manifest import Manifest
from ipy_resume.store.reader import Reader
from ipy_resume.store.writing import Writer

__all__ = ["OWN_CHURN_RESCAN", "Committer"]

OWN_CHURN_RESCAN = 0.1
"""While this process's own saves are in flight, seconds between scans of ``pending/``
when the last scan found no other process's record (see :meth:`Committer.settle_pending`)."""


class Committer:
    """Publishes the checkpoints of the store *ctx* describes; *reader* remembers what
    was published (a hit does not verify this process's own manifests again).

    >>> Committer(store.ctx, store.reader).settle_pending()  # doctest: +SKIP
    []
    """

    def __init__(self, ctx: StoreContext, reader: Reader) -> None:
        self.ctx = ctx
        self.reader = reader
        # the pending/ folder as last looked at, and when: see settle_pending
        self._pending_seen: Hashable = None
        self._pending_checked = 0.0
        # staged saves of dead writers that could not be finished, by checkpoint id (why):
        # the engine says each once, so a lost save is never silent
        self.abandoned: dict[str, str] = {}
        self.pending_live: list[str] = []  # other live writers' records, as last scanned
        self._pending_others = True  # the last scan found another process's record

    def rescan(self) -> None:
        """Scan ``pending/`` at the next :meth:`settle_pending` (a writer's record went)."""
        self._pending_seen = None

    def commit_manifest(
        self,
        m: Manifest,
        writer: Writer,
        deferred: set[str] | None = None,
        quiet: bool = False,
        encoded: bytes | None = None,
    ) -> int:
        """Publish manifest *m*, the commit point: created last, with put-if-absent, so it
        never replaces another (the blobs must be durable already).

        With *deferred* (a group commit), what is left to make it durable is noted there
        for the caller's ``backend.sync`` (see backend.py).  *quiet* (a commit on the
        background writer): the main thread's id cache is left alone, it may be reading
        it.  *encoded*: the bytes of *m* as this process signed them already (a staged
        save's); they stand until the id has to change.
        """
        prefix = manifest_prefix(m.cell_id, m.key)
        for _attempt in range(20):
            key = f"{prefix}/{m.id}.json"
            data = manifest.encode(m, self.ctx.key) if encoded is None else encoded
            writer.current = self.ctx.path_of(key)
            # An error leaves no manifest (one published but not durable is taken back),
            # so "nothing was committed" in the error message stays true.
            if not self.ctx.backend.put_if_absent(key, data, deferred=deferred):
                m.id = manifest.new_checkpoint_id()  # same id from another writer, same ms
                encoded = None
                continue
            m.path, writer.current = writer.current, None
            self.reader.remember(m.path, data, parse=quiet)
            if not quiet:
                self.reader.note_id(m.id)
            return len(data)
        raise OSError(errno.EEXIST, "could not find a free checkpoint id", prefix)

    def settle_pending(self) -> list[str]:
        """Before reading: finish the staged saves of kernels that died (see pending.py);
        returns the ids of the checkpoints it published for them.

        One ``stat`` when nothing changed: the folder is scanned again when an entry was
        added or removed, or every second while a live writer's records remain.  While
        this process's own saves come and go (a run of small cells outpaces the writer,
        and the folder holds a hundred of its records), their changes are not taken for
        another process's: the folder is scanned at most every :data:`OWN_CHURN_RESCAN`
        seconds while the last scan found no other process's record.  What that delays
        is bounded by it: a dead kernel's save finished, or a live one's waited for, a
        tenth of a second later (a cell executes where it could have waited; never a
        stale restore).
        """
        try:
            seen = self.ctx.backend.identity(pending.FOLDER)
        except OSError:
            return []
        if seen is None:
            return []  # (nothing is staged where saves are not: a bucket)
        now = time.monotonic()
        since = now - self._pending_checked
        if since < 1.0 and (
            seen[0] == self._pending_seen
            or (since < OWN_CHURN_RESCAN and not self._pending_others and pending.own_in_flight())
        ):
            return []
        self._pending_checked = now
        done = pending.recover(self.ctx)
        self.abandoned.update(done.abandoned)
        self.pending_live = done.live
        self._pending_others = done.others > 0
        with contextlib.suppress(OSError):
            seen = self.ctx.backend.identity(pending.FOLDER) or seen
        self._pending_seen = seen[0]
        if done.finished:
            self.reader.forget_ids()
        return done.finished

    def heal(self, new: Manifest, suspect: set[PurePath]) -> None:
        """After a save that replaced a checkpoint which failed to load: retire the rest.

        Manifests of the key that are damaged, or whose blobs are gone (quarantined
        when their load failed, and not written again because the cell produced other
        bytes this time), are moved to quarantine/: the new checkpoint stands for them,
        and ``verify`` is clean again without a manual step.
        """
        self.ctx.suspect.pop((new.cell_id, new.key), None)
        if not new.complete:
            return  # keep the evidence until a complete checkpoint replaces it
        retire: list[PurePath] = []
        for path in self.reader.manifest_paths(manifest_prefix(new.cell_id, new.key)):
            if path == new.path:
                continue
            try:
                old = self.reader.read_manifest(path)
            except (FileNotFoundError, FormatTooNew, Untrusted):
                continue
            except StoreError:
                retire.append(path)
                continue
            if not all(self.ctx.blobs.exists(r.blob, r.size) for r in old.blob_refs()):
                retire.append(path)
        self.reader.retire(retire)

    def save_error(self, cell_id: str, exc: OSError, where: PurePath | None) -> SaveError:
        """The one-line error of a save of *cell_id* that failed with *exc* writing *where*:
        what was not saved, that the values are still in memory, and what to do."""
        cell = " ".join(cell_id.split())
        if isinstance(exc, StoreError):  # the backend's own one-line error (a bucket's)
            return SaveError(
                f"could not save checkpoint '{cell}': {exc}; nothing was committed and the "
                "values are still in memory.",
                path=getattr(exc, "path", None),
            )
        code = errno.errorcode.get(exc.errno or 0, "")
        reason = exc.strerror or str(exc) or type(exc).__name__
        if where is None and exc.filename:
            where = Path(os.fspath(exc.filename))
        if not self.ctx.backend.local_files:
            return SaveError(
                f"could not save checkpoint '{cell}': {reason} while writing {self.ctx.rel(where)} "
                f"in {self.ctx.location}; nothing was committed and the values are still in memory. "
                "Check the store, then run the cell again.",
                path=self.ctx.rel(where),
            )
        if code:
            reason = f"{reason} ({code})"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = "Free some disk space (or run 'ipy-resume gc'), then run the cell again."
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            hint = f"Make {os.fspath(self.ctx.root)} writable, then run the cell again."
        else:
            hint = "Check the disk, then run the cell again."
        return SaveError(
            f"could not save checkpoint '{cell}': {reason} while writing {self.ctx.rel(where)}; "
            f"nothing was committed and the values are still in memory. {hint}",
            path=self.ctx.rel(where),
        )

    def locked_error(self, cell_id: str, exc: StoreLocked) -> StoreLocked:
        """The one-line error of a save of *cell_id* that waited too long for a ``gc``."""
        cell = " ".join(cell_id.split())
        return StoreLocked(
            f"could not save checkpoint '{cell}': {exc} Nothing was committed and the "
            "values are still in memory; run the cell again once the store is free.",
            path=exc.path,
        )

    @contextlib.contextmanager
    def saving(self) -> Iterator[bool]:
        """Held from the first "this blob exists, skip it" to the committed manifest.

        Shared with other saves, exclusive of gc, so no gc deletes what a save relies on
        (a folder's ``flock``, a bucket's lease: see backend.py); yields whether a real
        lock is held.
        """
        with self.ctx.backend.lock(
            exclusive=False, timeout=self.ctx.lock_timeout, purpose="save"
        ) as locked:
            self.ctx.blobs.ready()
            yield locked
