"""Durable filesystem writes, and the store's error types.

Every write the store makes goes through this module:

* :func:`atomic_write` writes a file under a unique temporary name beside its
  target (prefix :data:`TEMP_PREFIX`), fsyncs it, moves it into place with
  ``os.replace`` (or ``os.link`` when ``exclusive=True``: an existing target
  then wins and :class:`FileExistsError` is raised), and fsyncs the folder.  On
  any error, including ``KeyboardInterrupt``, the temporary file is removed and
  the error re-raised, so a reader sees either the old or the new content.
* :func:`makedirs` creates missing folders and fsyncs each parent.
* :func:`move` renames a file (used to quarantine bad blobs) and fsyncs both
  folders.

Fault injection
---------------
The primitive operations are the module-level functions :func:`_open`,
:func:`_write`, :func:`_fsync`, :func:`_replace`, :func:`_link`,
:func:`_mkdir`, :func:`_unlink` and :func:`_rmdir`.  They are looked up in this module's
namespace at every call, so a test can wrap or replace them with
``monkeypatch.setattr(fsio, "_write", fake)`` to record the call order or to
raise ``OSError(errno.ENOSPC, ...)`` at a chosen point.  ``_fsync`` is used for
files and folders alike (a folder is fsynced through a read-only descriptor).

The error hierarchy of the store lives here too, because this is the one
module every other store module imports; :mod:`ipy_resume.store` re-exports it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .unique import random_hex

__all__ = [
    "TEMP_PREFIX",
    "AtomicFile",
    "CorruptBlob",
    "FormatTooNew",
    "ManifestError",
    "MissingBlob",
    "SaveError",
    "StoreError",
    "Untrusted",
    "atomic_write",
    "fsync_dir",
    "is_temp_name",
    "makedirs",
    "move",
    "remove",
    "remove_empty_dir",
    "settle",
    "stage",
    "temp_name",
]

TEMP_PREFIX = ".tmp-"
"""Name prefix of temporary files; ``gc`` may delete stale files carrying it."""

# ---------------------------------------------------------------------------
# errors


def one_line(text: str) -> str:
    """*text* on one line: every run of white space (newlines too) becomes one space.

    >>> one_line("bad\\n  thing ")
    'bad thing'
    """
    return " ".join(text.split())


class StoreError(Exception):
    """Base class of the store's errors.

    The message is one line that says what went wrong, where (a path relative
    to the store root) and how to recover; the engine shows it verbatim.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(one_line(message))
        self.path = path


