"""The :class:`Store` façade: save, find and load checkpoints.

Layout of a store folder::

    store.json, store.backup.json        the format and base seed, with spare copies (info.py)
    journal.sqlite                       the timeline (journal.py), rebuilt from manifests if lost
    lock                                 the store lock (lock.py); its content is advisory
    objects/ab/cdef…                     content-addressed blobs (see blobs.py)
    manifests/<cell-dir>/<key>/<id>.json signed manifests, the commit records
    quarantine/                          blobs that failed verification

A save writes every blob durably first and the manifest last, with
``os.link`` so it never replaces another manifest: a crash at any instant
leaves either no new checkpoint (plus unreferenced blobs for ``gc``) or a
complete one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import platform
import re
import secrets
import sqlite3
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, Protocol

import numpy as np

from ipy_resume.runtime import modrefs
from ipy_resume.store import (
    background,
    blobs,
    codecs,
    info,
    lock,
    manifest,
    pending,
    retention,
    signing,
)
from ipy_resume.store.audit import Audit, refusal
from ipy_resume.store.audit import audit as audit_store
from ipy_resume.store.backend import Backend, LocalBackend
from ipy_resume.store.blobs import MAP_MIN, SHA256, XXH3, BlobStore, aligned_empty
from ipy_resume.store.fsio import (
    CorruptBlob,
    FormatTooNew,
    ManifestError,
    SaveError,
    StoreError,
    Untrusted,
)
from ipy_resume.store.journal import JOURNAL_FILE, RECOVERED, Journal, events_from_manifests
from ipy_resume.store.lock import StoreLocked
from ipy_resume.store.manifest import BlobRef, Manifest
from ipy_resume.store.results import Listed, SaveResult
from ipy_resume.store.retention import GcReport
from ipy_resume.store.snapshot import Snapshot

__all__ = ["PACK_TARGET", "PACK_VALUE_MAX", "DecodeError", "Linker", "SaveResult", "Store"]

# The layout of store.json (see info.py); manifests carry their own (manifest.FORMAT_VERSION).
STORE_FORMAT_VERSION = info.STORE_FORMAT_VERSION
PACK_VALUE_MAX = 1 << 20
"""Pickle streams smaller than this are packed together; larger ones get their own blob."""
PACK_TARGET = 16 << 20
"""A pack is closed (and a new one started) once it would grow past this."""
EXTRA_PREFIX = "extra:"
"""Prefix of an extra's name in ``failed`` (values are named as they are)."""
PEER_SAVE_WAIT = 120.0
"""Seconds a lookup waits for another live process's staged save of the same key
(a large save's bytes going to disk while its kernel restarts, say)."""
OWN_CHURN_RESCAN = 0.1
"""While this process's own saves are in flight, seconds between scans of ``pending/``
when the last scan found no other process's record (see :meth:`Store._settle_pending`)."""

_KEY = re.compile(r"[0-9A-Za-z_-]{1,200}")
# Below this many bytes in all, reading a checkpoint's blobs two at a time gains nothing.
_PREFETCH_MIN = 16 << 20
_VERIFY_HINT = "Run 'ipy-resume verify' to list others."
_ID_CACHE_SECONDS = 5.0
_READ_CACHE_MAX = 50_000


@dataclass
class _Verified:
    """A manifest verified in this process, and what identified its bytes then."""

    ident: Hashable  # backend.identity: a file's (dev, ino, size, mtime, ctime), an etag
    digest: bytes  # sha256 of the bytes that verified (or that this process signed)
    manifest: Manifest | None  # None: written here, parsed (not verified again) on first use
    # (a background commit's is parsed on the writer thread: see Store._remember)
    settled: bool  # the identity could not change unseen any more when it was read
    # published by this process, ident read right after (see Store.read_manifest: trusted once the
    # file has settled with that same identity)
    own: bool = False


# (where the manifest lives, trust id of the key it verified under) -> what was verified;
# shared by every Store of the process, so the panel's and the CLI helpers' reads reuse
# the magic's.  Where: its file, or the URL of the store and its key.
_verified: dict[tuple[str, bytes], _Verified] = {}


# key folder -> (its identity, the manifest files it held, settled): a hit lists the folder
# of its key again only when the folder changed (an entry added, removed or renamed)
_listed: dict[str, tuple[Hashable, tuple[PurePath, ...], bool]] = {}


# (blob, offset, length, member) -> the object those verified bytes decoded to, for extras
# a caller only reads (see Store.load_extras)
_decoded: dict[tuple[str, int, int | None, str | None], object] = {}
_DECODED_MAX = 256
_DECODED_BYTES = 1 << 16


def _reusable(ref: BlobRef) -> bool:
    return ref.kind == "pickle" and not ref.buffers and (ref.length or 0) <= _DECODED_BYTES


def forget_verified() -> None:
    """Drop every manifest this process verified, so the next reads verify them again.

    >>> forget_verified()
    """
    _verified.clear()
    _listed.clear()
    _decoded.clear()


class DecodeError(StoreError):
    """A verified value could not be rebuilt (e.g. its class no longer exists)."""


_versions_cache: dict[str, str] = {}


def _versions() -> dict[str, str]:
    if not _versions_cache:
        import cloudpickle

        # (not importlib.metadata: it scans every installed distribution, ~0.1 s in the
        # first save of every kernel; the package's version module is what it publishes)
        from ipy_resume.version import __version__ as own

        _versions_cache.update(
            python=platform.python_version(),
            numpy=np.__version__,
            cloudpickle=cloudpickle.__version__,
            ipy_resume=own,
        )
    if "h5py" not in _versions_cache and "h5py" in sys.modules:
        # h5py is named once it has been imported: any checkpoint with an HDF5 blob has
        # imported it before its manifest is built, and a kernel that saves no array
        # does not pay ~20 ms to import it for a line of `show`
        h5py = sys.modules["h5py"]
        _versions_cache.update(h5py=h5py.__version__, hdf5=h5py.version.hdf5_version)
    return dict(_versions_cache)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"checkpoint key must be 1-200 characters of [0-9A-Za-z_-], got {key!r}")


def _check_text(what: str, text: object) -> None:
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what} must be a non-empty string, got {text!r}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text, got {text!r}") from None


def _manifest_prefix(cell_id: str, key: str) -> str:
    """Where the manifests of (cell_id, key) are kept: ``manifests/<cell-dir>/<key>``."""
    return f"manifests/{manifest.cell_dir(cell_id)}/{key}"


def _check_cell_id(cell_id: str) -> None:
    _check_text("CELL_ID", cell_id)


class Linker(Protocol):
    """Objects of this process that other checkpoints stored: what keeps them shared.

    A token names one stored value, ``"<checkpoint id>/<name>"``.  ``ipy_resume.engine.sharing``
    implements this; the store only asks.
    """

    def candidates(self) -> dict[int, str]:
        """``id(obj)`` → token for every live object some checkpoint stored or restored."""
        ...

    def arrays(self) -> list[np.ndarray]:
        """The candidates that are arrays, whose views are kept as views."""
        ...

    def check(self, token: str) -> bool:
        """True while the object of *token* still equals what was stored (not mutated)."""
        ...

    def refs(self, token: str) -> dict[str, BlobRef]:
        """The blob refs needed to load *token* elsewhere: its own, plus its links."""
        ...

    def live(self, token: str) -> object:
        """The live, unchanged object of *token*, or :data:`MISSING`."""
        ...

    def digest(self, value: object) -> str | None:
        """The fingerprint to record for *value*, stored again as a holder (or None)."""
        ...

    def holders(self, members: set[int], reached: set[int] | None = None) -> dict[str, object]:
        """Names (bound now) whose stored values share one of *members*, or whose object is
        one of *reached* (ids of everything a new group holds)."""
        ...


MISSING: Any = object()
"""Returned by :meth:`Linker.live` when no live object can stand for a token."""


def token(checkpoint_id: str, name: str) -> str:
    """The name of one stored value for links: ``"<checkpoint id>/<name>"``.

    >>> token("0190ab", "box")
    '0190ab/box'
    """
    return f"{checkpoint_id}/{name}"


