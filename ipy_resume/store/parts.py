"""The parts a store is made of, handed together to the maintenance modules.

``verify`` (:mod:`.audit`), ``gc`` (:mod:`.retention`, :mod:`.remote_maintenance`) and
their helpers work on a store's parts, never on the :class:`~ipy_resume.store.store.Store`
façade: what they call is below them, so no call of theirs comes back up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipy_resume.store.committer import Committer
from ipy_resume.store.context import StoreContext
from ipy_resume.store.info_keeper import InfoKeeper
from ipy_resume.store.loader import Loader
from ipy_resume.store.reader import Reader

__all__ = ["StoreParts"]


@dataclass(frozen=True)
class StoreParts:
    """One store's shared state and the objects that read, commit, load and keep
    ``store.json`` for it.

    >>> StoreParts.of(ctx).reader.ids()  # doctest: +SKIP
    set()
    """

    ctx: StoreContext
    reader: Reader
    info: InfoKeeper
    committer: Committer
    loader: Loader

    @classmethod
    def of(cls, ctx: StoreContext) -> StoreParts:
        """The parts of the store *ctx* describes, each made once."""
        reader = Reader(ctx)
        return cls(ctx, reader, InfoKeeper(ctx, reader), Committer(ctx, reader), Loader(ctx))
