"""The store lock: saves share it, ``gc`` holds it alone.

Blobs are idempotent and manifests are published with ``os.link``, so saves
never need to exclude each other.  What does need excluding is ``gc`` from a
save: a save that finds a blob already present skips writing it (dedup) and
commits a manifest referring to it a moment later; a ``gc`` running in between
would see an unreferenced blob and delete it.  So a save holds a *shared* lock
from its first blob to its manifest, and ``gc`` takes the lock *exclusively*:
it never runs while any save is between "blob exists" and "manifest
committed", and a save that starts during a ``gc`` waits for it.

The lock is ``flock(2)`` on the file ``lock`` in the store folder.  Losing that
file costs nothing: it is created again, and a holder checks after locking that
the name still leads to the file it locked (else it locks the new one), so a
deleted lock file never lets ``gc`` and a save in at once.  The kernel
drops it when its holder dies, so a lock left by a killed process is recovered
at once: nothing stale can remain.  An exclusive holder records who it is in
the file (pid, host, purpose, start time) so a waiter that times out can say
who holds the store, and whether that process is still alive.  Shared holders
are found through ``/proc/locks`` where it exists.

Where ``flock`` is unavailable (Windows, some network filesystems) the lock
degrades to nothing and :func:`hold` yields False; ``gc`` then spares every
unreferenced file younger than a grace period, and a save refreshes the
modification time of each blob it dedups against, so the race is still closed
for any save shorter than the grace period.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ipy_resume.store import fsio

try:  # POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "StoreLocked", "hold", "holders", "owner"]

LOCK_FILE = "lock"
"""Name of the lock file in the store folder (never removed; its content is advisory)."""

_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}

# Descriptors of the locks this process holds.  A child forked while one is held (a
# multiprocessing pool, the writer of a large save) would keep the lock for as long as
# it lives, and a gc would wait for it: the child closes its copies (the lock stays
# with the parent, whose descriptor is still open).
_held: set[int] = set()


# The shared locks this process holds, by lock file: [descriptor, holders].  A save that
# starts while another of this process's saves holds the shared lock (a run of small
# cells, whose saves the background writer commits a moment later) joins that hold
# instead of opening, locking and checking the file again: four system calls on the
# cell's thread, each a chance for another thread to take the interpreter.  Joining
# skips the check that the lock file is still the one locked; a store whose lock file
# was deleted under a live save is safe all the same, because a commit checks again,
# under its lock, that every blob it reuses is there (see snapshot.py).
_shared: dict[str, list[int]] = {}
_shared_mutex = threading.Lock()


def _forget_in_child() -> None:
    global _shared_mutex
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _shared.clear()  # (the parent's holds; their descriptors were closed just above)
    _shared_mutex = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class StoreLocked(fsio.SaveError):
    """The store lock could not be taken within the timeout; nothing was changed."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, belongs to someone else
        return True
    except OSError:
        return False
    return True


def owner(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the last exclusive holder wrote into the lock file, or None.

    >>> owner("/nonexistent") is None
    True
    """
    try:
        data = (Path(root) / LOCK_FILE).read_bytes()
        doc = json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def holders(root: str | os.PathLike[str]) -> list[int]:
    """Pids holding a lock on the store's lock file, from ``/proc/locks`` (Linux; else []).

    >>> holders("/nonexistent")
    []
    """
    try:
        inode = (Path(root) / LOCK_FILE).stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids: list[int] = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  READ 1234 fd:01:5678 0 EOF"  ("->" marks a waiter)
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue
        if parts[5].rsplit(":", 1)[-1] == str(inode) and parts[4].isdigit():
            pids.append(int(parts[4]))
    return sorted(set(pids))


def _describe_owner(root: Path) -> str:
    doc = owner(root)
    pids = [p for p in holders(root) if p != os.getpid()]
    if doc and isinstance(doc.get("pid"), int) and (not pids or doc["pid"] in pids):
        pid = doc["pid"]
        host = doc.get("host", "?")
        since = doc.get("since", "?")
        alive = "" if host != socket.gethostname() or _pid_alive(pid) else " (no longer running)"
        return f"'{doc.get('purpose', '?')}' (pid {pid} on {host}{alive}, since {since})"
    if pids:
        return "save(s) in progress (pid " + ", ".join(str(p) for p in pids) + ")"
    return "another process"


def _try(fd: int, exclusive: bool) -> bool | None:
    """Take the lock without waiting: True taken, False busy, None unsupported."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    try:
        fcntl.flock(fd, op)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        if exc.errno in _UNSUPPORTED:
            return None
        raise
    return True


@contextlib.contextmanager
def hold(
    root: str | os.PathLike[str],
    *,
    exclusive: bool,
    timeout: float,
    purpose: str,
) -> Iterator[bool]:
    """Hold the store lock of *root* (which must exist) for the ``with`` block.

    Yields True while the lock is held, False where the filesystem has no
    locking.  Raises :class:`StoreLocked` after *timeout* seconds, naming the
    holder.

    >>> with hold(store_root, exclusive=True, timeout=5, purpose="gc"):  # doctest: +SKIP
    ...     collect_garbage()
    """
    folder = Path(root)
    path = folder / LOCK_FILE
    key = os.fspath(path)
    if not exclusive:
        with _shared_mutex:
            entry = _shared.get(key)
            if entry is not None:
                entry[1] += 1
        if entry is not None:
            try:
                yield True
            finally:
                _leave_shared(key)
            return
    deadline = time.monotonic() + timeout
    fd = _open(path)
    shared = False
    try:
        pause = 0.001
        while True:
            got = _try(fd, exclusive)
            if got and not _same_file(fd, path):
                # The lock file was deleted (or replaced) while we waited: a lock on the old
                # inode excludes nobody who opens the new one, so take the lock again there.
                os.close(fd)
                fd = -1
                fd = _open(path)
                continue
            if got is not False:
                break
            if time.monotonic() >= deadline:
                kind = "exclusively (for gc)" if exclusive else "to save"
                raise StoreLocked(
                    f"the store {folder} could not be locked {kind} within {timeout:g} s: it "
                    f"is in use by {_describe_owner(folder)}. Wait for it to finish, or stop "
                    "that process; a lock held by a killed process is released automatically.",
                    path=LOCK_FILE,
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        if got and exclusive:
            # Say who holds the store, for the message of anyone who times out waiting.
            doc = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "purpose": purpose,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(doc).encode("utf-8"), 0)
        if got and not exclusive:
            with _shared_mutex:
                entry = _shared.get(key)
                if entry is None:
                    _shared[key] = [fd, 1]
                    _held.add(fd)
                else:  # another thread took it meanwhile: join that hold instead
                    entry[1] += 1
                    os.close(fd)
                fd, shared = -1, True
        else:
            _held.add(fd)
        yield bool(got)
    finally:
        if shared:
            _leave_shared(key)
        elif fd >= 0:
            _held.discard(fd)
            os.close(fd)  # closing the descriptor releases the flock


def _leave_shared(key: str) -> None:
    """One holder of the shared lock *key* is done; the last one releases it."""
    with _shared_mutex:
        entry = _shared.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _shared[key]
        fd = entry[0]
        _held.discard(fd)
    with contextlib.suppress(OSError):
        os.close(fd)  # closing the descriptor releases the flock


def _open(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o666)
    except PermissionError as denied:
        # A read-only store cannot be changed anyway; callers report the write error.
        try:
            return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise denied from None  # (no lock file to read: the cause is the permission)


def _same_file(fd: int, path: Path) -> bool:
    """True while *path* still names the file open as *fd* (a lost lock file is recreated)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