class Writer:
    """Turns the values of one save into blobs, tracking refs and bytes written."""

    def __init__(
        self, store: Any, touch: bool = False, verify: bool = False, defer: bool = False
    ) -> None:
        self.blobs = store
        # defer: blobs are kept in memory (address, chunks, size) for a later commit (see
        # Store.snapshot) instead of being written now
        self.deferred: list[tuple[str, list[Any], int]] | None = [] if defer else None
        self._queued: set[str] = set()
        self.touch = touch  # refresh the mtime of deduped blobs (no lock: gc's grace rule)
        # check blobs before reusing them (the save heals a checkpoint that failed to load)
        self.verify = verify
        self._sound: set[str] = set()  # blobs checked sound during this save
        self.bytes_written = 0
        self.current: PurePath | None = None  # the file being written, for error messages
        self.refs: dict[str, BlobRef] = {}
        self._pack: list[bytes] = []
        self._pack_size = 0
        self._pending: list[tuple[dict[str, str | None], int, int, tuple[BlobRef, ...]]] = []
        self.links: dict[str, BlobRef] = {}
        self.members: set[int] = set()
        # values of earlier checkpoints stored again with this one (see Linker.holders)
        self.added: dict[str, object] = {}

    def _put(self, address: str, chunks: Iterable[Any], size: int) -> None:
        if self.deferred is not None:
            if address not in self._queued:
                self._queued.add(address)
                # present already: nothing to keep (the commit checks again, under the lock)
                if not self.blobs.exists(address, size):
                    self.deferred.append((address, list(chunks), size))
            self._sound.add(address)
            return
        self.current = self.blobs.path(address)
        self.bytes_written += self.blobs.put(
            address, chunks, size, touch=self.touch, verify=self.verify
        )
        self._sound.add(address)
        self.current = None

    def sound(self, ref: BlobRef) -> bool:
        """True when the blob of *ref* may be referenced by this save (checked if healing)."""
        if ref.blob in self._sound:
            return True
        if not self.verify:
            return self.blobs.has(ref.blob)
        if self.blobs.check(ref.blob, ref.algo, ref.checksum, ref.size) is not None:
            return False
        self._sound.add(ref.blob)
        return True

    def add(self, slot: str, value: object) -> None:
        """Store *value* under *slot*; raises codecs.EncodeError when it cannot be serialised."""
        plan = codecs.plan_array(value)
        if plan is not None:
            self.add_array(slot, plan)
            return
        self._add_stream(slot, codecs.pickle_value(value))

    def add_array(self, slot: str, plan: codecs.ArrayPlan) -> None:
        """Store an array laid out by :func:`codecs.plan_array` as an HDF5 blob."""
        address = blobs.digest(XXH3, plan.chunks())
        self._put(address, plan.chunks(), plan.size)
        self.refs[slot] = BlobRef(
            "hdf5",
            address,
            XXH3,
            address,
            plan.size,
            offset=plan.offset,
            dtype=plan.dtype,
            shape=plan.shape,
            order=plan.order,
        )

    def add_group(
        self,
        values: dict[str, object],
        hdf5: dict[str, object],
        linker: Linker | None,
        this: str,
    ) -> dict[str, str]:
        """Pickle *values* (slot → value) as one group; returns the slots that failed.

        Objects that are values in *hdf5* (slot → array, stored already) or that *linker*
        knows are written as links; a value that cannot be pickled is left out, named.
        """
        own: dict[int, str] = {id(v): token(this, slot[2:]) for slot, v in hdf5.items()}
        # (this checkpoint's id is new: no candidate's token is one of its own)
        local = set(own.values())
        bases: list[Any] = [v for v in [*hdf5.values(), *values.values()] if type(v) is np.ndarray]
        if linker is not None:
            links = linker.candidates()  # (a new dict: ours to change)
            links.update(own)  # an array stored here is its own link
            bases.extend(linker.arrays())
        else:
            links = own

        def check(tok: str) -> bool:
            if tok in local:
                return True
            if linker is None or not linker.check(tok):
                return False
            # A link is only as good as the blobs it names: one quarantined since (or
            # deleted) means storing the object again.
            refs = linker.refs(tok).values()
            return all(self.sound(r) for ref in refs for r in ref.walk())

        failed: dict[str, str] = {}
        todo = dict(values)
        added: dict[str, object] = {}
        walked: codecs.Walk | None = None
        if linker is not None:
            # The earlier values that share what these hold, found first by a walk of what
            # they hold (a pickle of a figure costs ten times its walk): the first pickle
            # then has them already, instead of being thrown away for a second.
            added, walked = self._holders_first(todo, hdf5, links, linker, check)
            if added:
                inline = {id(obj) for obj in added.values()}
                links = {i: tok for i, tok in links.items() if i not in inline}
        group = self._pickle_group(todo, links, check, bases, failed, walked)
        if group is None:
            return failed
        if linker is not None and added:
            # Views copied here of memory an earlier value holds: stored as views of it.  (Of
            # memory inside this group the pickle kept them views already, unless the memory
            # is much larger than they are.)
            held_roots = [
                r
                for r in group.roots
                if (names := linker.holders({codecs.data_pointer(r)}))
                and (
                    r.nbytes > codecs.ROOT_SLACK_MIN
                    or any(f"v:{n}" not in todo and f"v:{n}" not in hdf5 for n in names)
                )
            ]
            if held_roots:
                bases = bases + held_roots
                group = self._pickle_group(todo, links, check, bases, failed) or group
        if linker is not None:
            # Values of earlier checkpoints that hold an object these values hold (a list
            # whose items this cell changed, a pipeline whose step it fitted, a frame
            # stored with a link to the index this cell renamed) are stored again with
            # them, so both names share that object after a restore too.  Then so are the
            # values that hold one of those (a dict stored with a link to that frame): each
            # comes back as a new object, and whatever held the old one must follow.
            asked = (group.members, group.reached)
            while True:
                holding = linker.holders(*asked)
                if not holding:
                    break
                linked = {i for i, tok in links.items() if tok in group.links}
                more = {
                    f"v:{name}": obj
                    for name, obj in holding.items()
                    if f"v:{name}" not in todo and f"v:{name}" not in hdf5 and id(obj) not in linked
                }
                if not more:
                    break
                todo.update(more)
                # A view of an array inside one of those values is stored as a view of it.
                held_roots = [r for r in group.roots if linker.holders({codecs.data_pointer(r)})]
                bases = bases + held_roots
                # ...and stored here, not linked: what they share with these values must be
                # the same objects in this group.
                inline = {id(obj) for obj in more.values()}
                links = {i: tok for i, tok in links.items() if i not in inline}
                regrouped = self._pickle_group(todo, links, check, bases, failed)
                if regrouped is None:
                    break
                # the next round asks only about what this one added
                asked = (regrouped.members - group.members, regrouped.reached - group.reached)
                group = regrouped
                added.update((slot[2:], obj) for slot, obj in more.items() if slot in todo)
            self.added = {name: obj for name, obj in added.items() if f"v:{name}" in todo}
        # What the values hold counts the objects they link to: a later cell that changes
        # one of those changes what these values hold (see Linker.holders).
        self.members = group.members | group.linked
        if linker is not None:
            for tok in sorted(group.links - local):
                self.links.update(linker.refs(tok))
        self._add_stream("", group, members=list(todo))
        return failed

    @staticmethod
    def _holders_first(
        todo: dict[str, object],
        hdf5: dict[str, object],
        links: dict[int, str],
        linker: Linker,
        check: Any,
    ) -> tuple[dict[str, object], codecs.Walk]:
        """Earlier values that share an object with *todo* (added to it), by walks only,
        and the last walk: of all of *todo*, which the group's pickle may take for its own.

        What the walks skip is what the pickle writes as links (the insides of unchanged
        earlier values); what they miss, the rounds after the pickle still find.  Each
        round walks all of *todo* (the values it added too), so that the last is the walk
        the pickle needs: the first is most often the last, and the values added are the
        larger part of the others (a figure that plotted the frame a cell changed).
        """
        found: dict[str, object] = {}
        tops = {id(v) for v in todo.values()}
        # every link but the values themselves that changed since they were stored
        skip = set(links)
        skip.difference_update([i for i in tops & skip if not check(links[i])])
        while True:
            walked = codecs.Walk.of(list(todo.values()), set(skip))
            more = {
                f"v:{name}": obj
                for name, obj in linker.holders(walked.held).items()
                if f"v:{name}" not in todo and f"v:{name}" not in hdf5
            }
            if not more:
                return found, walked
            todo.update(more)
            found.update((slot[2:], obj) for slot, obj in more.items())
            skip -= {id(obj) for obj in more.values()}

    @staticmethod
    def _pickle_group(
        todo: dict[str, object],
        links: dict[int, str],
        check: Any,
        bases: list[Any],
        failed: dict[str, str],
        walked: codecs.Walk | None = None,
    ) -> codecs.PickledGroup | None:
        """Pickle *todo* as one group; values that cannot be pickled move to *failed*."""
        while todo:
            try:
                return codecs.pickle_group(
                    {slot[2:]: v for slot, v in todo.items()}, links, check, bases, walked
                )
            except codecs.EncodeError as together:
                # Find the culprits one by one, so every other value is still stored.
                found = False
                for slot, value in list(todo.items()):
                    try:
                        codecs.pickle_group({slot: value}, links, check, bases)
                    except codecs.EncodeError as exc:
                        failed[slot] = str(exc)
                        del todo[slot]
                        found = True
                if not found:  # each alone pickles, together they do not: store none
                    failed.update(dict.fromkeys(todo, str(together)))
                    todo.clear()
        return None

    def _add_stream(
        self, slot: str, pickled: codecs.Pickled, members: list[str] | None = None
    ) -> None:
        """Store one pickle stream; *members* are the slots of a group sharing it."""
        buffers = []
        for buf in pickled.buffers:
            address = blobs.digest(XXH3, [buf])
            self._put(address, [buf], buf.nbytes)
            buffers.append(BlobRef("raw", address, XXH3, address, buf.nbytes))
        # slot → the member name inside the stream (None: the stream is the value itself)
        slots: dict[str, str | None] = (
            {slot: None} if members is None else {m: m[2:] for m in members}
        )
        stream = pickled.stream
        n = len(stream)
        if n >= PACK_VALUE_MAX:
            address = blobs.digest(SHA256, [stream])
            self._put(address, [stream], n)
            for name, member in slots.items():
                self.refs[name] = BlobRef(
                    "pickle",
                    address,
                    SHA256,
                    address,
                    n,
                    0,
                    n,
                    buffers=tuple(buffers),
                    member=member,
                )
            return
        if self._pack and self._pack_size + n > PACK_TARGET:
            self.flush()
        self._pending.append((slots, self._pack_size, n, tuple(buffers)))
        self._pack.append(stream)
        self._pack_size += n

    def flush(self) -> None:
        """Write the current pack and resolve the refs of the values in it."""
        if not self._pack:
            return
        address = blobs.digest(SHA256, self._pack)
        self._put(address, self._pack, self._pack_size)
        for slots, offset, length, buffers in self._pending:
            for slot, member in slots.items():
                self.refs[slot] = BlobRef(
                    "pickle",
                    address,
                    SHA256,
                    address,
                    self._pack_size,
                    offset,
                    length,
                    buffers=buffers,
                    member=member,
                )
        self._pack, self._pack_size, self._pending = [], 0, []


