"""A save decided now and written later: what the background writer commits.

:meth:`Store.snapshot` pickles every value, lays out every array and builds the
signed manifest's content in memory, writing nothing.  A :class:`Snapshot` then
holds the blobs still to be written as ``(address, chunks, size)``; the chunks of
an array are views of the live array until :meth:`Snapshot.stage` hands them to
the OS (or to a forked child that sees them as they are now), and from then on
nothing the kernel does reaches the snapshot.

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
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, BinaryIO

from ipy_resume.store import fsio, late, lock, manifest, pending
from ipy_resume.store.manifest import Manifest
from ipy_resume.store.results import SaveResult

if TYPE_CHECKING:
    from ipy_resume.store.committer import Committer
    from ipy_resume.store.writing import Writer

__all__ = ["Snapshot"]


FORK_MIN = 4 << 20
"""A staged save this large is written by a forked child (see :meth:`Snapshot.stage`)."""
FORK_ENV = "IPY_RESUME_FORK"
"""``0`` stages every save in the kernel's own process."""
INLINE_MAX = 64 << 10
"""A staged save whose new blobs total at most this many bytes is one file: its commit
record holds their bytes (see :meth:`Snapshot.stage`)."""


def _own_bytes(chunks: list[Any]) -> bytes:
    """The concatenation of *chunks* (buffers, perhaps views of live arrays) as new bytes."""
    parts = []
    for chunk in chunks:
        view = memoryview(chunk)
        parts.append(view if view.ndim == 1 and view.itemsize == 1 else view.cast("B"))
    return b"".join(parts)


def _may_fork(size: int) -> bool:
    return (
        size >= FORK_MIN
        and sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and os.environ.get(FORK_ENV, "").strip().lower() not in ("0", "off", "false", "no")
    )


_Todo = list[tuple[str, list[Any], int, Path]]


def _fork_writer(
    todo: _Todo, late_work: Callable[[], tuple[bytes, _Todo]] | None = None
) -> tuple[int, BinaryIO]:
    """Fork a child that writes each blob to its temporary file.

    With *late_work*, the child first runs it (the digests of late arrays, see
    :mod:`ipy_resume.store.late`): it returns the line to tell the kernel, which goes on
    the pipe first, and more blobs to write.

    The child runs nothing but these writes and leaves with ``os._exit``: no atexit
    handler, no stream of the kernel's, no lock of another thread's is touched.  It
    says why it failed on a pipe as ``errno|file|message``.  It is a session of its
    own: Jupyter restarts or stops a kernel by killing its process group, and a
    child killed with it would lose a save the cell has already returned from (the
    kernel's commit record names the child, and the next reader commits its bytes).
    """
    reader, writer = os.pipe()
    try:
        pid = os.fork()
    except BaseException:
        os.close(reader)
        os.close(writer)
        raise
    if pid == 0:  # the child
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the kernel's
            with contextlib.suppress(OSError):
                os.setsid()  # (fails when the parent made this a group leader first: fine)
            # Nothing of the kernel's stays open here: a child that outlives the kernel
            # must not hold its sockets (the restarted kernel binds the same ports) or
            # its output pipes.  Memory is all it needs: the chunks are in it.
            os.closerange(3, writer)
            os.closerange(writer + 1, os.sysconf("SC_OPEN_MAX"))
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            if null > 2:
                os.close(null)
            current = ""
            try:
                if late_work is not None:
                    line, more = late_work()
                    # (a kernel killed since has closed the pipe: the completion on disk
                    # is what the next reader commits, so the blobs are written all the same)
                    with contextlib.suppress(OSError):
                        _write_all(writer, line)
                    todo = [*todo, *more]
                for _address, chunks, size, temp in todo:
                    current = os.fspath(temp)
                    pending.stage_blob(temp, chunks, size, temp=temp)
                code = 0
            except OSError as exc:
                os.write(writer, f"{exc.errno}|{exc.filename or current}|{exc.strerror}".encode())
            except BaseException as exc:
                os.write(writer, f"{errno.EIO}|{current}|{exc}".encode())
        finally:
            os._exit(code)
    # Out of the kernel's process group before the cell returns, whether or not the child
    # has run yet: a restart right after the cell (a kill of that group) must miss it.
    with contextlib.suppress(OSError):  # (the child's setsid came first, or it has ended)
        os.setpgid(pid, pid)
    os.close(writer)
    return pid, os.fdopen(reader, "rb")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _RESOLVED() -> bool:
    return True


