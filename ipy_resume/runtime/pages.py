"""Digests of bytes in copy-on-write maps of store files, kept for as long as no page is written.

A restored array is often a private map of a blob file (``MAP_PRIVATE``, see
:meth:`ipy_resume.store.blobs.BlobStore.map`).  Each page of such a map is the page cache's
own page of the file until something writes to it; the write, whatever makes it (numpy,
``np.copyto``, a view, ctypes, the buffer protocol, a ``read(2)`` into the buffer, another
thread, a debugger), makes the kernel give the process a private *anonymous* copy of that
page first.  Linux reports per page, in ``/proc/self/pagemap``, whether it is present,
swapped out, and whether it is a file page.  A page that is present or swapped and is not a
file page has been written; a file page, or a page that was never touched, still holds the
file's bytes.  So when every page under a range is clean, the range holds exactly the bytes
it held when it was mapped, and a digest computed over it then can be reused.

:func:`digest` does that for the fingerprint of an array: the first fingerprint of a mapped
array hashes it, later ones check its pages (a tenth or less of the cost of hashing it) and
return the same digest while they are clean.  It also requires the blob file to be the same
file, unchanged (device, inode, size, mtime and ctime), because a shared writer of the file
itself would change the clean pages under the map (ipy_resume never does: committed blobs
are never rewritten).  Wherever any of this cannot be checked the bytes are hashed, as for
any other array: not Linux, ``/proc/self/pagemap`` unreadable, a self-test at first use that
does not see a written page as written, a closed map, a page that is not clean.

>>> track  # doctest: +ELLIPSIS
<function track at ...>
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["MEMO_MIN", "RAW_TAG", "active", "digest", "remember", "track"]

MEMO_MIN = 1 << 20
"""Ranges smaller than this are hashed every time: hashing them costs about as much as the check."""
RAW_TAG = b"raw\0"
"""The tag of a range's plain xxh3_128 digest (nothing else mixed in): a verified blob's own
checksum, remembered when it is mapped, which a torch storage restored over it is keyed by."""

_PAGE = mmap.PAGESIZE
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61
_ENTRIES_PIECE = 1 << 20  # pagemap entries read at a time (8 MiB, for 4 GiB of map)
_MEMO_MAX = 64  # digests kept per map

_lock = threading.Lock()
_maps: dict[int, _Map] = {}  # start address -> map
_starts: list[int] = []  # sorted keys of _maps
_pagemap: tuple[int, int] | None = None  # (pid, fd)
_usable: bool | None = None  # the self-test's verdict, once run


def _forked() -> None:
    # A save's forked writer fingerprints arrays (see store.late): another thread may have
    # held the lock at the fork, and that thread is not in the child.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class _Map:
    __slots__ = ("end", "identity", "memo", "path", "ref", "start")

    def __init__(self, mm: mmap.mmap, start: int, path: str, st: os.stat_result) -> None:
        self.ref = weakref.ref(mm)
        self.start = start
        self.end = start + len(mm)
        self.path = path
        self.identity = _identity(st)
        self.memo: dict[tuple[int, int, bytes], bytes] = {}

    def alive(self) -> bool:
        mm = self.ref()
        if mm is None:
            return False
        try:
            return len(mm) == self.end - self.start  # raises once the map is closed
        except ValueError:
            return False

    def same_file(self) -> bool:
        try:
            return _identity(os.stat(self.path)) == self.identity
        except OSError:
            return False


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def active() -> bool:
    """True while some tracked map is alive (a cheap test before :func:`digest`).

    >>> isinstance(active(), bool)
    True
    """
    return bool(_maps)


def track(mm: mmap.mmap, path: str | os.PathLike[str], st: os.stat_result) -> None:
    """Remember that *mm* is a private (copy-on-write) map of the whole file at *path*.

    *st* is the ``fstat`` of the file as it was mapped.  Nothing is tracked where pages
    cannot be checked.  The map is forgotten when it is collected.

    >>> track(mm, blob_path, os.fstat(fd))  # doctest: +SKIP
    """
    if not len(mm) or not _check_usable():
        return
    start = _address(mm)
    if start is None:
        return
    entry = _Map(mm, start, os.fspath(path), st)
    with _lock:
        if start not in _maps:
            bisect.insort(_starts, start)
        _maps[start] = entry
    weakref.finalize(mm, _forget, start, entry)


def _forget(start: int, entry: _Map) -> None:
    with _lock:
        if _maps.get(start) is entry:
            del _maps[start]
            _starts.remove(start)


def _address(mm: mmap.mmap) -> int | None:
    import ctypes

    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(mm))
    except (TypeError, ValueError, BufferError):
        return None


def _find(address: int, nbytes: int) -> _Map | None:
    with _lock:
        i = bisect.bisect_right(_starts, address) - 1
        if i < 0:
            return None
        entry = _maps[_starts[i]]
    if address + nbytes > entry.end or not entry.alive():
        return None
    return entry


def digest(address: int, nbytes: int, tag: bytes, compute: Callable[[], bytes]) -> bytes:
    """``compute()``, the digest of the *nbytes* at *address* under *tag*, or the one computed
    for them before, when they sit in a tracked map none of whose pages under them has been
    written since (and the file is unchanged).

    *tag* must hold everything else the digest depends on (the dtype and shape of an array).

    >>> digest(arr.ctypes.data, arr.nbytes, b"tag", lambda: hash_of(arr))  # doctest: +SKIP
    """
    entry = _find(address, nbytes) if nbytes >= MEMO_MIN else None
    if entry is None:
        return compute()
    key = (address - entry.start, nbytes, tag)
    known = entry.memo.get(key)
    if known is not None and entry.same_file() and clean(address, nbytes):
        return known
    before = entry.same_file() and clean(address, nbytes)
    result = compute()
    # Clean after too: no page changed while it was hashed.
    if before and clean(address, nbytes):
        if len(entry.memo) >= _MEMO_MAX:
            entry.memo.clear()
        entry.memo[key] = result
    return result


def remember(address: int, nbytes: int, tag: bytes, value: bytes) -> bool:
    """Record *value* as :func:`digest`'s result for the *nbytes* at *address* under *tag*,
    without computing it, when they sit in a tracked map none of whose pages under them has
    been written (and the file is unchanged); False when nothing was recorded.

    For a digest known from elsewhere for exactly the bytes the file held when mapped: the
    fingerprint a checkpoint recorded for an array, once the blob behind the map has been
    verified against the checksum in that same (verified) checkpoint.

    >>> remember(arr.ctypes.data, arr.nbytes, b"tag", recorded)  # doctest: +SKIP
    True
    """
    entry = _find(address, nbytes) if nbytes >= MEMO_MIN else None
    if entry is None or not (entry.same_file() and clean(address, nbytes)):
        return False
    if len(entry.memo) >= _MEMO_MAX:
        entry.memo.clear()
    entry.memo[(address - entry.start, nbytes, tag)] = value
    return True


def clean(address: int, nbytes: int) -> bool:
    """True when no page under ``address .. address+nbytes`` has become the process's own
    (written) since it was mapped; False when that cannot be read.

    Only meaningful for a private map of a file (:func:`track`).
    """
    import numpy as np

    fd = _pagemap_fd()
    if fd is None or nbytes <= 0:
        return False
    first, last = address // _PAGE, (address + nbytes - 1) // _PAGE
    for piece in range(first, last + 1, _ENTRIES_PIECE):
        count = min(_ENTRIES_PIECE, last + 1 - piece)
        try:
            raw = os.pread(fd, 8 * count, 8 * piece)
        except OSError:
            return False
        if len(raw) != 8 * count:
            return False
        entries = np.frombuffer(raw, dtype="<u8")
        touched = (entries & np.uint64(_PRESENT | _SWAPPED)) != 0
        written = touched & ((entries & np.uint64(_FILE)) == 0)
        if written.any():
            return False
    return True


def _pagemap_fd() -> int | None:
    global _pagemap
    pid = os.getpid()
    if _pagemap is not None and _pagemap[0] == pid:
        return _pagemap[1]
    if _pagemap is not None:  # a forked child: that descriptor reads the parent's pages
        with contextlib.suppress(OSError):
            os.close(_pagemap[1])
        _pagemap = None
    if not sys.platform.startswith("linux"):
        return None
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    _pagemap = (pid, fd)
    return fd


def _check_usable() -> bool:
    """Run once: does pagemap see a written page of a private file map as written, and a
    page only read as clean?  Everything falls back to hashing when it does not."""
    global _usable
    if _usable is None:
        _usable = _self_test()
    return _usable


def _self_test() -> bool:
    import tempfile

    if _pagemap_fd() is None:
        return False
    try:
        with tempfile.TemporaryFile() as f:
            f.write(b"\1" * (3 * _PAGE))
            f.flush()
            mm = mmap.mmap(f.fileno(), 3 * _PAGE, access=mmap.ACCESS_COPY)
            try:
                view: Any = memoryview(mm)
                _ = view[0]  # read page 0
                view[_PAGE] = 2  # write page 1
                start = _address(mm)
                if start is None:
                    return False
                read_ok = clean(start, _PAGE)
                written_seen = not clean(start + _PAGE, _PAGE)
                untouched_ok = clean(start + 2 * _PAGE, _PAGE)
                view.release()
            finally:
                mm.close()
    except (OSError, ValueError, BufferError):
        return False
    return read_ok and written_seen and untouched_ok
