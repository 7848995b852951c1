"""The byte-level interface every store sits on, and its local-folder implementation.

A backend is a small key/value interface in the spirit of zarr v3's ``abc/store.py``:
string keys (``"objects/ab/cdef…"``, ``"manifests/train/<key>/<id>.json"``), never paths,
and a handful of primitives:

=================  ======================================================================
``get``            the bytes of a key, or of a byte range of it
``read_into``      fill a caller's buffer (large blobs, no extra copy where possible)
``put``            write a key whole (atomically: a reader sees old or new, never a mix)
``put_if_absent``  create a key only if it does not exist; exactly one racer wins (the
                   commit point of a checkpoint: its manifest)
``list``           every key under a prefix, with its size and modification time
``delete``         remove a key (a missing key is fine)
``stat``           size and modification time of one key, or None
=================  ======================================================================

Generic operations (``exists``, ``copy``, ``move``, ``names``: one level of a prefix)
are written once on top of the primitives.

The :class:`~ipy_resume.store.store.Store`, ``verify`` (:mod:`.audit`), ``gc``
(:mod:`.retention`), ``trust``, staged saves (:mod:`.pending`) and the journal address
what a store holds by these keys through ``store.backend``.  What only a local folder can do is a *capability* of the backend,
never a path the store computes:

=================  ======================================================================
``file_locks``     ``lock(exclusive=..., timeout=..., purpose=...)``: the ``flock`` that
                   makes saves (shared) and gc (exclusive) exclude each other; a backend
                   without it yields False, and gc falls back on its grace period (a
                   bucket's saves and gc use leases and markers instead, see remote.py)
``local_files``    ``local_path(key)``: the file behind a key, for what needs a file (the
                   local store maps blobs, checks manifests by inode and times, stages
                   temp files it renames into place, and keeps a SQLite journal: see
                   the README's architecture); ``leftovers()``: temp files interrupted
                   writes left; ``prune(prefixes)``: empty folders
``atomic_rename``  ``move`` is a rename (else a copy plus a delete)
=================  ======================================================================

``lock`` is also how a bucket's saves keep gc away: its shared lock is a *lease* (see
:func:`.leases.hold`), so ``Store.save`` takes ``backend.lock(exclusive=False, ...)`` on
every backend and never asks which one it has.

``identity(key)`` is what stands for the bytes of a key without reading them, and
``read_identified(key)`` its bytes together with that identity: a folder's file gives
(device, inode, size, mtime, ctime) from one ``fstat`` of the open file, a bucket's
object the entity tag its last listing carried.  The process-wide cache of verified
manifests (``Store.read_manifest``, docs/guarantees.md) is written once on these two, for a
folder and a bucket; a backend with no such identity (None) has every manifest read.
A folder's identity also stands for its entries: ``identity("manifests/<cell>/<key>")``
and ``identity("pending")`` change when a file is added, removed or renamed there.

``keys(prefix, depth)`` lists keys without what ``list`` reads per key (a local folder
is read with ``os.listdir``, no ``stat`` per file); ``listed(key)`` is a key as that
listing saw it, where it carries an entity tag (a bucket's manifest cache).

``prepare()`` readies a new store's place before its first write (makes the folder,
or checks that the bucket exists).

A group commit (the background writer publishing several manifests at once) passes
``put_if_absent(..., deferred=keys)``: the key is created, what is left to make it
durable (a folder's fsync) is noted in *keys*, and ``sync(keys)`` finishes it for all
of them at once, once per folder.  A backend whose puts are durable when they return
(an object store) has nothing to defer; its ``sync`` does nothing.

:class:`LocalBackend` is a folder, written through :mod:`.fsio` (temp file, fsync,
``os.replace``/``os.link``, folder fsync), so it keeps every guarantee the local store
gives.  The object-store implementation is :class:`.remote_backend.FsspecBackend`.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import os
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ipy_resume.store import fsio, lock

__all__ = ["Backend", "Identity", "LocalBackend", "ObjectInfo", "Sink"]

Sink = Callable[[int, memoryview], None]
"""Called with ``(offset, piece)`` as the pieces of a read arrive."""

Identity = tuple[Hashable, bool]
"""``(what stands for a key's bytes, settled)`` (see :meth:`Backend.identity`): equal
first parts mean equal bytes once *settled* is True."""

# A file whose status changed less than this long before it was read is compared by
# sha256 on its next read as well (it is not *settled*): a rewrite within one tick of the
# filesystem's clock can leave its identity unchanged.  Timestamps with sub-millisecond
# digits come from a clock that ticks at least every 10 ms (Linux's coarse clock at
# HZ >= 100; ns on APFS, 100 ns on NTFS); whole milliseconds or seconds may mean a coarse
# filesystem (FAT: 2 s).
_RACY_FINE_NS = 100_000_000
_RACY_NS = 2_000_000_000


_DOTS = frozenset({".", ".."})


def _ident(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled(st: os.stat_result) -> bool:
    return _settled_at(st.st_mtime_ns, st.st_ctime_ns, time.time_ns())


def _settled_at(mtime_ns: int, ctime_ns: int, now_ns: int) -> bool:
    """True when a file last changed at these times cannot change unseen any more.

    >>> _settled_at(1_000_000_001, 1_000_000_001, 9_000_000_000)
    True
    """
    fine = mtime_ns % 1_000_000 and ctime_ns % 1_000_000
    margin = _RACY_FINE_NS if fine else _RACY_NS
    return now_ns - max(mtime_ns, ctime_ns) > margin


def _read_fd(name: str) -> tuple[os.stat_result, bytes]:
    """The status and the whole content of file *name*, in four system calls (more when
    its size changed after its status was read)."""
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        first = os.read(fd, st.st_size + 1)
        if len(first) == st.st_size:  # the whole file, as its status said: no read of its end
            return st, first
        chunks = [first]
        while chunks[-1]:  # grown since the fstat (never for a committed manifest)
            chunks.append(os.read(fd, 1 << 16))
    finally:
        os.close(fd)
    return st, b"".join(chunks)


@dataclass(frozen=True)
class ObjectInfo:
    """One key of a backend: its ``size`` in bytes and ``modified`` time (epoch seconds).

    ``etag`` is the object store's entity tag where it lists one (S3, GCS, Azure), else "".
    """

    key: str
    size: int
    modified: float
    etag: str = ""

    def age(self, now: float | None = None) -> float:
        """Seconds since the object was last written.

        >>> ObjectInfo("k", 1, 100.0).age(now=160.0)
        60.0
        """
        return (time.time() if now is None else now) - self.modified


class Backend(abc.ABC):
    """Byte-level primitives under string keys; see the module docstring."""

    file_locks: bool = False
    """The store's folder can be ``flock``-ed (saves and gc exclude each other)."""
    atomic_rename: bool = False
    """Keys can be renamed atomically (else a move is a copy plus a delete)."""
    local_files: bool = False
    """Every key is a file of a local folder (:meth:`local_path`): blobs can be mapped,
    the journal is a SQLite file, saves can be staged to temp files, and interrupted
    writes leave temp files (:meth:`leftovers`) and empty folders (:meth:`prune`)."""

    url: str = ""
    """Where the backend points, for messages (never with credentials)."""

    @property
    def origin(self) -> str:
        """What a key is prefixed with to name it in messages and in a process-wide cache:
        ``url`` and a slash (a folder's: the folder and its separator, so that prefix and
        key spell the key's file)."""
        return self.url.rstrip("/") + "/"

    @abc.abstractmethod
    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of *key* (``[start, end)`` when given); FileNotFoundError if missing."""

    def read_into(self, key: str, out: memoryview, sink: Sink | None = None) -> int:
        """Fill *out* from the start of *key*; returns the number of bytes read.

        Reading stops at the end of *out* or of the object, whichever is first.  *sink*,
        when given, is called with ``(offset, piece)`` for every piece as it arrives
        (pieces may come out of order and from several threads): the blob cache fills
        its file while a large download is still running.
        """
        data = self.get(key, 0, len(out))
        out[: len(data)] = data
        if sink is not None:
            sink(0, out[: len(data)])
        return len(data)

    @abc.abstractmethod
    def put(self, key: str, chunks: Iterable[Any], size: int | None = None) -> None:
        """Write *key* as the concatenation of *chunks* (buffers), replacing it atomically."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes, *, deferred: set[str] | None = None) -> bool:
        """Create *key* with *data* unless it exists; True when this call created it.

        Durable when it returns, unless *deferred* is given: then *key* is added to it and
        is durable only after :meth:`sync` of that set.  An error means this call left no
        *key* behind (one it created but could not make durable is taken back).
        """

    def sync(self, deferred: Iterable[str]) -> None:  # noqa: B027 - optional hook
        """Make the keys created with ``put_if_absent(..., deferred=...)`` durable.

        Raises OSError when that fails; the caller then takes them back (``delete``).
        """

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every key under *prefix* (a folder-like prefix, ``""`` for all), any depth."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove *key*; a missing key is not an error."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """Size and modification time of *key*, or None when it does not exist."""

    # -- capabilities: what a backend can do beyond the primitives ------------------------

    def lock(
        self, *, exclusive: bool, timeout: float, purpose: str
    ) -> contextlib.AbstractContextManager[bool]:
        """The store lock (with :attr:`file_locks`), held for a ``with`` block.

        Yields True while a real lock is held; a backend without one yields False and
        the caller falls back on grace periods (gc) or leases (a bucket's saves).
        """
        return contextlib.nullcontext(False)

    def local_path(self, key: str) -> Path:
        """The file of *key* (with :attr:`local_files` only)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no local files")

    def local_paths(self, keys: Iterable[str]) -> builtins.list[Path]:
        """:meth:`local_path` of each of *keys* (keys a listing of this backend gave)."""
        return [self.local_path(k) for k in keys]

    def local_names(self, keys: Iterable[str]) -> builtins.list[str]:
        """:meth:`local_paths` as text (where a Path per key would cost more than its use)."""
        return [os.fspath(p) for p in self.local_paths(keys)]

    def temp_key(self, key: str) -> str:
        """A new key for a temporary file beside *key* (with :attr:`local_files` only)."""
        raise NotImplementedError(f"{type(self).__name__} stages nothing")

    def make_parents(self, key: str, dirs: set[Path] | None = None) -> None:
        """Make the folders of *key*'s file (with :attr:`local_files` only)."""
        raise NotImplementedError(f"{type(self).__name__} has no folders")

    def leftovers(self) -> Iterator[ObjectInfo]:
        """What interrupted writes left behind (temp files); never a key of :meth:`list`."""
        return iter(())

    def prune(self, prefixes: Iterable[str]) -> None:  # noqa: B027 - optional hook
        """Remove the empty folders below each of *prefixes* (where a backend has folders)."""

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Before a new store's first write: make its folder, or check that the bucket exists
        (raising a one-line error when it does not)."""

    def keys(self, prefix: str, depth: int) -> builtins.list[str]:
        """The keys exactly *depth* levels below *prefix*, in key order (``depth=1``: the
        keys right under it), without a size or time where listing would read one per key.

        >>> backend.keys("manifests", 3)  # doctest: +SKIP
        ['manifests/train/3f2a/0190ab.json']
        """
        level = prefix.count("/") + depth
        return [o.key for o in self.list(prefix) if o.key.count("/") == level]

    def listed(self, key: str) -> ObjectInfo | None:
        """*key* as the last :meth:`keys` saw it, where a listing carries what stands for
        an object's bytes (an entity tag): the manifest cache of a bucket.  None here."""
        return None

    def identity(self, key: str) -> Identity | None:
        """What stands for the bytes of *key* without reading them (see the module
        docstring), or None where the backend has nothing that does.

        FileNotFoundError when *key* is known to be gone.
        """
        return None

    def read_identified(self, key: str) -> tuple[bytes, Identity | None]:
        """The bytes of *key* and its :meth:`identity` as of that read."""
        return self.get(key), self.identity(key)

    def has_prefix(self, prefix: str) -> bool:
        """True when some key lies under *prefix* (a folder: when it exists)."""
        return any(True for _ in self.list(prefix))

    # -- generic operations, written once on the primitives -------------------------------

    def names(self, prefix: str) -> builtins.list[str]:
        """The names one level below *prefix* (``""``: the top), sorted, as ``os.listdir``."""
        base = prefix.rstrip("/") + "/" if prefix else ""
        return sorted({o.key[len(base) :].split("/", 1)[0] for o in self.list(prefix)})

    def exists(self, key: str) -> bool:
        """True when *key* exists."""
        return self.stat(key) is not None

    def copy(self, src: str, dst: str) -> None:
        """Copy *src* to *dst* (objects are small where this is used: manifests, quarantine)."""
        self.put(dst, [self.get(src)])

    def move(self, src: str, dst: str) -> None:
        """Copy then delete (a rename where the backend has one)."""
        self.copy(src, dst)
        self.delete(src)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads (optional)."""


class LocalBackend(Backend):
    """A folder; every write durable and atomic (see :mod:`.fsio`).

    >>> b = LocalBackend("/tmp/doc-backend")  # doctest: +SKIP
    >>> b.put_if_absent("manifests/x.json", b"{}"), b.put_if_absent("manifests/x.json", b"{}")
    (True, False)
    """

    file_locks = True
    atomic_rename = True
    local_files = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.url = os.fspath(self.root)
        self._top = os.path.join(self.url, "")

    def local_path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"bad key {key!r}")
        return self.root.joinpath(*parts)

    @property
    def origin(self) -> str:
        return self._top

    def file_name(self, key: str) -> str:
        """The file of *key* as text (:meth:`local_path` without the path object).

        >>> LocalBackend("/s").file_name("objects/ab/cd")
        '/s/objects/ab/cd'
        """
        return self._name(key)

    def _name(self, key: str) -> str:
        # local_path's check, as text: on the path of every hit, a pathlib join costs more
        # than the stat it is for
        if not key or key[0] == "/" or "//" in key or not _DOTS.isdisjoint(key.split("/")):
            raise ValueError(f"bad key {key!r}")
        return self._top + key if os.sep == "/" else os.path.join(self._top, *key.split("/"))

    def identity(self, key: str) -> Identity | None:
        try:
            st = os.stat(self._name(key))
        except FileNotFoundError:
            raise
        except NotADirectoryError:
            raise FileNotFoundError(key) from None
        return _ident(st), _settled(st)

    def read_identified(self, key: str) -> tuple[bytes, Identity | None]:
        st, data = _read_fd(self._name(key))
        return data, (_ident(st), _settled(st))

    def has_prefix(self, prefix: str) -> bool:
        return os.path.isdir(self._name(prefix))

    def local_paths(self, keys: Iterable[str]) -> builtins.list[Path]:
        return [Path(name) for name in self.local_names(keys)]

    def local_names(self, keys: Iterable[str]) -> builtins.list[str]:
        # joined as text (keys of this backend's own listing): a pathlib join per file
        # costs more than the listing
        top = self.url
        return [os.path.join(top, k) for k in keys]

    def temp_key(self, key: str) -> str:
        """A new key for a temporary file beside *key* (what a staged save writes first;
        :meth:`list` never lists it, :meth:`leftovers` does).

        >>> LocalBackend("/s").temp_key("objects/ab/cd").startswith("objects/ab/.tmp-cd-")
        True
        """
        folder, _, name = key.rpartition("/")
        temp = fsio.temp_name(name).name
        return f"{folder}/{temp}" if folder else temp

    def make_parents(self, key: str, dirs: set[Path] | None = None) -> None:
        """Make the folders *key*'s file goes in; new ones are fsynced, or with *dirs*
        added there for the caller to fsync before it publishes anything in them."""
        fsio.makedirs(self.local_path(key).parent, dirs=dirs)

    def lock(
        self, *, exclusive: bool, timeout: float, purpose: str
    ) -> contextlib.AbstractContextManager[bool]:
        return lock.hold(self.root, exclusive=exclusive, timeout=timeout, purpose=purpose)

    def names(self, prefix: str) -> builtins.list[str]:
        """Every entry one level below *prefix*, temp files included (unlike :meth:`list`)."""
        try:
            return sorted(os.listdir(self.local_path(prefix) if prefix else self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def keys(self, prefix: str, depth: int) -> builtins.list[str]:
        # folder by folder, each in name order, and no stat per file
        found: builtins.list[str] = []

        def walk(key: str, folder: str, level: int) -> None:
            try:
                names = sorted(os.listdir(folder))
            except (FileNotFoundError, NotADirectoryError):
                return
            for name in names:
                if level == depth:
                    if not fsio.is_temp_name(name):
                        found.append(f"{key}/{name}")
                else:
                    walk(f"{key}/{name}", os.path.join(folder, name), level + 1)

        walk(prefix, os.fspath(self.local_path(prefix)), 1)
        return found

    def leftovers(self) -> Iterator[ObjectInfo]:
        for here, _dirs, names in os.walk(self.root):
            for name in names:
                if fsio.is_temp_name(name):
                    path = Path(here) / name
                    with contextlib.suppress(OSError):
                        st = path.stat()
                        key = path.relative_to(self.root).as_posix()
                        yield ObjectInfo(key, st.st_size, st.st_mtime)

    def prepare(self) -> None:
        fsio.makedirs(self.root)

    def prune(self, prefixes: Iterable[str]) -> None:
        for prefix in prefixes:
            top = self.local_path(prefix)
            for folder, _dirs, _names in os.walk(top, topdown=False):
                if Path(folder) != top and _is_empty(folder):
                    fsio.remove_empty_dir(folder)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        with open(self.local_path(key), "rb") as f:
            if start:
                f.seek(start)
            if end is None:
                return f.read()
            return f.read(max(0, end - (start or 0)))

    def read_into(self, key: str, out: memoryview, sink: Sink | None = None) -> int:
        with open(self.local_path(key), "rb", buffering=0) as f:
            got = 0
            while got < len(out):
                n = f.readinto(out[got:])
                if not n:
                    break
                got += n
        if sink is not None:
            sink(0, out[:got])
        return got

    def put(self, key: str, chunks: Iterable[Any], size: int | None = None) -> None:
        path = self.local_path(key)
        fsio.makedirs(path.parent)
        with fsio.atomic_write(path) as f:
            for chunk in chunks:
                f.write(chunk)

    def put_if_absent(self, key: str, data: bytes, *, deferred: set[str] | None = None) -> bool:
        path = self.local_path(key)
        fsio.makedirs(path.parent)
        later: set[Path] = set()  # the folder fsync: now, or at sync()
        try:
            with fsio.atomic_write(path, exclusive=True, dirs=later) as f:
                f.write(data)
        except FileExistsError:
            return False
        if deferred is not None:
            deferred.add(key)
            return True
        try:
            for folder in later:
                fsio.fsync_dir(folder)
        except OSError:
            _withdraw(path, data)
            raise
        return True

    def sync(self, deferred: Iterable[str]) -> None:
        for folder in sorted({self.local_path(key).parent for key in deferred}):
            fsio.fsync_dir(folder)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        top = self.root / prefix if prefix else self.root
        found: list[ObjectInfo] = []
        for here, _dirs, names in os.walk(top):
            for name in names:
                if fsio.is_temp_name(name):
                    continue  # an interrupted write, not a key
                path = Path(here) / name
                with contextlib.suppress(FileNotFoundError):
                    st = path.stat()
                    key = path.relative_to(self.root).as_posix()
                    found.append(ObjectInfo(key, st.st_size, st.st_mtime))
        yield from sorted(found, key=lambda o: o.key)  # in key order, as object stores list

    def delete(self, key: str) -> None:
        fsio.remove(self.local_path(key))

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            st = self.local_path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def move(self, src: str, dst: str) -> None:
        target = self.local_path(dst)
        fsio.makedirs(target.parent)
        fsio.move(self.local_path(src), target)


def _withdraw(path: Path, data: bytes) -> None:
    """Take back a file just published but not known durable (its folder fsync failed), so
    that an error still means "nothing was created"; another writer's file stays."""
    try:
        if path.read_bytes() != data:
            return  # not ours
    except OSError:
        return
    # if it cannot be removed it is sound, merely not known to be durable
    with contextlib.suppress(OSError):
        fsio.remove(path)


def _is_empty(folder: str) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False
