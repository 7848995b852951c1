"""The background writer: staged saves made durable off the cell's critical path.

A ``%%checkpoint`` cell returns once its save is a :class:`Snapshot` whose bytes
are handed to the OS (:meth:`Snapshot.stage`: blobs in temporary files, the
commit recorded in ``pending/``, see :mod:`ipy_resume.store.pending`); the store's
writer (:class:`StoreWriter`, one per store folder, with a thread of its own; a
store asks for it as ``store.writer``) then commits the snapshots in the order they
were submitted
(so a checkpoint that links to an earlier one's blobs is published after them).
What is guaranteed:

* **Never half a checkpoint.**  The commit is :meth:`Store.save`'s protocol:
  blobs durable first, the manifest published last with ``os.link``.  A crash
  before the end leaves the commit record, which the next reader of the store
  finishes after verifying every byte (or drops, with its files), never an older
  checkpoint touched.
* **Group commit.**  Snapshots queued together are committed together: every
  blob of the batch is made durable, each blob folder is fsynced once, then every
  manifest is written and fsynced and each manifest folder is fsynced once.  No
  manifest is published before every blob of the batch is durable, so the order
  "blobs, then the manifest that names them" still holds.
* **Read your own writes.**  :meth:`StoreWriter.barrier` waits for the pending
  saves of a store (or of one key); the store calls it before it lists or finds
  checkpoints, so a run of a key that is still saving restores what the save
  holds, and ``list``, ``restore`` and ``verify`` see every checkpoint.
* **Shutdown flushes.**  An ``atexit`` handler (and :func:`flush`, called by
  the kernel's shutdown hook) waits for every writer of the process.
* **A budget.**  Staged bytes waiting for the writer (dirty pages the OS holds;
  on a bucket store, copies in memory): :func:`budget` bytes at most (default a
  quarter of RAM, or ``$IPY_RESUME_SNAPSHOT_BUDGET``, e.g. ``2G``; ``0`` turns
  background saving off), for all the process's writers together (:func:`held`).  A save that does not fit is committed synchronously.

What happens when a commit ends (durable or failed) is reported twice: the
job's ``notify`` callback runs on the writer thread as soon as it is known (the
engine prints the "saved" line there), and its ``done`` callback runs on the
thread that next calls :meth:`StoreWriter.drain` or :meth:`StoreWriter.barrier`
(or :func:`drain`, for every writer; the engine records the
timeline event there, in the kernel's main thread).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

from ipy_resume.runtime import modrefs
from ipy_resume.store import fsio
from ipy_resume.store.snapshot import Snapshot

__all__ = [
    "Job",
    "StoreWriter",
    "attach",
    "budget",
    "drain",
    "enabled",
    "flush",
    "held",
    "pending",
    "set_waker",
    "writer_for",
]

SWITCH_ENV = "IPY_RESUME_BACKGROUND"
"""``0`` (or ``off``) makes every ``%%checkpoint`` save synchronous; on by default."""
BUDGET_ENV = "IPY_RESUME_SNAPSHOT_BUDGET"
"""Bytes of snapshots that may wait for the writer (``0``: every save is synchronous)."""
_BATCH_MAX = 32  # snapshots committed together at most


def enabled() -> bool:
    """True unless ``$IPY_RESUME_BACKGROUND`` is ``0`` (or ``off``): saves go to the writer.

    A background save is staged before the cell returns (its bytes handed to the OS,
    see :mod:`ipy_resume.store.pending`), so a kernel that dies before the writer
    has made it durable loses nothing: the next run finishes the commit.

    >>> os.environ["IPY_RESUME_BACKGROUND"] = "0"; enabled()
    False
    """
    return os.environ.get(SWITCH_ENV, "").strip().lower() not in ("0", "off", "false", "no")


def budget() -> int:
    """Bytes that snapshots waiting for the writer may hold: ``$IPY_RESUME_SNAPSHOT_BUDGET``,
    else a quarter of the machine's RAM.

    >>> os.environ["IPY_RESUME_SNAPSHOT_BUDGET"] = "1G"; budget()
    1073741824
    """
    text = os.environ.get(BUDGET_ENV, "").strip()
    if text:
        from ipy_resume.store.retention import parse_size

        try:
            return max(0, parse_size(text))
        except ValueError:
            pass  # a typo must not stop saves: the default applies
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 30


@dataclass(eq=False)
class Job:
    """One snapshot on its way to the disk."""

    snapshot: Snapshot
    done: Callable[[Job], None] | None = None  # on the thread that drains
    notify: Callable[[Job], None] | None = None  # on the writer thread, at once
    submitted: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    error: Exception | None = None
    bytes_written: int = 0
    event: threading.Event = field(default_factory=threading.Event)
    reported: bool = False
    held: int = 0  # bytes it counts against the budget (the snapshot's size when submitted)
    # hands the callbacks over between attach() and the writer's finish: a lock of the
    # job's own, which the writer holds only while it finishes this job (the writer's
    # mutex is held for any job's bookkeeping, and a cell that waited for it lost the
    # interpreter)
    handover: threading.Lock = field(default_factory=threading.Lock)
    key: tuple[str, str] = field(init=False)  # (cell id, key) of the checkpoint

    def __post_init__(self) -> None:
        self.key = (self.snapshot.manifest.cell_id, self.snapshot.manifest.key)

    @property
    def seconds(self) -> float:
        """From submission to durable (or failed)."""
        return (self.finished or time.perf_counter()) - self.submitted


# Bytes of snapshots not yet written, for every writer of the process: the budget is the
# machine's memory, not one store's.
_held = 0
_held_lock = threading.Lock()
_atexit_registered = False
_waker: Callable[[], None] | None = None
# a writer's thread, or a thread running done callbacks: waits there would wait for
# themselves, so barrier and drain do nothing
_local = threading.local()


def held() -> int:
    """Bytes of the snapshots submitted and not yet written, for every store of the process.

    >>> held()
    0
    """
    return _held


def set_waker(wake: Callable[[], None] | None) -> None:
    """Call *wake* (from a writer's thread) whenever a save finishes.

    A kernel passes a function that schedules :func:`drain` on its main thread (the
    timeline event and the panel's update then follow the commit at once, not the
    next cell).  *wake* must be thread-safe and quick.

    >>> set_waker(lambda: loop.add_callback(drain))  # doctest: +SKIP
    """
    global _waker
    _waker = wake


def attach(
    job: Job, done: Callable[[Job], None] | None, notify: Callable[[Job], None] | None
) -> None:
    """Set *job*'s callbacks after :meth:`StoreWriter.submit`; *notify* runs at once if it
    has finished.

    >>> attach(job, done=record_event, notify=print_line)  # doctest: +SKIP
    """
    with job.handover:
        job.done, job.notify = done, notify
        finished = job.finished is not None
    if finished and notify is not None:
        with contextlib.suppress(Exception):
            notify(job)


def _quiet() -> bool:
    return getattr(_local, "writer", False) or getattr(_local, "draining", False)


class StoreWriter:
    """The background writer of one store (see the module docstring): its queue, its
    thread, and the jobs submitted and not yet drained.

    >>> job = store.writer.submit(store.snapshot("c", key, values))  # doctest: +SKIP
    >>> store.writer.barrier(); job.error is None  # doctest: +SKIP
    True
    """

    def __init__(self, where: Hashable) -> None:
        self.where = where  # the store's folder (resolved), or its URL
        self.queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.jobs: list[Job] = []  # submitted, not yet drained (in order)
        self.mutex = threading.Lock()
        self.thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"StoreWriter({str(self.where)!r}, {len(self.jobs)} pending)"

    def _start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._main, name="ipy_resume-writer", daemon=True)
            self.thread.start()

    def _main(self) -> None:
        _local.writer = True
        while True:
            batch = [self.queue.get()]
            while len(batch) < _BATCH_MAX:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.commit(batch)
            except BaseException as exc:  # a bug of ours must not kill the writer
                for job in batch:
                    if not job.event.is_set():
                        job.error = exc if isinstance(exc, Exception) else RuntimeError(exc)
                        self._finish(job)

    def _finish(self, job: Job) -> None:
        global _held
        if job.error is None:
            job.snapshot.settle()
        else:  # nothing of it was committed: its staged files must not be finished later
            job.snapshot.abandon()
        with _held_lock:
            # (what submit counted: the snapshot's size is that of the blobs it still
            # holds, none once they were staged to files)
            _held -= job.held
            job.held = 0
        with job.handover:
            job.finished = time.perf_counter()
            notify = job.notify
        if notify is not None:
            with contextlib.suppress(Exception):  # a closed stream must not stop the writer
                notify(job)
        job.snapshot.writer.deferred = []  # the copies are not needed any more
        job.snapshot.writer.late = []  # (nor the arrays whose digests were taken late)
        job.event.set()
        wake = _waker
        if wake is not None:
            with contextlib.suppress(Exception):  # a kernel shutting down must not stop it
                wake()

    def commit(self, jobs: list[Job]) -> None:
        """Commit *jobs* as one group (see the module docstring), on the writer's thread."""
        ctx = jobs[0].snapshot.committer.ctx
        live: list[Job] = []
        try:
            with ctx.backend.lock(
                exclusive=False, timeout=ctx.lock_timeout, purpose="save"
            ) as locked:
                blob_dirs: set[Path] = set()
                for job in jobs:
                    try:
                        job.snapshot.write_blobs(locked, blob_dirs)
                        live.append(job)
                    except Exception as exc:
                        job.error = job.snapshot.error(exc)
                        self._finish(job)
                try:
                    for folder in sorted(blob_dirs):
                        fsio.fsync_dir(folder)
                except OSError as exc:
                    for job in live:
                        job.error = job.snapshot.error(exc)
                        self._finish(job)
                    return
                # the manifests' folder fsyncs, once per folder for the whole group, all
                # before any of its saves is reported durable
                deferred: set[str] = set()
                published: list[Job] = []
                for job in live:
                    try:
                        job.snapshot.publish(deferred, background=True)
                        published.append(job)
                    except Exception as exc:
                        job.error = job.snapshot.error(exc)
                        self._finish(job)
                try:
                    ctx.backend.sync(deferred)
                except OSError as exc:
                    # published but not known durable: take them back, so "nothing was
                    # committed" in the message stays true
                    for job in published:
                        job.snapshot.withdraw()
                        job.error = job.snapshot.error(exc)
                        self._finish(job)
                    return
                for job in published:
                    snap = job.snapshot
                    job.bytes_written = snap.writer.bytes_written + snap.manifest_bytes
                    self._finish(job)
        except Exception as exc:  # the lock could not be taken
            for job in jobs:
                if not job.event.is_set():
                    job.error = job.snapshot.error(exc)
                    self._finish(job)

    def submit(
        self,
        snapshot: Snapshot,
        done: Callable[[Job], None] | None = None,
        notify: Callable[[Job], None] | None = None,
    ) -> Job | None:
        """Queue *snapshot* (of this writer's store), or return None when it does not fit
        the budget.

        The snapshot is staged first (:meth:`Snapshot.stage`, so only for a store whose
        ``stages_saves`` is true: a local folder); from then on the caller may let the
        kernel change the values.
        """
        global _atexit_registered, _held
        if snapshot.suspect is not None:
            return None  # a healing save checks blobs it reuses: done synchronously
        size = snapshot.size
        limit = budget()
        with _held_lock:
            if limit <= 0 or _held + size > limit:
                return None
            _held += size
        try:
            snapshot.stage()
        except BaseException:
            with _held_lock:
                _held -= size
            raise
        job = Job(snapshot, done, notify, held=size)
        with self.mutex:
            self.jobs.append(job)
        if not _atexit_registered:
            atexit.register(flush)
            _atexit_registered = True
        self._start()
        self.queue.put(job)
        return job

    def pending(self) -> list[Job]:
        """Jobs submitted and not yet drained, oldest first."""
        # (one copy under the interpreter lock: no mutex to wait for)
        return list(self.jobs) if self.jobs else []

    def drain(self) -> int:
        """Run the ``done`` callbacks of finished jobs, in submission order.

        Never blocks on the writer.  Callbacks run once, on the calling thread.  Returns
        how many jobs it reported.
        """
        if not self.jobs or _quiet():
            return 0  # (nothing to report: the common case, checked without the lock)
        _local.draining = True
        reported = 0
        try:
            for job in list(self.jobs):
                if not job.event.is_set():
                    break  # in order: later jobs wait for this one
                with self.mutex:
                    if job.reported:
                        continue
                    job.reported = True
                    with contextlib.suppress(ValueError):
                        self.jobs.remove(job)
                reported += 1
                if job.done is not None:
                    job.done(job)
        finally:
            _local.draining = False
        return reported

    def barrier(
        self,
        key: tuple[str, str] | None = None,
        cell_id: str | None = None,
        timeout: float | None = None,
        callbacks: bool = True,
    ) -> bool:
        """Wait until the pending saves are durable (or failed).

        With *key* = ``(cell_id, key)`` (or *cell_id* alone), only the saves of that key
        (of that cell), and those submitted before them, are waited for.  Then, with
        *callbacks*, the finished jobs' ``done`` callbacks run (the store's own reads
        pass False: they may run inside the timeline's lock, which a callback takes).
        Returns False on timeout.  A no-op on a writer's thread and inside a ``done``
        callback.
        """
        if not self.jobs or _quiet():
            return True  # (the first test: a store with nothing pending pays nothing)
        jobs = list(self.jobs)
        if key is not None:
            jobs = [j for j in jobs if j.key == key]
        elif cell_id is not None:
            jobs = [j for j in jobs if j.key[0] == cell_id]
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = True
        with modrefs.waiting():  # (the kernel's thread is idle meanwhile)
            for job in jobs:  # the writer is FIFO: waiting for the last waits for all before it
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not job.event.wait(left):
                    ok = False
                    break
        if callbacks:
            self.drain()
        return ok


_writers: dict[Hashable, StoreWriter] = {}
_writers_lock = threading.Lock()
_roots: dict[str, Path] = {}


def _resolved(root: str | os.PathLike[str]) -> Path:
    """*root* resolved, remembered by its spelling: resolving stats every folder of the
    path, and a store asks for its writer often.  (A symlink re-pointed under a live
    kernel keeps the writer of the first folder.)"""
    spelled = os.fspath(root)
    found = _roots.get(spelled)
    if found is None:
        found = Path(spelled).resolve()
        if len(_roots) >= 256:
            _roots.clear()
        _roots[spelled] = found
    return found


def writer_for(where: str | os.PathLike[str]) -> StoreWriter:
    """The writer of the store at *where*: a folder (every spelling of it gets the one
    writer, so two stores opened on the same folder order their saves together) or a
    store's URL.

    >>> writer_for("/tmp/s") is writer_for("/tmp/../tmp/s")
    True
    """
    name: Hashable = where if isinstance(where, str) and "://" in where else _resolved(where)
    found = _writers.get(name)
    if found is None:
        with _writers_lock:
            found = _writers.setdefault(name, StoreWriter(name))
    return found


def _all() -> list[StoreWriter]:
    return list(_writers.values())


def pending(root: str | os.PathLike[str] | None = None) -> list[Job]:
    """Jobs submitted and not yet drained (of the store at *root*, or of every store),
    oldest first.

    >>> pending()
    []
    """
    if root is not None:
        return writer_for(root).pending()
    jobs = [job for writer in _all() for job in writer.pending()]
    return sorted(jobs, key=lambda job: job.submitted)


def drain() -> int:
    """:meth:`StoreWriter.drain` for every store of the process; how many jobs it reported.

    >>> drain()
    0
    """
    return sum(writer.drain() for writer in _all())


def flush(timeout: float | None = None) -> bool:
    """Wait until every pending save of this process is durable; run their callbacks.

    Called by the kernel's shutdown hook and at exit.

    >>> flush()
    True
    """
    ok = True
    for writer in _all():
        ok = writer.barrier(timeout=timeout) and ok
    return ok
