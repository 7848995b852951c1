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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import re
import secrets
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import xxhash

from ipy_resume.store import fsio

__all__ = [
    "SHA256",
    "XXH3",
    "BlobStore",
    "algo_of",
    "digest",
    "new_hasher",
    "valid_address",
]

XXH3 = "xxh3_128"
SHA256 = "sha256"
_HEX_LEN = {XXH3: 32, SHA256: 64}
_ADDRESS = re.compile(r"[0-9a-f]{32}([0-9a-f]{32})?")
_PAGE = 4096
_CHUNK = 8 << 20
_PIPELINE_MIN = 32 << 20


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


class BlobStore:
    """The ``objects/`` and ``quarantine/`` folders of a store."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.quarantine_dir = self.root / "quarantine"

    # -- naming --------------------------------------------------------------

    def path(self, address: str) -> Path:
        if not valid_address(address):
            raise ValueError(f"bad blob address {address!r}")
        return self.objects / address[:2] / address[2:]

    def relpath(self, address: str) -> str:
        return f"objects/{address[:2]}/{address[2:]}"

    # -- writing -------------------------------------------------------------

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
                with contextlib.suppress(OSError):
                    os.utime(self.path(address))
            return 0
        path = self.path(address)
        fsio.makedirs(path.parent)
        with fsio.atomic_write(path, dirs=dirs) as f:
            for chunk in chunks:
                f.write(chunk)
            written = f.bytes_written
        if written != size:
            raise ValueError(f"blob {address} is {written} bytes, expected {size}")
        return written

    # -- reading -------------------------------------------------------------

    def read(
        self, address: str, algo: str, checksum: str, size: int, *, context: str
    ) -> np.ndarray:
        """The verified bytes of a blob, as a writeable page-aligned uint8 array.

        On failure the file is quarantined and :class:`fsio.CorruptBlob` (or
        :class:`fsio.MissingBlob`) is raised; *context* names the checkpoint in
        the message, e.g. ``"checkpoint 'train' (0190ab12…)"``.
        """
        path = self.path(address)
        rel = self.relpath(address)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise fsio.MissingBlob(
                f"{context} cannot be restored: {rel} is missing; it will be recomputed. "
                "Run 'ipy-resume verify' to list others.",
                path=rel,
                reason="missing",
            ) from None
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
                chunk = bytearray(_CHUNK)
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
        src = self.path(address)
        name = f"{address}.{int(time.time() * 1000)}.{secrets.token_hex(3)}"
        if only is not None:
            try:
                now = src.stat()
            except OSError:
                return None
            if (now.st_dev, now.st_ino) != only:
                return None  # rewritten since we read it: not ours to move
        try:
            fsio.makedirs(self.quarantine_dir)
            fsio.move(src, self.quarantine_dir / name)
        except FileNotFoundError:
            return None
        except OSError:
            # cannot move it (read-only store?): report it where it is
            return None
        return f"quarantine/{name}"
