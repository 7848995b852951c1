"""Content-addressed blob files: ``objects/<hex[:2]>/<hex[2:]>``.

A blob's address is the hex digest of its bytes: xxh3_128 (32 hex digits) for
HDF5 and raw buffer blobs, sha256 (64 hex digits) for blobs holding pickle
streams.  Blobs are written once with :func:`fsio.atomic_write` and never
reopened for writing.  Writing a blob whose file already exists with the right
size is skipped (dedup).  A blob that fails verification when read is moved to
``quarantine/`` so that the next save of the same content writes it afresh.

Reads go into one page-aligned ``uint8`` buffer (one copy from the page cache,
none after); the checksum is computed over that buffer, chunk by chunk right
behind the reader (in a helper thread for large blobs: both hashes release the
GIL), before anything is decoded.

Large HDF5 and raw (out-of-band buffer) blobs of a local store are *mapped*
instead (:meth:`BlobStore.map`): a
private, copy-on-write memory map of the whole file (``MAP_PRIVATE``), verified
over the mapped bytes before anything is decoded.  The pages are the page cache's
own until the kernel writes one, which then becomes a private copy; nothing
written reaches the file.  Mapping is skipped (the blob is read) below
:data:`MAP_MIN` bytes, on a network or FUSE filesystem, with ``IPY_RESUME_MMAP=0``,
and past :data:`MAP_LIVE_MAX` live maps (each holds a file descriptor before
Python 3.13).  Committed blobs are never truncated or rewritten (gc unlinks,
quarantine renames), so a map stays valid for as long as the kernel holds it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import mmap
import os
import queue
import re
import secrets
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import xxhash

from ipy_resume.runtime import pages
from ipy_resume.store import fsio
from ipy_resume.store.backend import LocalBackend

__all__ = [
    "MAP_LIVE_MAX",
    "MAP_MIN",
    "QUARANTINE",
    "SHA256",
    "XXH3",
    "BlobStore",
    "algo_of",
    "digest",
    "mapping_disabled_reason",
    "new_hasher",
    "valid_address",
]

QUARANTINE = "quarantine"
"""The prefix of what failed verification (nothing reads it; ``gc`` empties it)."""
XXH3 = "xxh3_128"
SHA256 = "sha256"
_HEX_LEN = {XXH3: 32, SHA256: 64}
_ADDRESS = re.compile(r"[0-9a-f]{32}([0-9a-f]{32})?")
_PAGE = 4096
_CHUNK = 8 << 20
_PIPELINE_MIN = 32 << 20
# blobs below this size are read on the file descriptor, in one call (BlobStore._read_small)
_SMALL_READ = 1 << 20 if hasattr(os, "readv") else 0  # (no readv on Windows)
_ALIGN_MIN = 64 << 10  # smaller reads go to a buffer as numpy allocates it
_O_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)

MAP_MIN = 2 << 20
"""HDF5 and raw blobs at least this large are mapped rather than read.  Below it a read into
reused memory is as fast (64 KiB: 37 us read, 51 us mapped; 1 MiB: 130 / 176 us;
4 MiB: 600 / 200 us, measured with repeated restores in one process)."""


OWN_BLOB_MAX = 64 << 10
"""Blobs up to this size that this process wrote are kept in memory (see :class:`_OwnBlobs`)."""
OWN_BLOBS_BYTES = 32 << 20
"""At most this many bytes of them; past it the whole set is forgotten and starts again."""


class _OwnBlobs:
    """Small blobs this process wrote, by file: the bytes, and the file's identity right
    after the write.

    A hit of a small cell opened, read and hashed its blob, which this kernel had
    written a moment before: four system calls, a tenth of a W5 hit.  The bytes kept
    stand for a read of the file while it keeps the identity it had right after the
    write (device, inode, size, mtime, ctime), once it has settled with it, as a
    manifest this kernel published does (docs/guarantees.md); a file rewritten,
    replaced or removed since is read as always.  They are still checked against the
    manifest's checksum at every use (a few microseconds for 64 KiB), so what a load
    hands out is verified exactly as a read is.  ``verify`` and ``gc`` always read the
    files.
    """

    def __init__(self) -> None:
        self.files: dict[str, tuple[Any, bytes, bool]] = {}  # name -> (identity, bytes, settled)
        self.held = 0

    def remember(self, name: str, seen: Any, chunks: list[Any]) -> None:
        if seen is None:
            return
        data = b"".join(bytes(chunk) for chunk in chunks)
        if self.held + len(data) > OWN_BLOBS_BYTES:
            self.files = {}
            self.held = 0
        self.files[name] = (seen[0], data, False)
        self.held += len(data)

    def bytes_of(
        self, backend: LocalBackend, key: str, size: int, algo: str, checksum: str
    ) -> np.ndarray | None:
        """A new array of the bytes kept for *key*'s file, or None: read the file."""
        name = backend.file_name(key)
        kept = self.files.get(name)
        if kept is None:
            return None
        ident, data, settled = kept
        try:
            seen = backend.identity(key)
        except OSError:
            seen = None
        if seen is None or seen[0] != ident or len(data) != size:
            self.files.pop(name, None)
            return None
        if not settled:
            if not seen[1]:
                return None  # (it might still change unseen: read it until it settles)
            self.files[name] = (ident, data, True)
        h = new_hasher(algo)
        h.update(data)
        if h.hexdigest() != checksum:  # (not this checkpoint's bytes: the read says why)
            return None
        return np.frombuffer(bytearray(data), dtype=np.uint8)