# Types of values that never hold an out-of-band buffer (their summary's "type").
_INLINE_TYPES = frozenset(
    {"int", "float", "complex", "bool", "str", "bytes", "NoneType", "module", "function", "type"}
)


def _path(
    ref: BlobRef, mapped: Callable[[BlobRef], bool], summary: Mapping[str, Any] | None = None
) -> str:
    """``"mapped"`` (an HDF5 array), ``"buffers mapped"`` (a pickled value that may hold
    large out-of-band buffers of its pickle, and they are mapped), or ``"read"``.

    Values pickled together share their buffers; *summary* (the manifest's summary of
    the value) rules out the ones too small, or of a type, to hold one.
    """
    if ref.kind == "hdf5":
        return "mapped" if mapped(ref) else "read"
    summary = summary or {}
    nbytes = summary.get("bytes")
    if summary.get("type") in _INLINE_TYPES or (isinstance(nbytes, int) and nbytes < MAP_MIN):
        return "read"
    return "buffers mapped" if any(mapped(b) for b in ref.buffers) else "read"


class Store:
    """A checkpoint store in folder *root* (created on first save).

    *key* is the signing key; None loads (or creates) the user's key with
    :func:`signing.load_or_create_key`.
    """

    lock_timeout: float = 120.0
    """Seconds a save waits for a running ``gc`` before giving up (values stay in memory)."""

    @property
    def stages_saves(self) -> bool:
        """Saves can be staged to local files and made durable in the background (with the
        backend's ``local_files``; a bucket's save goes up before the cell returns)."""
        return self.backend.local_files

    def __init__(
        self,
        root: str | os.PathLike[str],
        key: bytes | None = None,
        *,
        backend: Backend | None = None,
    ) -> None:
        self.root = Path(root)
        # store contents are addressed by key through this; see backend.py for the
        # capabilities (flock, local files) the local store builds on
        self.backend: Backend = LocalBackend(self.root) if backend is None else backend
        self._origin = self.backend.origin  # (a key's file, or its URL, is origin + key)
        # damage found and repaired, one line each, until said (see take_repairs)
        self.repairs: list[str] = []
        self._quarantined_info: list[str] = []
        self._said_journal = 0  # how many of the journal's quarantined files were said
        self.key = signing.load_or_create_key(notes=self.repairs) if key is None else bytes(key)
        local = self.backend if isinstance(self.backend, LocalBackend) else LocalBackend(self.root)
        self.blobs = BlobStore(local)  # (a bucket's store puts its own in its place)
        self._info: dict[str, Any] | None = None
        # (cell_id, key) -> damaged manifests of a checkpoint that failed to load: the
        # next save of that key checks every blob it would reuse and retires them
        self._suspect: dict[tuple[str, str], set[PurePath]] = {}
        self._journal: Journal | None = None
        self._id_cache: tuple[float, set[str]] | None = None  # (when listed, ids)
        self._by_prefix: tuple[set[str], int, dict[str, list[str]]] | None = None
        self._trust_of: tuple[bytes, bytes] | None = None  # (key, its trust id)
        # the pending/ folder as last looked at, and when: see _settle_pending
        self._pending_seen: Hashable = None
        self._pending_checked = 0.0
        # staged saves of dead writers that could not be finished, by checkpoint id (why):
        # the engine says each once, so a lost save is never silent
        self.abandoned: dict[str, str] = {}
        self._pending_live: list[str] = []  # other live writers' records, as last scanned
        self._pending_others = True  # the last scan found another process's record

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.location)!r})"

    def _trust(self) -> bytes:
        """An id of the signing key: what was verified under one key is not under another."""
        key = self.key
        if self._trust_of is None or self._trust_of[0] != key:
            self._trust_of = (key, hashlib.sha256(b"ipy_resume trust\0" + key).digest())
        return self._trust_of[1]

    @property
    def location(self) -> Path | str:
        """Where the store lives: its folder, or the URL of an object store.

        >>> Store("/tmp/doc-store").location
        PosixPath('/tmp/doc-store')
        """
        return self.root if self.backend.local_files else self.backend.url

    def exists(self) -> bool:
        """True once the store has been created (a first save, or ``store.json``)."""
        return self.backend.exists(info.FILE) or self.backend.has_prefix("manifests")

    @staticmethod
    def created_at(root: Path) -> bool:
        """:meth:`exists` of the local store at *root*, without opening it (no key is read).

        >>> Store.created_at(Path("/nonexistent"))
        False
        """
        return LocalBackend(root).exists(info.FILE) or Store.has_checkpoints_at(root)

    @staticmethod
    def has_checkpoints_at(root: Path) -> bool:
        """True when the local store at *root* may hold checkpoints (it has saved one, or
        staged one that a dead kernel left for the next reader to finish).

        >>> Store.has_checkpoints_at(Path("/nonexistent"))
        False
        """
        backend = LocalBackend(root)
        return backend.has_prefix("manifests") or backend.has_prefix(pending.FOLDER)

    # -- store.json ----------------------------------------------------------

    @property
    def seed_base(self) -> int:
        """The per-store base seed (creates the store folder and ``store.json`` if needed)."""
        return int(self._store_info()["seed_base"])

    def _store_info(self) -> dict[str, Any]:
        if self._info is None:
            self._info = self._resolve_info(heal=True)
        return self._info

    def info_copies(self) -> tuple[info.Copy, info.Copy]:
        return self._info_copy(info.FILE), self._info_copy(info.BACKUP)

    def _info_copy(self, name: str) -> info.Copy:
        try:
            data = self.backend.get(name)
        except FileNotFoundError:
            return info.Copy(name, "missing")
        except OSError as exc:
            if isinstance(exc, StoreError):
                raise  # the store cannot be reached (a bucket's error): not damage
            return info.unreadable(name, exc)
        return info.decode_copy(name, data)

    def _resolve_info(self, *, heal: bool) -> dict[str, Any]:
        """The store's info from its first sound copy; with *heal*, damaged copies rewritten.

        See :mod:`ipy_resume.store.info`: ``store.json``, then its backup (either may be
        read from a spare copy inside it), then the base seed the manifests carry; a new
        store gets a new random one.  A copy that cannot be read at all is moved to
        ``quarantine/`` before it is written again, and what was repaired is said once
        (:meth:`take_repairs`).
        """
        copies = self.info_copies()
        doc = info.first_doc(copies, str(self.location))
        first = next((c for c in copies if c.doc is not None), None)
        origin = ""
        if first is not None:
            origin = first.name if first.state != "mended" else f"a spare copy in {first.name}"
        if doc is None and self.backend.names("manifests"):
            doc = info.recover((m.created, m.seed_base) for m in self.manifests())
            origin = "the manifests' copy of the base seed" if doc is not None else ""
        if not heal:
            return doc if doc is not None else {}
        if doc is None:
            # a new store, or one whose every copy of the seed is lost: a new seed
            doc = self._new_info(copies)
            origin = "" if all(c.state == "missing" for c in copies) else "a new base seed"
        wanted = info.encode(doc)
        rebuilt: list[str] = []
        for copy in copies:
            if copy.data == wanted or copy.state == "denied":
                continue
            # A read-only store still works; the copy is written by the next writer.
            with contextlib.suppress(OSError, StoreError), self._writing_info():
                self._quarantine_info(copy)
                self.backend.put(copy.name, [wanted])
                rebuilt.append(copy.name)
        self._say_info_repaired(copies, rebuilt, origin)
        return dict(doc)

    def _new_info(self, copies: tuple[info.Copy, ...]) -> dict[str, Any]:
        """Create ``store.json`` with a new base seed (the damaged copies moved aside first);
        the winner's document when another process created it meanwhile."""
        denied = next((c for c in copies if c.state == "denied"), None)
        try:
            if denied is not None:  # (it may be sound: never replace what we cannot read)
                raise PermissionError(errno.EACCES, denied.problem)
            self.backend.prepare()
            with self._writing_info():
                for copy in copies:
                    self._quarantine_info(copy)
                self.backend.put_if_absent(info.FILE, info.encode(info.new(manifest.now_iso())))
        except OSError as exc:
            damaged = [f"{c.name} {c.problem}" for c in copies if c.state == "damaged"]
            if isinstance(exc, StoreError) or not (damaged or denied):
                raise  # a new store that cannot be made: the caller says so (a save's error)
            hint = "; check the folder's permissions" if info.permission_denied(exc) else ""
            what = f"{' and '.join(damaged)}, and it " if damaged else ""
            raise ManifestError(
                f"{info.FILE} in {self.location}: {what}could not be created "
                f"({exc.strerror or exc}){hint}",
                path=info.FILE,
            ) from exc
        primary = self._info_copy(info.FILE)  # another process may have won
        if primary.doc is None:
            # (only another process's bytes can be here: ours are sound, or we raised)
            raise ManifestError(
                f"{info.FILE} in {self.location} was replaced while it was being created "
                f"and {primary.problem or 'is ' + primary.state}; it is rebuilt when the "
                "store is next used",
                path=info.FILE,
            )
        return primary.doc

    def _quarantine_info(self, copy: info.Copy) -> None:
        """Move *copy* to ``quarantine/`` when it could not be read at all and is still the
        bytes judged so (another process may have rebuilt it since): never deleted."""
        if copy.state != "damaged":
            return
        if self._info_copy(copy.name).data != copy.data:
            return  # rebuilt or removed meanwhile
        stamp = f"{int(time.time() * 1000)}.{secrets.token_hex(3)}"
        target = f"{blobs.QUARANTINE}/{copy.name}.{stamp}"
        with contextlib.suppress(FileNotFoundError):
            self.backend.move(copy.name, target)
            self._quarantined_info.append(target)

    def _say_info_repaired(
        self, copies: tuple[info.Copy, ...], rebuilt: list[str], origin: str
    ) -> None:
        """Remember, in one line, which copies were damaged or lost and how they were rebuilt."""
        used = any(c.state in ("ok", "mended") for c in copies) or origin.startswith("the")
        bad = []
        for c in copies:
            if c.name not in rebuilt:
                continue
            if c.state in ("damaged", "mended"):
                bad.append(f"{c.name} {c.problem}")
            elif c.state == "missing" and used:  # (a legacy store never had a backup)
                bad.append(f"{c.name} was missing")
        if not bad:
            return
        moved = f" (moved to {', '.join(self._quarantined_info)})" if self._quarantined_info else ""
        if origin == "a new base seed":
            how = (
                "no copy of the base seed was left, so a new one was made: default seeds "
                "change and the store's checkpoints execute again once"
            )
        else:
            how = f"rebuilt from {origin}; the base seed is unchanged"
        self._quarantined_info = []
        self.repairs.append(f"the store {self.location}: {' and '.join(bad)}{moved}; {how}")

    def take_repairs(self) -> list[str]:
        """The damage this store found and repaired since last asked, one line each: its
        ``store.json`` copies, its journal and the signing key.

        >>> Store("/tmp/doc-store").take_repairs()
        []
        """
        said, self.repairs = self.repairs, []
        journal = self._journal
        moved = [*getattr(journal, "quarantined", [])][self._said_journal :]
        if moved:
            self._said_journal += len(moved)
            said.append(
                f"the store {self.location}: {JOURNAL_FILE} was damaged (moved to "
                f"{', '.join(moved)}); "
                "the timeline was rebuilt from the manifests; the restores and failed runs "
                "it recorded are lost, no checkpoint is"
            )
        return said

    def _writing_info(self) -> contextlib.AbstractContextManager[bool]:
        # under the shared lock: gc must not take our temp file for a leftover (a bucket
        # has no temp files, and its lease would cost three requests per copy written)
        if not self.backend.file_locks:
            return contextlib.nullcontext(False)
        return self.backend.lock(exclusive=False, timeout=self.lock_timeout, purpose="save")

    # -- paths ---------------------------------------------------------------

    def _rel(self, path: PurePath | str | None) -> str:
        """The key of *path* (a file of the store, or a key already)."""
        if path is None:
            return str(self.location)
        name = os.fspath(path)
        if name.startswith(self._origin):  # (as text: this is on the path of every hit)
            rel = name[len(self._origin) :]
            return rel if os.sep == "/" else rel.replace(os.sep, "/")
        return name  # a bucket's key already (or a file outside the store)

    def healing(self, cell_id: str, key: str) -> bool:
        """True when the next save of (cell_id, key) replaces a checkpoint that failed to
        load: it checks every blob it reuses, so it is not left to the background writer."""
        return (cell_id, key) in self._suspect

    def path_of(self, key: str) -> PurePath:
        """What a manifest read from *key* carries as ``path``: its file, or (in a bucket)
        the key itself.

        >>> Store("/tmp/s").path_of("manifests/train/k/0190ab.json")
        PosixPath('/tmp/s/manifests/train/k/0190ab.json')
        """
        if self.backend.local_files:
            return self.backend.local_path(key)
        return PurePosixPath(key)

    def blob_path(self, address: str) -> PurePath:
        """The file of blob *address*."""
        return self.blobs.path(address)

    # -- saving --------------------------------------------------------------

    def save(
        self,
        cell_id: str,
        key: str,
        values: Mapping[str, object],
        *,
        extras: Mapping[str, object] | None = None,
        info: Mapping[str, Any] | None = None,
        complete: bool = True,
        linker: Linker | None = None,
    ) -> SaveResult:
        """Store *values* and *extras* as a new checkpoint of (cell_id, key).

        Values that share objects (one object under two names, a view of another
        value's array, an object inside another value) are stored so that they share
        them again when loaded; with a *linker*, so are objects that other checkpoints
        stored, as long as they have not changed since.

        A value that cannot be pickled is left out and reported in
        ``SaveResult.failed`` (an extra as ``"extra:<name>"``); the checkpoint
        is then incomplete, as it is with ``complete=False``.  An OS error
        raises :class:`SaveError`; nothing is committed then.
        """
        _check_cell_id(cell_id)
        _check_key(key)
        extras = {} if extras is None else extras
        info_doc = dict(info or {})
        try:
            manifest.canonical_json(info_doc)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"info must be JSON-serialisable: {exc}") from exc
        for name in [*values, *extras]:
            _check_text("a value name", name)

        suspect = self._suspect.get((cell_id, key))
        writer = Writer(self.blobs, verify=suspect is not None)
        ident = manifest.new_checkpoint_id()
        try:
            # A copy of the base seed goes into every manifest: with both store.json
            # copies lost, the seeds (and so every key) are rebuilt from the manifests.
            seed_base = self.seed_base
            # Shared with other saves, exclusive of gc: from the first "this blob exists,
            # skip it" to the committed manifest, no gc may delete what we rely on.
            with self._saving() as locked:
                writer.touch = not locked
                m, failed = self._build(
                    writer, ident, cell_id, key, values, extras, info_doc, complete, linker
                )
                m.seed_base = seed_base
                m.bytes_written = writer.bytes_written
                manifest_bytes = self.commit_manifest(m, writer)
                if suspect is not None:
                    self.heal(m, suspect)
        except StoreLocked as exc:
            raise self.locked_error(cell_id, exc) from exc
        except OSError as exc:
            raise self.save_error(cell_id, exc, writer.current) from exc
        return SaveResult(
            m, failed, writer.bytes_written + manifest_bytes, sorted(writer.added), writer.members
        )

    def snapshot(
        self,
        cell_id: str,
        key: str,
        values: Mapping[str, object],
        *,
        extras: Mapping[str, object] | None = None,
        info: Mapping[str, Any] | None = None,
        complete: bool = True,
        linker: Linker | None = None,
    ) -> Snapshot:
        """Serialise a save of *values* to memory now; write it later with ``commit``.

        Everything :meth:`save` decides (what is stored, what links where, the
        manifest and its id) is decided here, and nothing is written: pickles are
        kept as bytes, and the blobs still to be written keep views of the live
        arrays until :meth:`Snapshot.stage` hands them to the OS.  Blobs found
        present now are not kept; the commit checks again, under the lock, that
        they still are.

        >>> snap = store.snapshot("train", key, {"model": model})  # doctest: +SKIP
        >>> snap.stage(); snap.commit().manifest.id  # doctest: +SKIP
        """
        _check_cell_id(cell_id)
        _check_key(key)
        extras = {} if extras is None else extras
        # (whether it is JSON is told by the manifest's encoding, in stage: a whole encoding
        # of it here cost a small save more than its pickles)
        info_doc = dict(info or {})
        for name in [*values, *extras]:
            _check_text("a value name", name)
        writer = Writer(self.blobs, defer=True)
        # The shared lock is held from here, where blobs found present are left out
        # (dedup), to the commit (Snapshot.release): a gc cannot remove one in between.
        held = contextlib.ExitStack()
        try:
            seed_base = self.seed_base
            held.enter_context(
                self.backend.lock(exclusive=False, timeout=self.lock_timeout, purpose="save")
            )
            m, failed = self._build(
                writer,
                manifest.new_checkpoint_id(),
                cell_id,
                key,
                values,
                extras,
                info_doc,
                complete,
                linker,
            )
        except lock.StoreLocked as exc:
            held.close()
            raise self.locked_error(cell_id, exc) from exc
        except OSError as exc:
            held.close()
            raise self.save_error(cell_id, exc, writer.current) from exc
        except BaseException:
            held.close()
            raise
        m.seed_base = seed_base
        suspect = self._suspect.get((cell_id, key))
        return Snapshot(self, m, writer, failed, suspect, held=held)

    def _build(
        self,
        writer: Writer,
        ident: str,
        cell_id: str,
        key: str,
        values: Mapping[str, object],
        extras: Mapping[str, object],
        info_doc: dict[str, Any],
        complete: bool,
        linker: Linker | None,
    ) -> tuple[Manifest, dict[str, str]]:
        """Turn *values* and *extras* into blobs (through *writer*) and the manifest."""
        failed: dict[str, str] = {}
        for slot, reason in self._write_values(writer, values, linker, ident).items():
            failed[slot[2:]] = reason
        for name, value in extras.items():
            try:
                writer.add(f"x:{name}", value)
            except codecs.EncodeError as exc:
                failed[EXTRA_PREFIX + name] = str(exc)
        writer.flush()
        names = [*values, *(n for n in writer.added if n not in values)]
        if writer.added and linker is not None:
            # so their fingerprints survive a restore like the cell's own values'
            recorded = dict(info_doc.get("fingerprints") or {})
            for name in writer.added:
                digest = linker.digest(writer.added[name])
                if digest is not None:
                    recorded[name] = digest
            info_doc["fingerprints"] = recorded
        value_refs = {n: writer.refs[f"v:{n}"] for n in names if f"v:{n}" in writer.refs}
        extra_refs = {n: writer.refs[f"x:{n}"] for n in extras if f"x:{n}" in writer.refs}
        m = Manifest(
            id=ident,
            cell_id=cell_id,
            key=key,
            created=manifest.now_iso(),
            complete=bool(complete) and not failed,
            values=value_refs,
            extras=extra_refs,
            failed=dict(failed),
            info=info_doc,
            versions=_versions(),
            bytes=0,
            bytes_written=0,
            links=dict(sorted(writer.links.items())),
            seed_base=None,
        )
        m.bytes = sum(r.size for r in m.blob_refs())
        return m, failed

    def locked_error(self, cell_id: str, exc: StoreLocked) -> StoreLocked:
        cell = " ".join(cell_id.split())
        return StoreLocked(
            f"could not save checkpoint '{cell}': {exc} Nothing was committed and the "
            "values are still in memory; run the cell again once the store is free.",
            path=exc.path,
        )

    @contextlib.contextmanager
    def _saving(self) -> Iterator[bool]:
        """Held from the first "this blob exists, skip it" to the committed manifest.

        Shared with other saves, exclusive of gc, so no gc deletes what a save relies on
        (a folder's ``flock``, a bucket's lease: see backend.py); yields whether a real
        lock is held.
        """
        with self.backend.lock(
            exclusive=False, timeout=self.lock_timeout, purpose="save"
        ) as locked:
            self.blobs.ready()
            yield locked

    @staticmethod
    def _write_values(
        writer: Writer, values: Mapping[str, object], linker: Linker | None, ident: str
    ) -> dict[str, str]:
        """Top-level arrays that own their memory as HDF5 blobs, the rest as one group."""
        owners: set[int] = set()
        if linker is not None:
            owners.update(codecs.data_pointer(a) for a in linker.arrays())
        for value in values.values():
            if type(value) is np.ndarray and not isinstance(value.base, np.ndarray):
                owners.add(codecs.data_pointer(value))
        # A value that is all of a memory it does not own (``a.reshape(m, n)``) stands for
        # that memory: the other views of it are stored as views of that value.  Not when
        # an array that owns it is stored too, here or by an earlier checkpoint: a view of
        # that one (``new_colors.reshape(h, w, 3)``) is stored as its view.
        whole: dict[int, int] = {}  # memory address -> id of the value standing for it
        for name in sorted(values):
            if codecs.whole_view(value := values[name]):
                assert isinstance(value, np.ndarray)  # (for the type checker)
                if (address := codecs.data_pointer(value)) not in owners:
                    whole.setdefault(address, id(value))
        owners.update(whole)
        # memories that several values view and no value owns (``x, y = draws.T``): the
        # group stores each once, and those values as views of it
        owners.update(codecs.sibling_roots(values.values()))
        hdf5: dict[str, object] = {}
        group: dict[str, object] = {}
        seen: set[int] = set()
        for name in sorted(values):
            value, slot = values[name], f"v:{name}"
            shared = id(value) in seen or (
                type(value) is np.ndarray
                and isinstance(value.base, np.ndarray)
                and (address := codecs.data_pointer(codecs.array_root(value))) in owners
                and whole.get(address) != id(value)
            )
            seen.add(id(value))
            if not shared and linker is not None and type(value) is np.ndarray:
                shared = bool(linker.holders({id(value)}))  # inside an earlier value
            plan = None if shared else codecs.plan_array(value)
            where = modrefs.lookup(value) if plan is None else None
            if where is not None:
                group[slot] = codecs.ModuleAttribute(*where)
            elif plan is None:
                group[slot] = value
            else:
                writer.add_array(slot, plan)
                hdf5[slot] = value
        if not group:
            return {}
        return writer.add_group(group, hdf5, linker, ident)

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
        prefix = _manifest_prefix(m.cell_id, m.key)
        for _attempt in range(20):
            key = f"{prefix}/{m.id}.json"
            data = manifest.encode(m, self.key) if encoded is None else encoded
            writer.current = self.path_of(key)
            # An error leaves no manifest (one published but not durable is taken back),
            # so "nothing was committed" in the error message stays true.
            if not self.backend.put_if_absent(key, data, deferred=deferred):
                m.id = manifest.new_checkpoint_id()  # same id from another writer, same ms
                encoded = None
                continue
            m.path, writer.current = writer.current, None
            self._remember(m.path, data, parse=quiet)
            if not quiet:
                self._note_id(m.id)
            return len(data)
        raise OSError(errno.EEXIST, "could not find a free checkpoint id", prefix)

    def publish_recovered(self, m: Manifest, data: bytes) -> None:
        """Publish *m*, verified from *data*, whose blobs are durable (a dead writer's save).

        Raises :class:`FileExistsError` when it is published already (another process
        finished the same commit first).  See :mod:`ipy_resume.store.pending`.
        """
        key = f"{_manifest_prefix(m.cell_id, m.key)}/{m.id}.json"
        if not self.backend.put_if_absent(key, data):
            raise FileExistsError(errno.EEXIST, "published already", key)
        m.path = self.path_of(key)

    def settle_pending(self) -> None:
        """Finish the staged saves of kernels that died, and add their timeline events,
        as every read of checkpoints does first: for readers of the timeline alone.

        >>> Store("/tmp/doc-store").settle_pending()  # doctest: +SKIP
        """
        self._settle_pending()

    def _settle_pending(self) -> None:
        """Before reading: finish the staged saves of kernels that died (see pending.py).

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
            seen = self.backend.identity(pending.FOLDER)
        except OSError:
            return
        if seen is None:
            return  # (nothing is staged where saves are not: a bucket)
        now = time.monotonic()
        since = now - self._pending_checked
        if since < 1.0 and (
            seen[0] == self._pending_seen
            or (since < OWN_CHURN_RESCAN and not self._pending_others and pending.own_in_flight())
        ):
            return
        self._pending_checked = now
        done = pending.recover(self)
        self.abandoned.update(done.abandoned)
        self._pending_live = done.live
        self._pending_others = done.others > 0
        with contextlib.suppress(OSError):
            seen = self.backend.identity(pending.FOLDER) or seen
        self._pending_seen = seen[0]
        if done.finished:
            self._id_cache = None
            self._note_recovered(done.finished)

    def _note_recovered(self, ids: list[str]) -> None:
        """Timeline events for the saves finished on behalf of a dead kernel."""
        wanted = set(ids)
        paths = [p for p in self._manifest_paths() if p.name[:-5] in wanted]
        recovered = list(self._verified(paths))
        try:
            journal = self.journal()
            for event in events_from_manifests(recovered, detail=RECOVERED):
                if event.event_id.startswith("rebuilt-"):  # (saved before manifests had stamps)
                    # (not the stand-in's id: append replaces a stand-in of the same checkpoint)
                    event.event_id = f"recovered-{event.checkpoint_id}"
                journal.append(event)
        except (OSError, sqlite3.Error):
            pass  # the timeline misses a row; the checkpoints themselves are whole

    # -- healing ---------------------------------------------------------------

    def heal(self, new: Manifest, suspect: set[PurePath]) -> None:
        """After a save that replaced a checkpoint which failed to load: retire the rest.

        Manifests of the key that are damaged, or whose blobs are gone (quarantined
        when their load failed, and not written again because the cell produced other
        bytes this time), are moved to quarantine/: the new checkpoint stands for them,
        and ``verify`` is clean again without a manual step.
        """
        self._suspect.pop((new.cell_id, new.key), None)
        if not new.complete:
            return  # keep the evidence until a complete checkpoint replaces it
        retire: list[PurePath] = []
        for path in self._manifest_paths(_manifest_prefix(new.cell_id, new.key)):
            if path == new.path:
                continue
            try:
                old = self.read_manifest(path)
            except (FileNotFoundError, FormatTooNew, Untrusted):
                continue
            except StoreError:
                retire.append(path)
                continue
            if not all(self.blobs.exists(r.blob, r.size) for r in old.blob_refs()):
                retire.append(path)
        self._retire(retire)

    def _retire(self, paths: Iterable[PurePath]) -> None:
        """Move manifests that can never be restored to quarantine/ (gc deletes them)."""
        for path in paths:
            key = self._rel(path)
            name = f"{key.replace('/', '.')}.{int(time.time() * 1000)}.{secrets.token_hex(3)}"
            with contextlib.suppress(OSError, StoreError):
                self.backend.move(key, f"{blobs.QUARANTINE}/{name}")

    def _sweep(self, m: Manifest) -> None:
        """A blob of *m* failed: check all of them, quarantine every bad one.

        So the re-execution that follows writes every damaged blob again, and the
        checkpoint is whole after one run however many of its files were hit.
        """
        self._suspect.setdefault((m.cell_id, m.key), set())
        for ref in m.blob_refs():
            problem = self.blobs.check(ref.blob, ref.algo, ref.checksum, ref.size)
            if problem is not None and problem != "is missing":
                self.blobs.quarantine(ref.blob)

    def _sweeping(self, m: Manifest) -> _Sweeping:
        return _Sweeping(self, m)

    def save_error(self, cell_id: str, exc: OSError, where: PurePath | None) -> SaveError:
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
        if not self.backend.local_files:
            return SaveError(
                f"could not save checkpoint '{cell}': {reason} while writing {self._rel(where)} "
                f"in {self.location}; nothing was committed and the values are still in memory. "
                "Check the store, then run the cell again.",
                path=self._rel(where),
            )
        if code:
            reason = f"{reason} ({code})"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = "Free some disk space (or run 'ipy-resume gc'), then run the cell again."
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            hint = f"Make {os.fspath(self.root)} writable, then run the cell again."
        else:
            hint = "Check the disk, then run the cell again."
        return SaveError(
            f"could not save checkpoint '{cell}': {reason} while writing {self._rel(where)}; "
            f"nothing was committed and the values are still in memory. {hint}",
            path=self._rel(where),
        )

    # -- finding -------------------------------------------------------------

    def read_manifest(self, path: PurePath, quick: bool = False) -> Manifest:
        """The verified manifest at *path*.

        A manifest verified before in this process (under this key) is not verified
        again while it holds the same bytes (compared by sha256: cheaper than parsing
        and verifying again).  With *quick* (finding, listing), the backend's identity
        of the manifest stands for its bytes (:meth:`Backend.identity`): a file's device,
        inode, size, mtime and ctime, once it had not changed for a while (0.1 s, or 2 s
        where timestamps are coarse); a bucket's entity tag as listed.  While it is the
        one seen when the manifest was verified, it is not even read.  See
        docs/guarantees.md for what that trusts.
        """
        rel = self._rel(path)
        slot = (self._origin + rel, self._trust())
        known = _verified.get(slot)
        backend = self.backend
        if (
            quick
            and known is not None
            and (known.settled or known.own)
            and known.manifest is not None
        ):
            try:
                seen = backend.identity(rel)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise self._unreadable(rel, exc) from None
            if seen is not None and seen[0] == known.ident:
                if known.settled:
                    return known.manifest
                if seen[1]:
                    # This process wrote these bytes, and the file has kept the identity
                    # it had right after, until it could no longer change unseen: only a
                    # rewrite to the same size within the clock tick of the publish could
                    # hide (ipy_resume never rewrites a published manifest).
                    _verified[slot] = _Verified(known.ident, known.digest, known.manifest, True)
                    return known.manifest
        try:
            data, seen = backend.read_identified(rel)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._unreadable(rel, exc) from None
        digest = hashlib.sha256(data).digest()
        if known is not None and known.digest == digest:
            m = known.manifest if known.manifest is not None else self._own(data, path, rel)
        else:
            m = manifest.decode(data, self.key, rel=rel, store=str(self.location), path=path)
        if len(_verified) >= _READ_CACHE_MAX:
            _verified.clear()
        # (no identity: never settled, so the bytes are read every time, and verified
        # again only when they differ)
        ident, settled = (None, False) if seen is None else seen
        _verified[slot] = _Verified(ident, digest, m, settled)
        return m

    @staticmethod
    def _unreadable(rel: str, exc: OSError) -> StoreError:
        if isinstance(exc, StoreError):
            return exc  # the store cannot be reached (a bucket's error), said already
        return ManifestError(
            f"checkpoint manifest {rel} cannot be read ({exc.strerror or exc}); the cell will "
            "execute again. Check the file's permissions.",
            path=rel,
        )

    def _own(self, data: bytes, path: PurePath, rel: str) -> Manifest:
        """Parse manifest bytes this process signed itself (their sha256 was checked)."""
        try:
            return Manifest.from_json(json.loads(data), path)
        except ValueError:  # cannot happen for bytes manifest.encode made: verify them
            return manifest.decode(data, self.key, rel=rel, store=str(self.location), path=path)

    def _remember(self, path: PurePath, data: bytes, parse: bool = False) -> None:
        """Note manifest bytes this process just signed and published at *path*.

        With *parse* (a commit on the background writer, off the kernel's thread), they
        are parsed now, so the first hit of the checkpoint does not parse them: it still
        reads the file and compares its bytes with these by sha256 before using them.
        """
        rel = self._rel(path)
        try:
            seen = self.backend.identity(rel)
        except OSError:
            return
        parsed = None
        if parse:
            try:
                parsed = self._own(data, path, rel)
            except Exception:  # (the first read parses them instead: the commit stands)
                parsed = None
        if len(_verified) >= _READ_CACHE_MAX:
            _verified.clear()
        # not settled: the first read compares the bytes once (a bucket's new object has
        # no listed identity yet)
        _verified[(self._origin + rel, self._trust())] = _Verified(
            None if seen is None else seen[0], hashlib.sha256(data).digest(), parsed, False, True
        )

    def _manifest_paths(self, prefix: str = "manifests") -> list[PurePath]:
        """The manifests under *prefix* (``manifests``, a cell's or a key's folder), as the
        ``path`` a manifest read from them carries (see :meth:`path_of`), in key order."""
        # manifests/<cell-dir>/<key>/<id>.json, whatever level the listing starts at
        depth = 3 - prefix.count("/")
        keys = [k for k in self.backend.keys(prefix, depth) if k.endswith(".json")]
        if not self.backend.local_files:
            return [PurePosixPath(k) for k in keys]
        return list(self.backend.local_paths(keys))

    def _key_files(self, cell_id: str, key: str) -> list[PurePath]:
        """The manifest files of (cell_id, key); in a folder, listed again only when the
        folder changed.

        The folder's identity (as for manifests, with the same margin) stands for its
        entries; a listing that missed a new file could only give an older checkpoint of
        the same key, and a file removed since is skipped when it cannot be read.  A
        bucket's key is listed every time.
        """
        prefix = _manifest_prefix(cell_id, key)
        try:
            seen = self.backend.identity(prefix)
        except OSError:
            return []
        if seen is None:
            return self._manifest_paths(prefix)
        name = self._origin + prefix
        known = _listed.get(name)
        if known is not None and known[2] and known[0] == seen[0]:
            return list(known[1])
        files = self._manifest_paths(prefix)
        if len(_listed) >= _READ_CACHE_MAX:
            _listed.clear()
        _listed[name] = (seen[0], tuple(files), seen[1])
        return files

    def _misfiled(self, m: Manifest, cell_id: str, key: str | None) -> StoreError | None:
        if m.cell_id == cell_id and (key is None or m.key == key):
            return None
        rel = self._rel(m.path)
        return ManifestError(
            f"{m.describe()} in {rel} is filed under the wrong cell or key; it is ignored "
            f"and the cell will execute again. {_VERIFY_HINT}",
            path=rel,
        )

    def find(
        self,
        cell_id: str,
        key: str,
        accept: Callable[[Manifest], bool] | None = None,
        waiting: Callable[[str], None] | None = None,
    ) -> Manifest | None:
        """The newest complete, verified checkpoint of (cell_id, key), or None.

        *accept*, when given, must also hold: the engine passes a check that the
        files the cell read are unchanged, so an older checkpoint whose files match
        the disk again is found.

        *waiting*, when given, lets a lookup that found nothing wait for another live
        process's staged save of the same key (see :func:`pending.writing`), up to
        :data:`PEER_SAVE_WAIT` seconds; it is called once, with what is waited for.

        Manifests that cannot be trusted or read are skipped in favour of an
        older good one; when there is none, the error of the newest bad one is
        raised (:class:`Untrusted`, :class:`FormatTooNew`, :class:`ManifestError`)
        so the caller can say why the cell executes again.

        >>> store.find("train", key) is None  # doctest: +SKIP
        False
        """
        _check_cell_id(cell_id)
        _check_key(key)
        # read our own writes: a save of this key still being written is waited for
        background.barrier(self.root, key=(cell_id, key), callbacks=False)
        self._settle_pending()
        found = self._find(cell_id, key, accept)
        if found is not None or waiting is None or not self._pending_live:
            return found
        writers = pending.writing(self, cell_id, key, self._pending_live)
        if not writers:
            return found
        waiting(
            f"waiting for process {', '.join(map(str, writers))} to finish saving this "
            f"cell (up to {PEER_SAVE_WAIT:.0f} s)"
        )
        deadline = time.monotonic() + PEER_SAVE_WAIT
        while writers and time.monotonic() < deadline:
            time.sleep(0.05)
            writers = pending.writing(self, cell_id, key)
        self._pending_seen = None  # (scan again now: the writer's record has just gone)
        self._settle_pending()
        return self._find(cell_id, key, accept)

    def _find(
        self, cell_id: str, key: str, accept: Callable[[Manifest], bool] | None
    ) -> Manifest | None:
        """:meth:`find` once, without waiting for anyone."""
        problem: StoreError | None = None
        good: list[Manifest] = []
        bad: list[PurePath] = []
        # Ids are random, so every manifest of the key is read and the newest (by
        # ``created``) wins; a key rarely holds more than a few.
        for path in sorted(self._key_files(cell_id, key), reverse=True):
            try:
                m = self.read_manifest(path, quick=True)
            except FileNotFoundError:
                continue  # removed by gc meanwhile
            except (FormatTooNew, Untrusted) as exc:
                # a newer ipy_resume's, or another key's: not damage, never moved
                problem = problem or exc
                continue
            except StoreError as exc:
                problem = problem or exc
                bad.append(path)
                continue
            wrong = self._misfiled(m, cell_id, key)
            if wrong is not None:
                problem = problem or wrong
            elif m.complete:
                good.append(m)
        if good:
            if bad:  # a sound checkpoint of the same key replaces them
                self._retire(bad)
            for m in sorted(good, key=manifest.order_key, reverse=True):
                if accept is None or accept(m):
                    return m
            return None
        if bad:
            # What the next save of this key heals (see _heal): the blobs it would reuse
            # are checked first, and these manifests are moved to quarantine/.
            self._suspect.setdefault((cell_id, key), set()).update(bad)
        if problem is not None:
            raise problem
        return None

    def _verified(self, paths: Iterable[PurePath]) -> Iterator[Manifest]:
        for path in paths:
            try:
                yield self.read_manifest(path, quick=True)
            except (FileNotFoundError, StoreError):
                continue

    def scan(self) -> Iterator[Listed]:
        """Every manifest file of the store, read once: its manifest, or why it is unusable.

        An untrusted one comes with its contents read without trusting them
        (``unverified``: its blob list, never its values); a misfiled one with its
        manifest and ``misfiled``.  A file removed meanwhile is left out.

        >>> [entry.rel for entry in Store("s").scan() if entry.error]  # doctest: +SKIP
        ['manifests/train/3f2a/0190ab.json']
        """
        for path in self._manifest_paths():
            rel = self._rel(path)
            try:
                data = self.backend.get(rel)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if isinstance(exc, StoreError):
                    raise  # the store cannot be reached (a bucket's error), not this file
                yield Listed(path, rel, error=exc)  # unreadable: what it refers to is unknown
                continue
            yield self._entry(path, rel, data)

    def _entry(self, path: PurePath, rel: str, data: bytes) -> Listed:
        """What :meth:`scan` says of the manifest file *path* that holds *data*."""
        try:
            m = manifest.decode(data, self.key, rel=rel, store=str(self.location), path=path)
        except Untrusted as exc:
            try:
                foreign: Manifest | None = manifest.decode_unverified(data, rel, path)
            except StoreError:
                foreign = None
            return Listed(path, rel, len(data), error=exc, unverified=foreign)
        except StoreError as exc:
            return Listed(path, rel, len(data), error=exc)
        return Listed(path, rel, len(data), manifest=m, misfiled=self.misfiled(m, path))

    def misfiled(self, m: Manifest, path: PurePath) -> bool:
        """True when the file *path* of *m* is not in the folder of its cell and key.

        Such a manifest verifies but is never used: a copy, or moved by hand.

        >>> store.misfiled(m, m.path)  # doctest: +SKIP
        False
        """
        return self._rel(path).rpartition("/")[0] != _manifest_prefix(m.cell_id, m.key)

    def relative(self, path: PurePath | str | None) -> str:
        """*path* as messages name it: relative to the store (``manifests/…``) when inside.

        >>> Store("/tmp/s").relative(Path("/tmp/s/objects/ab/cd"))
        'objects/ab/cd'
        """
        return self._rel(path)

    def heal_info(self) -> None:
        """Write ``store.json`` or its backup again where one is damaged or missing.

        Raises :class:`FormatTooNew` (nothing is touched) for a store of a newer format.

        >>> Store("s").heal_info()  # doctest: +SKIP
        """
        self._resolve_info(heal=True)

    def history(self, cell_id: str) -> list[Manifest]:
        """Every verified checkpoint of *cell_id* (any key, complete or not), oldest first."""
        _check_cell_id(cell_id)
        background.barrier(self.root, cell_id=cell_id, callbacks=False)
        self._settle_pending()
        found = [
            m
            for m in self._verified(self._manifest_paths(f"manifests/{manifest.cell_dir(cell_id)}"))
            if self._misfiled(m, cell_id, None) is None
        ]
        return sorted(found, key=manifest.order_key)

    def manifests_except(self, ids: set[str]) -> list[Manifest]:
        """Every verified checkpoint whose id is not in *ids* (the others are not read)."""
        background.barrier(self.root, callbacks=False)
        self._settle_pending()
        paths = [p for p in self._manifest_paths() if p.name[:-5] not in ids]
        return sorted(self._verified(paths), key=manifest.order_key)

    def ids(self) -> set[str]:
        """Every checkpoint id the store holds, from file names alone (nothing is read)."""
        out: set[str] = set()
        for path in self._manifest_paths():
            stem = path.name[: -len(".json")]
            if manifest.valid_id(stem):
                out.add(stem)
        return out

    def short_ids(self, extra: Iterable[str] = ()) -> dict[str, str]:
        """Id → the prefix to show: at least 8 characters, unique in the store (as git does).

        *extra* are ids to keep apart as well (those the timeline names, gone or not).

        >>> Store("s").short_ids()  # doctest: +SKIP
        {'3f2a9c1d2e4b5a6f': '3f2a9c1d', ...}
        """
        background.barrier(self.root, callbacks=False)
        return manifest.unique_prefixes(self.ids() | set(extra))

    def short_id(self, checkpoint_id: str) -> str:
        """The prefix of *checkpoint_id* to show (see :meth:`short_ids`).

        For status lines, once per cell: the listing of ids is reused for a few seconds
        (plus the ids saved since), so a hit does not walk every manifest folder.
        """
        now = time.monotonic()
        if self._id_cache is None or now - self._id_cache[0] > _ID_CACHE_SECONDS:
            self._id_cache = (now, self.ids())
        known = self._id_cache[1]
        self._note_id(checkpoint_id)
        # the ids by their first characters, rebuilt when the listing changed (or grew
        # other than through _note_id)
        if (
            self._by_prefix is None
            or self._by_prefix[0] is not known
            or (self._by_prefix[1] != len(known))
        ):
            index: dict[str, list[str]] = {}
            for i in known:
                index.setdefault(i[: manifest.SHORT_ID], []).append(i)
            self._by_prefix = (known, len(known), index)
        return manifest.unique_prefixes(self._by_prefix[2][checkpoint_id[: manifest.SHORT_ID]])[
            checkpoint_id
        ]

    def _note_id(self, checkpoint_id: str) -> None:
        """Add an id made (or met) since the ids were listed to the listing and its index."""
        if self._id_cache is None or checkpoint_id in self._id_cache[1]:
            return
        known = self._id_cache[1]
        known.add(checkpoint_id)
        if self._by_prefix is not None and self._by_prefix[0] is known:
            _, count, index = self._by_prefix
            index.setdefault(checkpoint_id[: manifest.SHORT_ID], []).append(checkpoint_id)
            self._by_prefix = (known, count + 1, index)

    def manifests(self) -> list[Manifest]:
        """Every verified checkpoint of the store, oldest first."""
        background.barrier(self.root, callbacks=False)
        self._settle_pending()
        found = list(self._verified(self._manifest_paths()))
        return sorted(found, key=manifest.order_key)

    # -- loading -------------------------------------------------------------

    def load_values(
        self,
        manifest: Manifest,
        names: Iterable[str] | None = None,
        cache: dict[Any, Any] | None = None,
        linker: Linker | None = None,
    ) -> dict[str, object]:
        """The values of a verified checkpoint (all of them, or *names*).

        Every blob is verified against the manifest before it is decoded; a bad
        one is quarantined and :class:`CorruptBlob` / :class:`MissingBlob` raised.
        Loads that share a *cache* share the objects they decode, so values of
        several checkpoints that held one object hold one object again; a *linker*
        supplies live objects for the links of other checkpoints.
        """
        wanted = list(manifest.values) if names is None else list(names)
        for name in wanted:
            if name not in manifest.values:
                raise KeyError(f"{manifest.describe()} has no value named {name!r}")
        cache = {} if cache is None else cache
        with self._sweeping(manifest):
            self._prefetch(manifest, [manifest.values[n] for n in wanted], cache)
            return {n: self._value(manifest, n, cache, linker) for n in wanted}

    def _value(
        self, m: Manifest, name: str, cache: dict[Any, Any], linker: Linker | None
    ) -> object:
        tok = token(m.id, name)
        known = cache.get(("object", tok), MISSING)
        if known is MISSING:
            known = self._decode(m, name, m.values[name], cache, linker)
            cache[("object", tok)] = known
        return known

    def _linked(
        self, m: Manifest, tok: str, cache: dict[Any, Any], linker: Linker | None
    ) -> object:
        """The object behind link *tok* of *m*: decoded here already, live, or loaded."""
        known = cache.get(("object", tok), MISSING)
        if known is not MISSING:
            return known
        checkpoint_id, _, name = tok.partition("/")
        if checkpoint_id == m.id and name in m.values:
            return self._value(m, name, cache, linker)
        if linker is not None:
            known = linker.live(tok)
        if known is MISSING:
            ref = m.links.get(tok)
            if ref is None:
                raise ValueError(f"the link {tok!r} is not listed in the manifest")
            known = self._decode(m, name, ref, cache, linker)
        cache[("object", tok)] = known
        return known

    @staticmethod
    def members(manifest: Manifest, cache: dict[Any, Any]) -> set[int]:
        """Ids of the objects the groups of *manifest* held when a load with *cache* decoded them."""
        out: set[int] = set()
        for ref in manifest.values.values():
            out |= cache.get(("members", ref.blob, ref.offset), set())
        return out

    def _prefetch(self, m: Manifest, refs: list[BlobRef], cache: dict[Any, Any]) -> None:
        """Read and verify the blobs behind *refs* two at a time, into *cache*.

        A DataFrame is a pickle stream (sha256, CPU-bound) plus column buffers (xxh3,
        bound by memory): on two cores they overlap.  The first failure in the order the
        blobs are used is raised, as reading them one by one would.
        """
        todo: dict[str, BlobRef] = {}
        for ref in refs:
            for r in (ref, *ref.buffers):
                if r.blob not in cache:
                    todo.setdefault(r.blob, r)
        if len(todo) < 2 or sum(r.size for r in todo.values()) < _PREFETCH_MIN:
            return
        context = m.describe()
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="ipy_resume-read") as pool:
            jobs = [
                (
                    r.blob,
                    pool.submit(self._fetch, r, context, cache),
                )
                for r in sorted(todo.values(), key=lambda r: -r.size)
            ]
            failures: dict[str, BaseException] = {}
            for address, job in jobs:
                try:
                    cache[address] = job.result()
                except BaseException as exc:
                    failures[address] = exc
        for address in todo:
            if address in failures:
                raise failures[address]

    def load_extras(
        self,
        manifest: Manifest,
        cache: dict[Any, Any] | None = None,
        names: Iterable[str] | None = None,
        reuse: Iterable[str] = (),
    ) -> dict[str, object]:
        """The extras of a verified checkpoint (verified like values).

        Pass the same *cache* (blob address → verified bytes) to several loads so a
        blob shared between them is read and verified once.  Extras named in *reuse*
        are ones the caller only reads (the RNG state, the recorded output): their bytes
        are read and verified as always, and when bytes at the same place of the same
        blob (so, the same bytes) were decoded before in this process, that object is
        returned instead of unpickling them again.
        """
        cache = {} if cache is None else cache
        wanted = manifest.extras if names is None else [n for n in names if n in manifest.extras]
        shareable = set(reuse)
        with self._sweeping(manifest):
            out: dict[str, object] = {}
            for n in wanted:
                ref = manifest.extras[n]
                if n not in shareable or not _reusable(ref):
                    out[n] = self._decode(manifest, n, ref, cache)
                    continue
                self._blob(manifest, ref, cache)  # verified now, whatever was decoded before
                where = (ref.blob, ref.offset, ref.length, ref.member)
                known = _decoded.get(where, MISSING)
                if known is MISSING:
                    known = self._decode(manifest, n, ref, cache)
                    if len(_decoded) >= _DECODED_MAX:
                        _decoded.clear()
                    _decoded[where] = known
                out[n] = known
            return out

    def _blob(
        self, m: Manifest, ref: BlobRef, cache: dict[Any, Any], *, own: bool = False
    ) -> np.ndarray:
        """The verified bytes of *ref*'s blob, read or mapped once per load (*cache*).

        With *own*, the bytes become the memory of a value: equal arrays of distinct
        objects are stored once (content addressing), and two values built over one
        memory would see each other's writes, so every value after the first that a
        load builds over this blob gets memory of its own.  (One object held by two
        values is one value here: the pickler's memo and links keep it shared.)
        """
        buf = cache.get(ref.blob)
        if buf is None:
            buf = cache[ref.blob] = self._fetch(ref, m.describe(), cache)
        if own:
            if ("taken", ref.blob) in cache:
                if cache.get(("how", ref.blob)) == "mapped":
                    return self._fetch(ref, m.describe(), {})  # another map: no copy
                copy = aligned_empty(buf.nbytes)  # of bytes verified already
                copy[:] = buf
                return copy
            cache[("taken", ref.blob)] = True
        return buf

    def _maps(self, ref: BlobRef) -> bool:
        mapping = getattr(self.blobs, "mapping", None)  # (a bucket's blobs are never mapped)
        return ref.kind in ("hdf5", "raw") and mapping is not None and bool(mapping(ref.size))

    def _fetch(self, ref: BlobRef, context: str, cache: dict[Any, Any]) -> np.ndarray:
        """The verified bytes of *ref*'s blob: a copy-on-write map for a large HDF5 or raw
        blob of a local store, else a read; ``cache[("how", blob)]`` says which."""
        if self._maps(ref):
            mapped = self.blobs.map(ref.blob, ref.algo, ref.checksum, ref.size, context=context)
            if mapped is not None:
                cache[("how", ref.blob)] = "mapped"
                return mapped
        cache[("how", ref.blob)] = "read"
        return self.blobs.read(ref.blob, ref.algo, ref.checksum, ref.size, context=context)

    def restore_paths(self, manifest: Manifest) -> dict[str, str]:
        """How a restore would load each value of *manifest*: ``"mapped"``, ``"buffers mapped"``
        (a pickled value whose large out-of-band buffers are mapped) or ``"read"``.

        >>> Store("/tmp/doc-store").restore_paths(m)  # doctest: +SKIP
        {'big': 'mapped', 'small': 'read'}
        """
        summaries = manifest.info.get("names") or {}
        return {n: _path(r, self._maps, summaries.get(n)) for n, r in manifest.values.items()}

    @staticmethod
    def paths_taken(
        manifest: Manifest, cache: dict[Any, Any], names: Iterable[str]
    ) -> dict[str, str]:
        """How a load with *cache* did load each of *names* (see :meth:`restore_paths`)."""
        out = {}
        for name in names:
            ref = manifest.values.get(name)
            if ref is not None:
                out[name] = _path(
                    ref,
                    lambda r: cache.get(("how", r.blob)) == "mapped",
                    (manifest.info.get("names") or {}).get(name),
                )
        return out

    def _decode(
        self,
        m: Manifest,
        name: str,
        ref: BlobRef,
        cache: dict[Any, Any],
        linker: Linker | None = None,
    ) -> object:
        buf = self._blob(m, ref, cache, own=ref.kind == "hdf5")
        try:
            if ref.kind == "hdf5":
                assert ref.shape is not None and ref.order is not None
                return codecs.decode_array(buf, ref.offset, ref.dtype, ref.shape, ref.order)
            if ref.kind == "pickle":
                assert ref.length is not None
                stream = buf.data[ref.offset : ref.offset + ref.length]
                if ref.member is None:
                    buffers = [self._blob(m, b, cache, own=True) for b in ref.buffers]
                    return codecs.unpickle_value(stream, buffers)
                where = ("group", ref.blob, ref.offset)
                group = cache.get(where)
                if group is None:  # (its members share one stream: its buffers are used once)
                    # as memoryviews, so an array over one has a base of its own dtype and
                    # shape, as before the save, not the blob's bytes (``x.base`` of a view)
                    views = [self._blob(m, b, cache, own=True).data for b in ref.buffers]
                    held: set[int] = set()
                    group = codecs.unpickle_group(
                        stream, views, lambda tok: self._linked(m, tok, cache, linker), held
                    )
                    cache[where] = group
                    cache[("members", ref.blob, ref.offset)] = held
                if ref.member not in group:
                    raise ValueError(f"the group has no member {ref.member!r}")
                return group[ref.member]
            raise ValueError(f"a {ref.kind} blob cannot hold a value")
        except StoreError:
            raise
        except Exception as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            rel = self.blobs.relpath(ref.blob)
            raise DecodeError(
                f"{m.describe()} cannot be restored: {name!r} in {rel} could not be rebuilt "
                f"({reason}); the cell will execute again.",
                path=rel,
            ) from exc

    # -- maintenance -----------------------------------------------------------

    def verify(self) -> list[str]:
        """Check every file of the store, referenced or not; one line per problem.

        Each line names the file and says what to do (usually nothing: the store heals
        on the next run, or ``gc`` cleans it now).  See :func:`audit` for the notes.

        >>> Store("s").verify()  # doctest: +SKIP
        []
        """
        return self.audit().lines

    def audit(self) -> Audit:
        """:meth:`verify` with details: problems, notes, and what ``gc`` would clean."""
        background.barrier(self.root, callbacks=False)
        return audit_store(self)

    def journal(self) -> Journal:
        """The store's timeline, rebuilt from the manifests when it was lost or damaged.

        >>> Store("s").journal().events()  # doctest: +SKIP
        []
        """
        if self._journal is None:
            if self.backend.local_files:
                # one SQLite file in the folder (see journal.py and the README's architecture)
                self._journal = Journal(
                    self.backend,
                    source=self.manifests_except,
                    alive=pending.writer_alive,
                    listed=self.ids,
                )
            else:
                # any other backend: one immutable object per event, merged on read
                from ipy_resume.store.remote_journal import RemoteJournal

                self._journal = RemoteJournal(self)  # type: ignore[assignment]
        assert self._journal is not None
        return self._journal

    def trust(self, problems: list[str] | None = None) -> int:
        """Adopt a store written under another key: re-sign manifests whose blobs verify.

        Each manifest is parsed without trusting it, every blob it references is
        checked against its checksum, and only then is it re-signed under this
        store's key.  Manifests with a bad, missing or altered blob, unreadable
        ones and newer formats are left as they are and described in *problems*.
        Returns how many manifests were re-signed.

        >>> Store("shared-store").trust()  # doctest: +SKIP
        12
        """
        problems = [] if problems is None else problems
        background.barrier(self.root, callbacks=False)
        count = 0
        if not self.exists():
            return 0
        with self.backend.lock(exclusive=False, timeout=self.lock_timeout, purpose="trust"):
            for path in self._manifest_paths():
                rel = self._rel(path)
                try:
                    data = self.backend.get(rel)
                except FileNotFoundError:
                    continue
                try:
                    m = manifest.decode_unverified(data, rel, path)
                except StoreError as exc:
                    problems.append(f"not adopted: {exc}")
                    continue
                refused = refusal(m, self.blobs, rel)
                if refused is not None:
                    problems.append(refused)
                    continue
                # (these bytes, whose blobs were checked: not the file read again)
                self.backend.put(rel, [manifest.encode(m, self.key)])
                count += 1
        return count

    def gc(
        self,
        *,
        keep_last: int | None = None,
        max_size: int | None = None,
        grace: float | None = None,
        timeout: float = 60.0,
    ) -> GcReport:
        """Apply retention and remove unreferenced blobs, temp files and quarantine.

        See :mod:`ipy_resume.store.retention` for the rules.

        >>> print(Store("s").gc(keep_last=3).summary())  # doctest: +SKIP
        removed 4 checkpoint(s) of 'train', kept 3 ...
        """
        background.barrier(self.root, callbacks=False)
        return retention.collect(
            self, keep_last=keep_last, max_size=max_size, grace=grace, timeout=timeout
        )


class _Sweeping:
    """Around a load of *m*: a corrupt blob sends the checkpoint's other blobs to be checked
    (:meth:`Store._sweep`) before the error goes on.  (A class: a hit enters it twice.)"""

    __slots__ = ("_m", "_store")

    def __init__(self, store: Store, m: Manifest) -> None:
        self._store = store
        self._m = m

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is not None and issubclass(kind, CorruptBlob):
            self._store._sweep(self._m)
