"""What every part of a store shares: where it lives, how it is reached, and its key.

A :class:`~ipy_resume.store.store.Store` is a façade over parts that each do one job
(:mod:`.reader` finds and verifies manifests, :mod:`.committer` publishes them,
:mod:`.loader` rebuilds values, :mod:`.info_keeper` keeps ``store.json``).  They never
call back into the façade; what they have in common is this one object, so that a
change made through the façade (a new signing key, a bucket's blob store put in place
of the folder's, a shorter lock timeout) is seen by every part at once.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path, PurePath, PurePosixPath

from ipy_resume.store import info, manifest
from ipy_resume.store.backend import Backend, LocalBackend
from ipy_resume.store.blobs import BlobStore
from ipy_resume.store.manifest import Manifest

__all__ = ["StoreContext", "check_cell_id", "check_key", "check_text", "manifest_prefix"]

_KEY = re.compile(r"[0-9A-Za-z_-]{1,200}")


def check_key(key: str) -> None:
    """Refuse a checkpoint key that cannot name a folder of the store.

    >>> check_key("3f2a")
    """
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"checkpoint key must be 1-200 characters of [0-9A-Za-z_-], got {key!r}")


def check_text(what: str, text: object) -> None:
    """Refuse *text* unless it is a non-empty string of valid Unicode (a name, a cell id).

    >>> check_text("a value name", "x")
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what} must be a non-empty string, got {text!r}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text, got {text!r}") from None


def check_cell_id(cell_id: str) -> None:
    """Refuse a cell id that is not a non-empty string.

    >>> check_cell_id("train")
    """
    check_text("CELL_ID", cell_id)


def manifest_prefix(cell_id: str, key: str) -> str:
    """Where the manifests of (cell_id, key) are kept: ``manifests/<cell-dir>/<key>``.

    >>> manifest_prefix("train", "3f2a")
    'manifests/train/3f2a'
    """
    return f"manifests/{manifest.cell_dir(cell_id)}/{key}"


class StoreContext:
    """The state a store's parts share (see the module docstring).

    >>> from ipy_resume.store.backend import LocalBackend
    >>> ctx = StoreContext(Path("/tmp/s"), LocalBackend(Path("/tmp/s")), b"k")
    >>> ctx.rel(Path("/tmp/s/objects/ab/cd"))
    'objects/ab/cd'
    """

    lock_timeout: float = 120.0
    """Seconds a save waits for a running ``gc`` before giving up (values stay in memory)."""

    def __init__(self, root: PurePath, backend: Backend, key: bytes) -> None:
        self.root = root
        self.backend = backend
        self.origin = backend.origin  # (a key's file, or its URL, is origin + key)
        self.key = key
        # (a bucket's store puts its own in place of the folder's)
        local = backend if isinstance(backend, LocalBackend) else LocalBackend(Path(root))
        self.blobs: BlobStore = BlobStore(local)
        # damage found and repaired, one line each, until said (Store.take_repairs)
        self.repairs: list[str] = []
        # (cell_id, key) -> damaged manifests of a checkpoint that failed to load: the
        # next save of that key checks every blob it would reuse and retires them
        self.suspect: dict[tuple[str, str], set[PurePath]] = {}
        self._trust_of: tuple[bytes, bytes] | None = None  # (key, its trust id)

    @property
    def location(self) -> Path | str:
        """Where the store lives: its folder, or the URL of an object store."""
        if self.backend.local_files:
            assert isinstance(self.root, Path)
            return self.root
        return self.backend.url

    def exists(self) -> bool:
        """True once the store has been created (a first save, or ``store.json``)."""
        return self.backend.exists(info.FILE) or self.backend.has_prefix("manifests")

    def trust(self) -> bytes:
        """An id of the signing key: what was verified under one key is not under another."""
        key = self.key
        if self._trust_of is None or self._trust_of[0] != key:
            self._trust_of = (key, hashlib.sha256(b"ipy_resume trust\0" + key).digest())
        return self._trust_of[1]

    def rel(self, path: PurePath | str | None) -> str:
        """*path* as the store's key (``manifests/…``) when inside it; a key stays itself."""
        if path is None:
            return str(self.location)
        name = os.fspath(path)
        if name.startswith(self.origin):  # (as text: this is on the path of every hit)
            rel = name[len(self.origin) :]
            return rel if os.sep == "/" else rel.replace(os.sep, "/")
        return name  # a bucket's key already (or a file outside the store)

    def path_of(self, key: str) -> PurePath:
        """What a manifest read from *key* carries as ``path``: its file, or (in a bucket)
        the key itself."""
        if self.backend.local_files:
            return self.backend.local_path(key)
        return PurePosixPath(key)

    def manifest_key(self, m: Manifest) -> str:
        """The key manifest *m* is published under."""
        return f"{manifest_prefix(m.cell_id, m.key)}/{m.id}.json"