_own = _OwnBlobs()


def forget_own_blobs() -> None:
    """Forget the small blobs this process wrote: later loads read their files.

    >>> forget_own_blobs()
    """
    _own.files = {}
    _own.held = 0


def _live_max() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 256
    return 512 if soft == resource.RLIM_INFINITY else max(0, min(512, soft // 4))


MAP_LIVE_MAX = _live_max()
"""At most this many blobs are mapped at once; more are read (each map holds a file
descriptor on Python < 3.13): 512, or a quarter of the soft limit of open files when
that is lower (256 for the usual 1024)."""
# madvise(MADV_POPULATE_READ) (Linux 5.14): map the page cache pages ahead of the hash,
# in one call per chunk, and report an unreadable page as an error instead of SIGBUS.
_MADV_POPULATE_READ: int | None = getattr(
    mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None
)
_live_maps = 0
_live_lock = threading.Lock()
# statfs f_type of filesystems where a page fault may fail or see another client's write
# (close-to-open consistency; a lost connection turns a page fault into SIGBUS)
_REMOTE_FS = {
    0x6969: "nfs",
    0x517B: "smb",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x65735546: "fuse",
    0x01021997: "9p",
    0x00C36400: "ceph",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x5346414F: "afs",
    0x6B414653: "afs",
    0x73757245: "coda",
    0x564C: "ncp",
}


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def new_hasher(algo: str) -> Hasher:
    if algo == XXH3:
        return xxhash.xxh3_128()
    if algo == SHA256:
        return hashlib.sha256()
    raise ValueError(f"unknown checksum algorithm {algo!r}")


def digest(algo: str, chunks: Iterable[Any]) -> str:
    """Hex digest of the concatenation of *chunks* (buffers)."""
    h = new_hasher(algo)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def valid_address(address: object, algo: str | None = None) -> bool:
    """True for a well-formed blob address (lowercase hex of an xxh3_128 or sha256 digest)."""
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
        return False
    return algo is None or len(address) == _HEX_LEN.get(algo, -1)


def algo_of(address: str) -> str:
    """The checksum algorithm a blob's name was made with, from its length.

    >>> algo_of("0" * 32), algo_of("0" * 64)
    ('xxh3_128', 'sha256')
    """
    return XXH3 if len(address) == _HEX_LEN[XXH3] else SHA256


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised, writeable, page-aligned uint8 array of *nbytes*.

    Page alignment matters: copying from the page cache into a buffer that
    starts a few bytes past a page boundary is ~40% slower on x86.
    """
    raw = np.empty(nbytes + _PAGE, dtype=np.uint8)
    pad = (-raw.ctypes.data) % _PAGE
    return raw[pad : pad + nbytes]


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    # Only asked on Linux, where the process's own symbols include the C library's:
    # ctypes.util.find_library would import subprocess and run ldconfig to find it again.
    return ctypes.CDLL(None, use_errno=True)


def filesystem_type(path: str | os.PathLike[str]) -> int | None:
    """The ``statfs`` ``f_type`` of the filesystem holding *path* (Linux), else None.

    >>> filesystem_type("/proc") == 0x9FA0  # doctest: +SKIP
    True
    """
    if not sys.platform.startswith("linux"):
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    try:
        if _libc().statfs(os.fsencode(path), buf) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def mapping_disabled_reason(root: str | os.PathLike[str]) -> str | None:
    """Why blobs under *root* are read rather than mapped; None when they are mapped.

    >>> os.environ["IPY_RESUME_MMAP"] = "0"; mapping_disabled_reason("/tmp")
    'IPY_RESUME_MMAP=0'
    >>> del os.environ["IPY_RESUME_MMAP"]
    """
    if os.environ.get("IPY_RESUME_MMAP", "1").strip().lower() in ("0", "off", "no", "false"):
        return "IPY_RESUME_MMAP=0"
    if not hasattr(mmap, "ACCESS_COPY") or os.name != "posix":
        return "no copy-on-write maps on this platform"
    return _remote_reason(os.path.abspath(root))


@functools.lru_cache(maxsize=64)
def _remote_reason(root: str) -> str | None:
    path = root
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)  # the store may not exist yet: ask its parent
    kind = _REMOTE_FS.get(filesystem_type(path) or 0)
    return None if kind is None else f"the store is on a {kind} filesystem"


def _map_released() -> None:
    global _live_maps
    with _live_lock:
        _live_maps -= 1


def _missing(rel: str, context: str) -> fsio.MissingBlob:
    return fsio.MissingBlob(
        f"{context} cannot be restored: {rel} is missing; it will be recomputed. "
        "Run 'ipy-resume verify' to list others.",
        path=rel,
        reason="missing",
    )


class _Descriptor:
    """``readinto`` on a file descriptor (what :func:`_read_hashed` reads from)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def readinto(self, view: memoryview) -> int:
        return os.readv(self.fd, [view])


class _Short(Exception):
    def __init__(self, got: int) -> None:
        self.got = got


def _read_hashed(f: Any, buf: np.ndarray, h: Hasher) -> None:
    """Fill *buf* from file *f*, feeding *h*; raises _Short when the file ends early."""
    view = buf.data
    size = len(view)
    if size < _PIPELINE_MIN:
        got = 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise _Short(got)
            got += n
        h.update(view)
        return
    # hash each chunk in a helper thread while the next one is read
    todo: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            while (item := todo.get()) is not None:
                h.update(view[item[0] : item[1]])
        except BaseException as exc:  # pragma: no cover - hashing a buffer does not fail
            failure.append(exc)

    thread = threading.Thread(target=worker, name="ipy_resume-hash", daemon=True)
    thread.start()
    try:
        got = 0
        while got < size:
            n = f.readinto(view[got : got + _CHUNK])
            if not n:
                raise _Short(got)
            todo.put((got, got + n))
            got += n
    finally:
        todo.put(None)
        thread.join()
    if failure:  # pragma: no cover
        raise failure[0]


def _hash_mapped(mm: mmap.mmap, size: int, algo: str, checksum: str) -> str | None:
    """None when the mapped bytes hash to *checksum*, else what is wrong with them."""
    h = new_hasher(algo)
    with memoryview(mm) as view:
        for start in range(0, size, _CHUNK):
            n = min(_CHUNK, size - start)
            try:
                if _MADV_POPULATE_READ is not None:
                    mm.madvise(_MADV_POPULATE_READ, start, n)
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EFAULT, errno.ENOMEM, errno.EBUSY):
                    return f"could not be read ({os.strerror(exc.errno)})"
                # EINVAL: a kernel before 5.14; the hash below faults the pages in itself
            h.update(view[start : start + n])
    return None if h.hexdigest() == checksum else "failed its checksum"


class BlobStore:
    """The ``objects/`` and ``quarantine/`` of a store in a folder, by key through *backend*.

    The reads and maps work on the blob's file (:meth:`LocalBackend.local_path`): one
    ``fstat`` of the open file, page-aligned reads, copy-on-write maps, inode checks
    before a quarantine.
    """

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.root = backend.root
        self.objects = backend.local_path("objects")

    # -- naming --------------------------------------------------------------

    def key(self, address: str) -> str:
        """The key of blob *address*: ``objects/<2 hex>/<the rest>``."""
        if not valid_address(address):
            raise ValueError(f"bad blob address {address!r}")
        return f"objects/{address[:2]}/{address[2:]}"

    def path(self, address: str) -> Path:
        return self.backend.local_path(self.key(address))

    def relpath(self, address: str) -> str:
        return f"objects/{address[:2]}/{address[2:]}"

    # -- writing -------------------------------------------------------------

    def ready(self) -> None:
        """Before a save's first blob: make ``objects/``."""
        fsio.makedirs(self.objects)

    def touch(self, address: str) -> None:
        """Refresh the time of a blob a save reuses without the lock (gc's grace counts
        from it); a blob gone meanwhile is the commit's to find."""
        with contextlib.suppress(OSError):
            os.utime(self.path(address))

    def has(self, address: str) -> bool:
        """True when a file of blob *address* exists (any size)."""
        return self.path(address).is_file()

    def exists(self, address: str, size: int) -> bool:
        """True when the blob's file exists with *size* bytes (so a save may skip it)."""
        try:
            return self.path(address).stat().st_size == size
        except FileNotFoundError:
            return False

    def put(
        self,
        address: str,
        chunks: Iterable[Any],
        size: int,
        *,
        touch: bool = False,
        verify: bool = False,
        dirs: set[Path] | None = None,
    ) -> int:
        """Store the concatenation of *chunks* (which must hash to *address*).

        Returns the number of bytes written: 0 when an equal-sized file exists.
        *touch* refreshes the modification time of such a file, so that a ``gc``
        running without a lock spares it (its grace period counts from now).
        With *verify*, such a file is first checked against its name, and written
        afresh (the bad copy quarantined) when it fails: a save that heals a damaged
        checkpoint never reuses a blob it has not seen to be sound.
        *dirs*: see :func:`fsio.atomic_write` (a group commit fsyncs the folders later).
        """
        if (
            verify
            and self.exists(address, size)
            and self.check(address, algo_of(address), address, size) is not None
        ):
            self.quarantine(address)
        if self.exists(address, size):
            if touch:
                self.touch(address)
            return 0
        path = self.path(address)
        key = self.key(address)
        self.backend.make_parents(key)
        kept = list(chunks) if size <= OWN_BLOB_MAX else None
        with fsio.atomic_write(path, dirs=dirs) as f:
            for chunk in chunks if kept is None else kept:
                f.write(chunk)
            written = f.bytes_written
        if written != size:
            raise ValueError(f"blob {address} is {written} bytes, expected {size}")
        if kept is not None:
            with contextlib.suppress(OSError):  # (kept or not, the file is written)
                _own.remember(self.backend.file_name(key), self.backend.identity(key), kept)
        return written

    # -- reading -------------------------------------------------------------

    @staticmethod
    def _open_blob(path: Path, rel: str, context: str) -> Any:
        """Open a blob to load it; :class:`fsio.MissingBlob` (the message) when it is gone."""
        try:
            return open(path, "rb", buffering=0)  # the caller closes it
        except FileNotFoundError:
            raise _missing(rel, context) from None

    def read(
        self, address: str, algo: str, checksum: str, size: int, *, context: str
    ) -> np.ndarray:
        """The verified bytes of a blob, as a writeable uint8 array (page-aligned from 64 KiB).

        On failure the file is quarantined and :class:`fsio.CorruptBlob` (or
        :class:`fsio.MissingBlob`) is raised; *context* names the checkpoint in
        the message, e.g. ``"checkpoint 'train' (0190ab12…)"``.
        """
        rel = self.relpath(address)
        if size <= OWN_BLOB_MAX and _own.files:
            kept = _own.bytes_of(self.backend, self.key(address), size, algo, checksum)
            if kept is not None:
                return kept
        if size < _SMALL_READ:
            st, buf, problem = self._read_small(address, rel, size, algo, checksum, context)
        else:
            f = self._open_blob(self.path(address), rel, context)
            with f:
                st = os.fstat(f.fileno())
                actual = st.st_size
                problem = None
                if actual < size:
                    problem = f"is truncated ({actual} of {size} bytes)"
                elif actual > size:
                    problem = f"has the wrong size ({actual} bytes, expected {size})"
                else:
                    buf = aligned_empty(size)
                    h = new_hasher(algo)
                    try:
                        _read_hashed(f, buf, h)
                    except _Short as short:
                        problem = f"is truncated ({short.got} of {size} bytes)"
                    else:
                        if h.hexdigest() != checksum:
                            problem = "failed its checksum"
        if problem is None:
            return buf
        moved = self.quarantine(address, only=(st.st_dev, st.st_ino))
        where = "it was moved to quarantine/ and" if moved else "it"
        raise fsio.CorruptBlob(
            f"{context} is corrupt: {rel} {problem}; {where} will be recomputed. "
            "Run 'ipy-resume verify' to list others.",
            path=rel,
            reason=problem,
        )

    def _read_small(
        self, address: str, rel: str, size: int, algo: str, checksum: str, context: str
    ) -> tuple[os.stat_result, np.ndarray, str | None]:
        """:meth:`read` of a small blob on the file descriptor: (its status, the bytes,
        what is wrong with them or None).  A small cell's hit reads one such blob, and a
        file object and a path object cost more than the read."""
        name = self.backend.file_name(self.key(address))
        try:
            fd = os.open(name, _O_READ)
        except FileNotFoundError:
            raise _missing(rel, context) from None
        # (a page's alignment only pays for copies of many pages)
        buf = aligned_empty(size) if size >= _ALIGN_MIN else np.empty(size, dtype=np.uint8)
        try:
            st = os.fstat(fd)
            if st.st_size < size:
                return st, buf, f"is truncated ({st.st_size} of {size} bytes)"
            if st.st_size > size:
                return st, buf, f"has the wrong size ({st.st_size} bytes, expected {size})"
            h = new_hasher(algo)
            try:
                _read_hashed(_Descriptor(fd), buf, h)
            except _Short as short:
                return st, buf, f"is truncated ({short.got} of {size} bytes)"
        finally:
            os.close(fd)
        return st, buf, None if h.hexdigest() == checksum else "failed its checksum"

    def mapping(self, size: int) -> bool:
        """True when a blob of *size* bytes of this store would be mapped (see :meth:`map`)."""
        return size >= MAP_MIN and mapping_disabled_reason(self.root) is None

    def map(
        self, address: str, algo: str, checksum: str, size: int, *, context: str
    ) -> np.ndarray | None:
        """The verified bytes of a blob as a copy-on-write map (a writeable uint8 array).

        Fails as :meth:`read` does, quarantining a bad file; None when the file cannot be
        mapped (too many live maps, an error of ``mmap``): the caller reads it instead.
        Nothing of the map is handed out before its checksum matched.
        """
        global _live_maps
        path = self.path(address)
        rel = self.relpath(address)
        with _live_lock:
            if _live_maps >= MAP_LIVE_MAX:
                return None
            _live_maps += 1
        counted = True
        try:
            f = self._open_blob(path, rel, context)
            mm: mmap.mmap | None = None
            with f:
                st = os.fstat(f.fileno())
                problem = None
                if st.st_size < size:
                    problem = f"is truncated ({st.st_size} of {size} bytes)"
                elif st.st_size > size:
                    problem = f"has the wrong size ({st.st_size} bytes, expected {size})"
                else:
                    try:
                        extra = {"trackfd": False} if sys.version_info >= (3, 13) else {}
                        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY, **extra)
                    except (OSError, ValueError):
                        return None
                    problem = _hash_mapped(mm, size, algo, checksum)
            if problem is not None:
                if mm is not None:
                    mm.close()  # nothing views it yet
                moved = self.quarantine(address, only=(st.st_dev, st.st_ino))
                where = "it was moved to quarantine/ and" if moved else "it"
                raise fsio.CorruptBlob(
                    f"{context} is corrupt: {rel} {problem}; {where} will be recomputed. "
                    "Run 'ipy-resume verify' to list others.",
                    path=rel,
                    reason=problem,
                )
            assert mm is not None
            weakref.finalize(mm, _map_released)
            # so a fingerprint of what it holds is not hashed again while no page is written
            pages.track(mm, path, st)
            mapped = np.frombuffer(mm, dtype=np.uint8)
            if algo == XXH3:
                # the bytes' own digest, just verified: what a fingerprint of a torch storage
                # restored over them hashes (see pages.RAW_TAG), not hashed a second time
                pages.remember(mapped.ctypes.data, size, pages.RAW_TAG, bytes.fromhex(checksum))
            counted = False
            return mapped
        finally:
            if counted:
                _map_released()

    def check(self, address: str, algo: str, checksum: str, size: int) -> str | None:
        """Verify a blob without keeping it in memory; None when sound, else what is wrong."""
        return self.check_file(self.path(address), algo, checksum, size)

    @staticmethod
    def check_file(path: Path, algo: str, checksum: str, size: int) -> str | None:
        """:meth:`check` of the file at *path* (a blob not yet moved to its name).

        >>> BlobStore.check_file(temp, "sha256", expected, 5)  # doctest: +SKIP
        """
        try:
            with open(path, "rb", buffering=0) as f:
                actual = os.fstat(f.fileno()).st_size
                if actual != size:
                    if actual < size:
                        return f"is truncated ({actual} of {size} bytes)"
                    return f"has the wrong size ({actual} bytes, expected {size})"
                h = new_hasher(algo)
                # no larger than the file: zeroing an 8 MiB buffer costs a small blob's
                # check several times its hashing
                chunk = bytearray(min(_CHUNK, max(size, 1)))
                view = memoryview(chunk)
                while n := f.readinto(chunk):
                    h.update(view[:n])
        except FileNotFoundError:
            return "is missing"
        if h.hexdigest() != checksum:
            return "failed its checksum"
        return None

    def quarantine(self, address: str, only: tuple[int, int] | None = None) -> str | None:
        """Move a bad blob to ``quarantine/``; returns its new relative path (None if gone).

        *only* is the (device, inode) of the file found bad: when another process
        has meanwhile replaced it with a sound copy, that copy is left in place.
        """
        key = self.key(address)
        src = self.backend.local_path(key)
        name = f"{address}.{int(time.time() * 1000)}.{secrets.token_hex(3)}"
        if only is not None:
            try:
                now = src.stat()
            except OSError:
                return None
            if (now.st_dev, now.st_ino) != only:
                return None  # rewritten since we read it: not ours to move
        try:
            self.backend.move(key, f"{QUARANTINE}/{name}")
        except FileNotFoundError:
            return None
        except OSError:
            # cannot move it (read-only store?): report it where it is
            return None
        return f"{QUARANTINE}/{name}"
