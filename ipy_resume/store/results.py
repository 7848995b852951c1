"""What the store hands back: a save's result, and each manifest file a scan finds.

:class:`SaveResult` is shared by :meth:`Store.save` and a background :class:`Snapshot`;
:class:`Listed` is what :meth:`Store.scan` yields.

>>> SaveResult(manifest).bytes_written  # doctest: +SKIP
0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

from ipy_resume.store.manifest import Manifest

__all__ = ["Listed", "SaveResult"]


@dataclass
class SaveResult:
    """The committed manifest of a save, what it could not store, and what it wrote."""

    manifest: Manifest  # the committed manifest
    failed: dict[str, str] = field(default_factory=dict)  # names not stored -> one-line reason
    bytes_written: int = 0  # blob bytes written plus the manifest file
    # names of earlier checkpoints stored again because they hold objects this save's
    # values hold (see Linker.holders), and the ids of the objects the values hold
    added: list[str] = field(default_factory=list)
    members: set[int] = field(default_factory=set)


@dataclass
class Listed:
    """One manifest file of a store: its verified manifest, or the error that makes it unusable.

    *error* is an ``OSError`` (the file cannot be read), or the store's error when it does
    not verify (:class:`Untrusted`, :class:`FormatTooNew`, :class:`ManifestError`).
    """

    path: PurePath
    rel: str  # as messages name it
    size: int = 0  # bytes of the file (0 when it cannot be read)
    manifest: Manifest | None = None  # verified
    error: Exception | None = None
    unverified: Manifest | None = None  # an untrusted one's contents, read without trusting
    misfiled: bool = False  # verified, but under another cell's or key's folder: never used