class CorruptBlob(StoreError):
    """A blob failed verification: checksum mismatch, truncated or missing.

    ``path`` is relative to the store root, ``reason`` names what failed.
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str = "") -> None:
        super().__init__(message, path=path)
        self.reason = reason


class MissingBlob(CorruptBlob):
    """A blob referenced by a verified manifest does not exist."""


class Untrusted(StoreError):
    """A manifest is unsigned or was signed under another key."""


class FormatTooNew(StoreError):
    """A manifest or store was written by a newer ipy_resume."""

    def __init__(
        self, message: str, *, path: str | None = None, found: int = 0, supported: int = 0
    ) -> None:
        super().__init__(message, path=path)
        self.found = found
        self.supported = supported


class ManifestError(StoreError):
    """A manifest (or ``store.json``) cannot be read: bad JSON, bad structure."""


class SaveError(StoreError):
    """A save failed with an OS error; nothing was committed."""


# ---------------------------------------------------------------------------
# primitives (tests monkeypatch these)


def _open(path: str | os.PathLike[str], flags: int, mode: int = 0o666) -> int:
    return os.open(path, flags, mode)


def _write(fd: int, data: Any) -> int:
    return os.write(fd, data)


def _fsync(fd: int) -> None:
    os.fsync(fd)


def _replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    os.replace(src, dst)


def _link(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    os.link(src, dst)


def _mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
    os.mkdir(path, mode)


def _unlink(path: str | os.PathLike[str]) -> None:
    os.unlink(path)


def _rmdir(path: str | os.PathLike[str]) -> None:
    os.rmdir(path)


# ---------------------------------------------------------------------------
# operations

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# errors of os.link meaning "this filesystem has no hard links", not "exists"
_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK}


def is_temp_name(name: str) -> bool:
    """True for the name of a temporary file made by :func:`atomic_write`."""
    return name.startswith(TEMP_PREFIX)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the entries of folder *path* durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except (PermissionError, IsADirectoryError):  # e.g. Windows
        return
    try:
        _fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):  # folder fsync unsupported
            raise
    finally:
        os.close(fd)


def makedirs(
    path: str | os.PathLike[str], mode: int = 0o777, dirs: set[Path] | None = None
) -> None:
    """Create *path* and its missing parents, fsyncing each parent of a new folder.

    With *dirs* (a save staged now and made durable later), those parents are added
    to the set instead, for the caller to fsync before it publishes anything in them.
    """
    target = Path(path)
    missing: list[Path] = []
    p = target
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            _mkdir(d, mode)
        except FileExistsError:
            if not d.is_dir():
                raise
            continue  # another process made it
        if dirs is None:
            fsync_dir(d.parent)
        else:
            dirs.add(d.parent)


class AtomicFile:
    """The writable end of :func:`atomic_write`: an unbuffered binary file."""

    def __init__(self, fd: int, path: Path, temp_path: Path) -> None:
        self.fd = fd
        self.path = path
        self.temp_path = temp_path
        self.bytes_written = 0

    def write(self, data: Any) -> int:
        """Write all of *data* (any contiguous buffer); returns its length in bytes."""
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        total = len(view)
        done = 0
        while done < total:
            n = _write(self.fd, view[done:])
            if n <= 0:  # pragma: no cover - os.write raises rather than returning 0
                raise OSError(errno.EIO, "write made no progress", str(self.temp_path))
            done += n
        self.bytes_written += total
        return total

    def tell(self) -> int:
        return self.bytes_written


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    *,
    exclusive: bool = False,
    mode: int = 0o666,
    dirs: set[Path] | None = None,
) -> Iterator[AtomicFile]:
    """Write *path* atomically and durably.

    ``exclusive=True`` publishes with ``os.link``: when *path* already exists
    it is left untouched and :class:`FileExistsError` is raised (a race has one
    winner).  *mode* is the permission of the new file (before the umask).
    The folder of *path* must exist.  With *dirs* (a group commit), the folder
    is added to that set instead of being fsynced: the caller fsyncs each folder
    once, and the file is durable only after that.

    >>> with atomic_write("/tmp/doc-atomic.txt") as f:  # doctest: +SKIP
    ...     f.write(b"hello")
    """
    target = Path(path)
    temp = temp_name(target)
    fd = _open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_BINARY, mode)
    closed = False
    try:
        f = AtomicFile(fd, target, temp)
        yield f
        _fsync(fd)
        closed = True
        os.close(fd)
        if exclusive:
            _publish_exclusive(temp, target)
        else:
            _replace(temp, target)
    except BaseException:
        if not closed:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            _unlink(temp)
        raise
    if dirs is None:
        fsync_dir(target.parent)
    else:
        dirs.add(target.parent)


def temp_name(path: str | os.PathLike[str]) -> Path:
    """A new temporary name beside *path* (what :func:`atomic_write` writes to first).

    >>> temp_name("/tmp/x.bin").name.startswith(TEMP_PREFIX)
    True
    """
    target = Path(path)
    return target.with_name(f"{TEMP_PREFIX}{target.name}-{random_hex(6)}")


def stage(path: str | os.PathLike[str], chunks: Any, temp: Path | None = None) -> Path:
    """Write *chunks* to a new temporary file beside *path*, without fsync; returns its path.

    The first half of :func:`atomic_write`, for a commit finished later (and perhaps by
    another process) with :func:`settle`.  On any error the temporary file is removed.

    >>> temp = stage("/tmp/doc-staged.bin", [b"hello"])  # doctest: +SKIP
    """
    target = Path(path)
    temp = temp_name(target) if temp is None else temp
    fd = _open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_BINARY, 0o666)
    try:
        f = AtomicFile(fd, target, temp)
        for chunk in chunks:
            f.write(chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            _unlink(temp)
        raise
    os.close(fd)
    return temp


def settle(
    temp: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    exclusive: bool = False,
    dirs: set[Path] | None = None,
) -> None:
    """Make a file written by :func:`stage` durable and move it to *path*.

    The second half of :func:`atomic_write`: fsync, then replace (or, *exclusive*, link:
    :class:`FileExistsError` when *path* exists), then the folder's fsync (or, with
    *dirs*, its folder added for the caller to fsync).  A *path* that already exists with
    a content-addressed name is the same bytes: callers drop the temporary file instead.

    >>> settle(temp, "/tmp/doc-staged.bin")  # doctest: +SKIP
    """
    source, target = Path(temp), Path(path)
    fd = _open(source, os.O_RDONLY | _O_CLOEXEC | _O_BINARY)
    try:
        _fsync(fd)
    finally:
        os.close(fd)
    if exclusive:
        _publish_exclusive(source, target)
    else:
        _replace(source, target)
    if dirs is None:
        fsync_dir(target.parent)
    else:
        dirs.add(target.parent)


def _publish_exclusive(temp: Path, target: Path) -> None:
    try:
        _link(temp, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        # no hard links here: fall back to a check-then-replace (racy, but only
        # on filesystems that cannot do better)
        if target.exists():
            raise FileExistsError(errno.EEXIST, "file exists", str(target)) from exc
        _replace(temp, target)
        return
    # The target is published: a failure to drop the temporary name must not turn
    # a successful commit into an error.  A leftover temp file is removed by gc.
    with contextlib.suppress(OSError):
        _unlink(temp)


def move(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename *src* to *dst* (same filesystem) and fsync both folders."""
    s, d = Path(src), Path(dst)
    _replace(s, d)
    fsync_dir(d.parent)
    if s.parent != d.parent:
        fsync_dir(s.parent)


def remove(path: str | os.PathLike[str], *, missing_ok: bool = True) -> None:
    """Delete a file (and fsync its folder)."""
    p = Path(path)
    try:
        _unlink(p)
    except FileNotFoundError:
        if not missing_ok:
            raise
        return
    fsync_dir(p.parent)


def remove_empty_dir(path: str | os.PathLike[str]) -> bool:
    """Remove folder *path* if it is empty; True when it was removed.

    >>> remove_empty_dir("/tmp/surely-not-empty-or-missing")
    False
    """
    p = Path(path)
    try:
        _rmdir(p)
    except OSError:  # not empty, gone, or not ours: leave it
        return False
    fsync_dir(p.parent)
    return True