def _UNRESOLVED() -> bool:
    return False


class Snapshot:
    """One save serialised to memory (see the module docstring).

    >>> snap = store.snapshot("train", key, values)  # doctest: +SKIP
    >>> snap.stage()  # doctest: +SKIP
    >>> snap.commit().manifest.id == snap.id  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        committer: Committer,
        manifest: Manifest,
        writer: Writer,
        failed: dict[str, str],
        suspect: set[PurePath] | None,
        held: contextlib.ExitStack | None = None,
    ) -> None:
        self.committer = committer
        self.held = held  # the store's shared lock, from the dedup decision to the commit
        self.manifest = manifest
        self.writer = writer
        self.failed = failed
        self.suspect = suspect  # damaged manifests of this key: the save heals them
        self.manifest_bytes = 0
        self._written: set[str] = set()
        self.staged: list[pending.Staged] | None = None  # see stage()
        self.record: Path | None = None  # the commit record of a staged save
        self.child: tuple[int, BinaryIO] | None = None  # (pid, pipe) of a forked stage
        # the late arrays' digests (see ipy_resume.store.late): None until the child's
        # report is read (resolve), then whether it came; and the completion's file
        self._late_ok: bool | None = None
        self._late_lock = threading.Lock()
        self._said = b""  # what the child said before its report was read, if not that
        self.completion: Path | None = None
        self.new_dirs: set[Path] = set()  # parents of folders stage() made, to fsync
        # (id, bytes_written, file bytes) of the manifest as stage() signed it for the record:
        # published as they are when neither changed, instead of signed a second time
        self.encoded: tuple[str, int, bytes] | None = None

    @property
    def id(self) -> str:
        """The checkpoint id the commit publishes."""
        return self.manifest.id

    @property
    def size(self) -> int:
        """Bytes of the blobs still to be written (the most the commit writes, manifest aside)."""
        return sum(size for _, _, size in self.writer.deferred or ())

    def stage(self) -> None:
        """Hand the blobs to the OS now and record the commit still to do (no fsync).

        Every blob still to write goes to a temporary file beside its final name, and
        the signed manifest with the list of those files to ``pending/`` (see
        :mod:`ipy_resume.store.pending`).  From here on the snapshot holds no memory of
        the kernel's, and a kernel that dies before the commit loses nothing: the next
        process that reads the store finishes it, after verifying every byte.

        A save of :data:`FORK_MIN` bytes or more (on Linux) is written by a forked
        child instead: the child sees the values as they are now, copy-on-write, so
        the cell returns at once and a later change in the kernel never reaches what
        is saved (the kernel pays for a page it writes meanwhile with a copy of that
        page).  The writer thread waits for the child before it commits.

        >>> snap.stage()  # doctest: +SKIP
        """
        store, writer = self.committer, self.writer
        backend = store.ctx.backend
        if 0 < self.size <= INLINE_MAX:  # (far below FORK_MIN)
            self._stage_inline()
            return
        forking = _may_fork(self.size)
        if writer.late and not forking:
            self._take_late_here()
        self.staged = staged = []
        try:
            todo, made = self._temps(
                [b for b in writer.deferred or () if b[0] not in self._placeholders()]
            )
            staged += made
            self.manifest.bytes_written = sum(s.size for s in staged) + sum(
                item.estimate for item in writer.late
            )
            record_key = pending.record_key(self.manifest.id)
            backend.make_parents(record_key, dirs=self.new_dirs)
            path = backend.local_path(record_key)
            data = manifest.encode(self.manifest, store.ctx.key)  # (provisional, when late)
            self.encoded = (self.manifest.id, self.manifest.bytes_written, data)
            who = None
            if forking:
                try:
                    self.child = _fork_writer(todo, self._late_in_child if writer.late else None)
                except OSError:  # no memory or processes left for a child: write here
                    self.child = None
            completion = None
            if self.child is not None:
                # written before the child's blobs are: a kernel killed from here on
                # leaves a record that waits for the child, then is committed
                who = {**pending.owner(), "helper": pending.helper(self.child[0])}
                if writer.late:
                    completion = late.completion_key(record_key)
                    self.completion = backend.local_path(completion)
                    self.manifest.late = self.resolve
            else:
                if writer.late:  # no child after all: the digests here, then every blob
                    more, more_staged = self._temps(self._take_late_here())
                    todo += more
                    staged += more_staged
                    data = manifest.encode(self.manifest, store.ctx.key)
                    self.encoded = (self.manifest.id, self.manifest.bytes_written, data)
                for address, chunks, size, temp in todo:
                    writer.current = store.ctx.blobs.path(address)
                    pending.stage_blob(writer.current, chunks, size, temp=temp)
                writer.current = None
            record = pending.record_bytes(data, staged, who=who, late=completion)
            self.record = pending.write_record(path, record)
        except BaseException as exc:
            self.abandon()
            if isinstance(exc, OSError):  # said as a save's failure, naming the file
                raise self.error(exc) from exc
            raise
        writer.deferred = []

    def _placeholders(self) -> set[str]:
        return {item.placeholder for item in self.writer.late}

    def _temps(self, blobs: list[tuple[str, list[Any], int]]) -> tuple[_Todo, list[pending.Staged]]:
        """A temporary file beside each blob's name, its folders made: what stage writes."""
        store, writer = self.committer, self.writer
        backend = store.ctx.backend
        todo: _Todo = []
        staged: list[pending.Staged] = []
        for address, chunks, size in blobs:
            key = backend.temp_key(store.ctx.blobs.key(address))
            writer.current = store.ctx.blobs.path(address)
            backend.make_parents(key, dirs=self.new_dirs)  # (made durable before publishing)
            temp = backend.local_path(key)
            todo.append((address, chunks, size, temp))
            staged.append(pending.Staged(temp, address, size, key))
        writer.current = None
        return todo, staged

    def _take_late_here(self) -> list[tuple[str, list[Any], int]]:
        """Take the late arrays' digests in this process; their blobs still to write."""
        writer = self.writer
        items, writer.late = writer.late, []
        taken = late.take(items)
        late.apply(self.manifest, items, taken, late.layout_versions())
        by_placeholder = {item.placeholder: item for item in items}
        kept: list[tuple[str, list[Any], int]] = []
        resolved: list[tuple[str, list[Any], int]] = []
        seen: set[str] = set()
        for blob, chunks, size in writer.deferred or ():
            item = by_placeholder.get(blob)
            if item is None:
                kept.append((blob, chunks, size))
                continue
            real, size = taken[blob][0], taken[blob][3]
            # present already, or the same bytes twice in this save: nothing more to write
            if real not in seen and not self.committer.ctx.blobs.exists(real, size):
                resolved.append((real, item.chunks(), size))
            seen.add(real)
        writer.deferred = kept + resolved
        return resolved

    def _late_in_child(self) -> tuple[bytes, _Todo]:
        """In the forked child: the digests, the completion written, then what to write."""
        store, writer = self.committer, self.writer
        backend = store.ctx.backend
        items = writer.late
        taken = late.take(items)
        versions = late.layout_versions()
        late.apply(self.manifest, items, taken, versions)  # (the child's own copy of it)
        dirs: set[Path] = set()
        todo: _Todo = []
        staged: list[pending.Staged] = []
        temps: dict[str, str] = {}
        for item in items:
            address, _fingerprint, _offset, size = taken[item.placeholder]
            if address in temps or store.ctx.blobs.exists(address, size):
                continue
            key = backend.temp_key(store.ctx.blobs.key(address))
            backend.make_parents(key, dirs=dirs)
            temps[address] = key
            temp = backend.local_path(key)
            todo.append((address, item.chunks(), size, temp))
            staged.append(pending.Staged(temp, address, size, key))
        data = manifest.encode(self.manifest, store.ctx.key)
        where = backend.local_path(late.completion_key(pending.record_key(self.manifest.id)))
        pending.write_completion(where, pending.record_bytes(data, [*(self.staged or ()), *staged]))
        return late.report(taken, temps, sorted(map(os.fspath, dirs)), versions), todo

    def resolve(self) -> bool:
        """Wait for the late arrays' digests and put them in the manifest; False when the
        writing process ended without them (the save then fails).  Any thread may ask.

        >>> snap.resolve()  # doctest: +SKIP
        True
        """
        with self._late_lock:
            if self._late_ok is not None:
                return self._late_ok
            ok, line = False, b""
            child = self.child
            items = self.writer.late
            try:
                if child is None:
                    raise ValueError("no writing process")
                line = child[1].readline()
                taken, temps, dirs, versions = late.parse_report(line)
                sizes = {address: size for address, _f, _o, size in taken.values()}
                backend = self.committer.ctx.backend
                late.apply(self.manifest, items, taken, versions)
                self.staged = [
                    *(self.staged or ()),
                    *(
                        pending.Staged(backend.local_path(key), address, sizes[address], key)
                        for address, key in temps.items()
                    ),
                ]
                self.new_dirs.update(Path(d) for d in dirs)
                self.encoded = None  # (signed again, complete, when published)
                ok = True
            except (OSError, ValueError, KeyError, TypeError):
                self._said = line
            self._late_ok = ok
            # (the answer stays; the snapshot, and the arrays it holds, need not)
            self.manifest.late = _RESOLVED if ok else _UNRESOLVED
            return ok

    def _stage_inline(self) -> None:
        """:meth:`stage` of a small save: one file, the commit record, holding the blobs.

        Each blob still to write becomes bytes of our own (a copy of an array's memory:
        a few kilobytes), written into the record beside the signed manifest; the writer
        thread writes the blob files from those bytes (temporary file, fsync, rename) as
        it would a synchronous save's.  A kernel that dies first leaves the record, and
        the next reader checks each blob's bytes against the manifest's checksum before it
        writes them (see :func:`pending.recover`).  One file handed to the OS instead of
        one per blob plus the record: a small cell's save makes no folder and no
        temporary blob file before it returns.
        """
        store, writer = self.committer, self.writer
        backend = store.ctx.backend
        self.staged = []
        try:
            own = [
                (address, _own_bytes(chunks), size)
                for address, chunks, size in writer.deferred or ()
            ]
            for _address, data, size in own:
                if len(data) != size:
                    raise ValueError(f"a blob is {len(data)} bytes, expected {size}")
            writer.deferred = [(address, [data], size) for address, data, size in own]
            self.manifest.bytes_written = sum(size for _a, _d, size in own)
            record_key = pending.record_key(self.manifest.id)
            data = manifest.encode(self.manifest, store.ctx.key)
            self.encoded = (self.manifest.id, self.manifest.bytes_written, data)
            record = pending.record_bytes(data, [], inline=[(a, d) for a, d, _s in own])
            path = backend.local_path(record_key)
            try:  # (pending/ is there but for a store's first save: no stat to ask)
                self.record = pending.write_record(path, record)
            except FileNotFoundError:
                backend.make_parents(record_key, dirs=self.new_dirs)
                self.record = pending.write_record(path, record)
        except BaseException as exc:
            self.abandon()
            if isinstance(exc, OSError):
                raise self.error(exc) from exc
            raise

    def _reap(self, kill: bool = False) -> None:
        """Wait for the forked child (killed first with *kill*); raise its failure."""
        if self.child is None:
            return
        pid, pipe = self.child
        if kill:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with self._late_lock:
                if self._late_ok is None and self.writer.late:
                    self._late_ok = False
                    self.manifest.late = _UNRESOLVED
        reported = self.resolve() if self.writer.late else True
        self.child = None
        try:
            with pipe:
                said = self._said + pipe.read()
        except OSError:
            said = self._said
        _pid, status = os.waitpid(pid, 0)
        if kill:
            return
        if os.waitstatus_to_exitcode(status) == 0:
            if not reported:
                raise OSError(errno.EIO, "the process writing the blobs sent no digests", None)
            return
        code, _, rest = said.decode("utf-8", "replace").partition("|")
        filename, _, message = rest.partition("|")
        raise OSError(
            int(code) if code.isdigit() else errno.EIO,
            message or f"the process writing the blobs ended with status {status}",
            filename or None,
        )

    def abandon(self) -> None:
        """Remove what :meth:`stage` left (the commit failed or will not happen)."""
        self._reap(kill=True)
        for s in self.staged or ():
            with contextlib.suppress(OSError):
                os.unlink(s.temp)
        if self.completion is not None:  # (the files it names, which a killed child left)
            pending.discard_completion(self.completion, self.committer.ctx.backend)
            self.completion = None
        self.settle()
        self.staged = None

    def release(self) -> None:
        """Let go of the store's shared lock (the commit is done, or will not happen)."""
        held, self.held = self.held, None
        if held is not None:
            held.close()

    def __del__(self) -> None:  # a snapshot dropped without a commit must not keep the lock
        with contextlib.suppress(Exception):
            self.release()

    def settle(self) -> None:
        """The commit is durable (or abandoned): its record is not needed any more.

        Removed without a folder fsync: a record that outlives a crash names a commit that
        is published already (or blobs that are gone), which recovery finds and drops.
        """
        if self.completion is not None:  # (first: a record without it is looked at again)
            with contextlib.suppress(OSError):
                os.unlink(self.completion)
            self.completion = None
        if self.record is not None:
            pending.remove_record(self.record)
            self.record = None
        self.release()

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
        store, writer = self.committer, self.writer
        store.ctx.blobs.ready()
        self._reap()
        for folder in sorted(self.new_dirs):
            if dirs is None:
                fsio.fsync_dir(folder)
            else:
                dirs.add(folder)
        self.new_dirs = set()
        for s in self.staged or ():
            writer.current = store.ctx.blobs.path(s.address)
            if store.ctx.blobs.exists(s.address, s.size):  # written meanwhile by another save
                fsio.remove(s.temp)
            else:
                fsio.settle(s.temp, writer.current, dirs=dirs)
                writer.bytes_written += s.size
            self._written.add(s.address)
        for address, chunks, size in writer.deferred or ():
            writer.current = store.ctx.blobs.path(address)
            writer.bytes_written += store.ctx.blobs.put(
                address, chunks, size, touch=not locked, verify=self.suspect is not None, dirs=dirs
            )
            self._written.add(address)
        writer.current = None
        for ref in self.manifest.blob_refs():
            if ref.blob in self._written:
                continue
            if self.suspect is not None:
                problem = store.ctx.blobs.check(ref.blob, ref.algo, ref.checksum, ref.size)
            else:
                problem = None if store.ctx.blobs.exists(ref.blob, ref.size) else "is missing"
            if problem is not None:
                writer.current = store.ctx.blobs.path(ref.blob)
                raise FileNotFoundError(
                    2,
                    f"a blob it shares with other checkpoints {problem} (removed since the "
                    "cell ran?)",
                    os.fspath(writer.current),
                )
            if not locked:  # gc's grace period counts from now (see lock.py)
                store.ctx.blobs.touch(ref.blob)
        self.manifest.bytes_written = writer.bytes_written

    def publish(self, deferred: set[str] | None = None, background: bool = False) -> int:
        """Publish the manifest (the blobs must be durable); returns its size in bytes.

        With *deferred* (a group commit), its key is added there for the caller to make
        durable with ``store.ctx.backend.sync`` before the save is reported.
        """
        m, encoded = self.manifest, self.encoded
        same = encoded is not None and encoded[:2] == (m.id, m.bytes_written)
        self.manifest_bytes = self.committer.commit_manifest(
            m,
            self.writer,
            deferred=deferred,
            quiet=background,
            encoded=encoded[2] if same and encoded is not None else None,
        )
        if self.suspect is not None and not background:
            self.committer.heal(self.manifest, self.suspect)
        return self.manifest_bytes

    def withdraw(self) -> None:
        """Take a published manifest back (its folder could not be made durable)."""
        path = self.manifest.path
        if path is not None:
            with contextlib.suppress(OSError):
                self.committer.ctx.backend.delete(self.committer.ctx.rel(path))

    def commit(self) -> SaveResult:
        """Write and publish now, in this thread: :meth:`Store.save`'s protocol.

        Raises :class:`SaveError` (or :class:`StoreLocked`) like ``save``; nothing is
        committed then.
        """
        store = self.committer
        try:
            if self.writer.late and self.staged is None:  # (never staged: taken here)
                self._take_late_here()
            with store.ctx.backend.lock(
                exclusive=False, timeout=store.ctx.lock_timeout, purpose="save"
            ) as locked:
                self.write_blobs(locked)
                self.publish()
        except lock.StoreLocked as exc:
            self.abandon()
            raise store.locked_error(self.manifest.cell_id, exc) from exc
        except OSError as exc:
            self.abandon()
            raise store.save_error(self.manifest.cell_id, exc, self.writer.current) from exc
        except BaseException:
            self.abandon()
            raise
        self.settle()
        return self.result(self.writer.bytes_written + self.manifest_bytes)

    def error(self, exc: BaseException) -> Exception:
        """The user-facing error for *exc* raised by a commit step."""
        store = self.committer
        if isinstance(exc, lock.StoreLocked):
            return store.locked_error(self.manifest.cell_id, exc)
        if isinstance(exc, OSError):
            return store.save_error(self.manifest.cell_id, exc, self.writer.current)
        return exc if isinstance(exc, Exception) else RuntimeError(str(exc))
