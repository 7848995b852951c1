"""A bounded local cache of blobs fetched from an object store.

Blobs are content-addressed, so one cache serves every store of the user: the file
``<cache dir>/ab/cdef…`` holds the bytes whose digest is ``abcdef…``.  Nothing in it
is trusted: every read is checked against the checksum of the (verified) manifest
that asks for it, and a file that fails is deleted and fetched again.  The cache is
bounded (least recently used files go first) and lives under the user's cache
directory: ``$IPY_RESUME_CACHE_DIR``, else ``$XDG_CACHE_HOME/ipy_resume/blobs``, else
``~/.cache/ipy_resume/blobs``; ``$IPY_RESUME_CACHE_SIZE`` sets its limit (default 20G,
``0`` turns it off).

Cache files are written without fsync: losing one costs a download, never a value.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from pathlib import Path

import numpy as np

from ipy_resume.store import blobs
from ipy_resume.store.blobs import aligned_empty, new_hasher

__all__ = ["DEFAULT_LIMIT", "BlobCache", "default_cache_dir"]

DEFAULT_LIMIT = 20 << 30
_TEMP = ".part-"


def default_cache_dir() -> Path:
    """Where cached blobs live (see the module docstring).

    >>> default_cache_dir().name
    'blobs'
    """
    override = os.environ.get("IPY_RESUME_CACHE_DIR")
    if override:
        return Path(override).expanduser() / "blobs"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ipy_resume" / "blobs"


def _limit() -> int:
    raw = os.environ.get("IPY_RESUME_CACHE_SIZE")
    if not raw:
        return DEFAULT_LIMIT
    from ipy_resume.store.retention import parse_size

    return parse_size(raw)


class BlobCache:
    """Verified local copies of remote blobs, at most *limit* bytes, LRU.

    >>> cache = BlobCache(Path("/tmp/doc-cache"))  # doctest: +SKIP
    >>> cache.read("ab" * 16, "xxh3_128", "ab" * 16, 10) is None  # doctest: +SKIP
    True
    """

    def __init__(self, folder: Path | None = None, limit: int | None = None) -> None:
        self.folder = default_cache_dir() if folder is None else Path(folder)
        self.limit = _limit() if limit is None else limit
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def path(self, address: str) -> Path:
        if not blobs.valid_address(address):
            raise ValueError(f"bad blob address {address!r}")
        return self.folder / address[:2] / address[2:]

    def read(self, address: str, algo: str, checksum: str, size: int) -> np.ndarray | None:
        """The cached bytes of *address* when they verify; None (and the file gone) if not."""
        if not self.enabled:
            return None
        path = self.path(address)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except OSError:
            self.misses += 1
            return None
        with f:
            buf = aligned_empty(size)
            view = buf.data
            got = 0
            while got < size:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
            extra = f.read(1)
        h = new_hasher(algo)
        h.update(view)
        if got != size or extra or h.hexdigest() != checksum:
            self.drop(address)
            self.misses += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: evicted last
        self.hits += 1
        return buf

    def writer(self, address: str, size: int) -> _Entry | None:
        """A file to fill while the blob downloads; ``commit`` it once it verified."""
        if not self.enabled or size > self.limit:
            return None
        path = self.path(address)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f"{_TEMP}{path.name}-{secrets.token_hex(4)}")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return None  # no cache today (read-only home?): the restore still works
        return _Entry(self, fd, temp, path, size)

    def drop(self, address: str) -> None:
        """Forget *address* (its file failed, or its blob was quarantined)."""
        with contextlib.suppress(OSError, ValueError):
            os.unlink(self.path(address))

    def evict(self) -> int:
        """Delete least recently used files until the cache fits its limit; bytes freed."""
        with self._lock:
            entries: list[tuple[float, int, Path]] = []
            total = 0
            for here, _dirs, names in os.walk(self.folder):
                for name in names:
                    p = Path(here) / name
                    with contextlib.suppress(OSError):
                        st = p.stat()
                        entries.append((max(st.st_atime, st.st_mtime), st.st_size, p))
                        total += st.st_size
            freed = 0
            for _when, size, p in sorted(entries):
                if total - freed <= self.limit:
                    break
                with contextlib.suppress(OSError):
                    p.unlink()
                    freed += size
            return freed


class _Entry:
    """One cache file being written (pieces may arrive out of order, from several threads)."""

    def __init__(self, cache: BlobCache, fd: int, temp: Path, path: Path, size: int) -> None:
        self.cache, self.fd, self.temp, self.path, self.size = cache, fd, temp, path, size
        self.failed = False

    def piece(self, offset: int, data: memoryview | bytes) -> None:
        if self.failed:
            return
        try:
            view = memoryview(data)
            while len(view):
                n = os.pwrite(self.fd, view, offset)
                view, offset = view[n:], offset + n
        except OSError:
            self.failed = True  # disk full: skip caching, the restore goes on

    def commit(self) -> None:
        """Publish the file (the caller verified the bytes it wrote)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if self.failed:
            self.abandon()
            return
        try:
            os.replace(self.temp, self.path)
        except OSError:
            self.abandon()
            return
        self.cache.evict()

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(OSError):
            os.unlink(self.temp)
