"""What a save returns: shared by :meth:`Store.save` and a background :class:`Snapshot`.

>>> SaveResult(manifest).bytes_written  # doctest: +SKIP
0
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ipy_resume.store.manifest import Manifest

__all__ = ["SaveResult"]


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
