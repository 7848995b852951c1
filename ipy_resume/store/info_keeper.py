"""``store.json`` and its backup, kept sound: the store's format and base seed.

See :mod:`ipy_resume.store.info` for the document and its spare copies.  This part
reads the first sound copy, writes damaged or missing ones again (a copy that cannot
be read at all goes to ``quarantine/`` first), and rebuilds the base seed from the
manifests when every copy is lost, so that default seeds never change.
"""

from __future__ import annotations

import contextlib
import errno
import secrets
import time
from typing import Any

from ipy_resume.store import blobs, info, manifest
from ipy_resume.store.context import StoreContext
from ipy_resume.store.fsio import ManifestError, StoreError
from ipy_resume.store.reader import Reader

__all__ = ["InfoKeeper"]


class InfoKeeper:
    """Keeps ``store.json`` of the store *ctx* describes; *reader* finds the manifests'
    copies of the base seed when every copy of the document is lost.

    >>> InfoKeeper(store.ctx, store.reader).seed_base  # doctest: +SKIP
    4127730215
    """

    def __init__(self, ctx: StoreContext, reader: Reader) -> None:
        self.ctx = ctx
        self.reader = reader
        self._doc: dict[str, Any] | None = None
        self._quarantined: list[str] = []

    @property
    def seed_base(self) -> int:
        """The per-store base seed (creates the store folder and ``store.json`` if needed)."""
        return int(self.doc()["seed_base"])

    def heal(self) -> None:
        """Write ``store.json`` or its backup again where one is damaged or missing.

        Raises :class:`FormatTooNew` (nothing is touched) for a store of a newer format.
        """
        self._resolve(heal=True)

    def doc(self) -> dict[str, Any]:
        """The store's info document, read (and healed) once per store object."""
        if self._doc is None:
            self._doc = self._resolve(heal=True)
        return self._doc

    def copies(self) -> tuple[info.Copy, info.Copy]:
        """``store.json`` and its backup as they are now."""
        return self.copy(info.FILE), self.copy(info.BACKUP)

    def copy(self, name: str) -> info.Copy:
        """The copy of the document in *name*, read now."""
        try:
            data = self.ctx.backend.get(name)
        except FileNotFoundError:
            return info.Copy(name, "missing")
        except OSError as exc:
            if isinstance(exc, StoreError):
                raise  # the store cannot be reached (a bucket's error): not damage
            return info.unreadable(name, exc)
        return info.decode_copy(name, data)

    def _resolve(self, *, heal: bool) -> dict[str, Any]:
        """The store's info from its first sound copy; with *heal*, damaged copies rewritten.

        See :mod:`ipy_resume.store.info`: ``store.json``, then its backup (either may be
        read from a spare copy inside it), then the base seed the manifests carry; a new
        store gets a new random one.  A copy that cannot be read at all is moved to
        ``quarantine/`` before it is written again, and what was repaired is said once
        (:meth:`Store.take_repairs <ipy_resume.store.store.Store.take_repairs>`).
        """
        copies = self.copies()
        doc = info.first_doc(copies, str(self.ctx.location))
        first = next((c for c in copies if c.doc is not None), None)
        origin = ""
        if first is not None:
            origin = first.name if first.state != "mended" else f"a spare copy in {first.name}"
        if doc is None and self.ctx.backend.names("manifests"):
            doc = info.recover((m.created, m.seed_base) for m in self.reader.manifests())
            origin = "the manifests' copy of the base seed" if doc is not None else ""
        if not heal:
            return doc if doc is not None else {}
        if doc is None:
            # a new store, or one whose every copy of the seed is lost: a new seed
            doc = self._new(copies)
            origin = "" if all(c.state == "missing" for c in copies) else "a new base seed"
        wanted = info.encode(doc)
        rebuilt: list[str] = []
        for copy in copies:
            if copy.data == wanted or copy.state == "denied":
                continue
            # A read-only store still works; the copy is written by the next writer.
            with contextlib.suppress(OSError, StoreError), self._writing():
                self._quarantine(copy)
                self.ctx.backend.put(copy.name, [wanted])
                rebuilt.append(copy.name)
        self._say_repaired(copies, rebuilt, origin)
        return dict(doc)

    def _new(self, copies: tuple[info.Copy, ...]) -> dict[str, Any]:
        """Create ``store.json`` with a new base seed (the damaged copies moved aside first);
        the winner's document when another process created it meanwhile."""
        denied = next((c for c in copies if c.state == "denied"), None)
        try:
            if denied is not None:  # (it may be sound: never replace what we cannot read)
                raise PermissionError(errno.EACCES, denied.problem)
            self.ctx.backend.prepare()
            with self._writing():
                for copy in copies:
                    self._quarantine(copy)
                self.ctx.backend.put_if_absent(info.FILE, info.encode(info.new(manifest.now_iso())))
        except OSError as exc:
            damaged = [f"{c.name} {c.problem}" for c in copies if c.state == "damaged"]
            if isinstance(exc, StoreError) or not (damaged or denied):
                raise  # a new store that cannot be made: the caller says so (a save's error)
            hint = "; check the folder's permissions" if info.permission_denied(exc) else ""
            what = f"{' and '.join(damaged)}, and it " if damaged else ""
            raise ManifestError(
                f"{info.FILE} in {self.ctx.location}: {what}could not be created "
                f"({exc.strerror or exc}){hint}",
                path=info.FILE,
            ) from exc
        primary = self.copy(info.FILE)  # another process may have won
        if primary.doc is None:
            # (only another process's bytes can be here: ours are sound, or we raised)
            raise ManifestError(
                f"{info.FILE} in {self.ctx.location} was replaced while it was being created "
                f"and {primary.problem or 'is ' + primary.state}; it is rebuilt when the "
                "store is next used",
                path=info.FILE,
            )
        return primary.doc

    def _quarantine(self, copy: info.Copy) -> None:
        """Move *copy* to ``quarantine/`` when it could not be read at all and is still the
        bytes judged so (another process may have rebuilt it since): never deleted."""
        if copy.state != "damaged":
            return
        if self.copy(copy.name).data != copy.data:
            return  # rebuilt or removed meanwhile
        stamp = f"{int(time.time() * 1000)}.{secrets.token_hex(3)}"
        target = f"{blobs.QUARANTINE}/{copy.name}.{stamp}"
        with contextlib.suppress(FileNotFoundError):
            self.ctx.backend.move(copy.name, target)
            self._quarantined.append(target)

    def _say_repaired(self, copies: tuple[info.Copy, ...], rebuilt: list[str], origin: str) -> None:
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
        moved = f" (moved to {', '.join(self._quarantined)})" if self._quarantined else ""
        if origin == "a new base seed":
            how = (
                "no copy of the base seed was left, so a new one was made: default seeds "
                "change and the store's checkpoints execute again once"
            )
        else:
            how = f"rebuilt from {origin}; the base seed is unchanged"
        self._quarantined = []
        self.ctx.repairs.append(f"the store {self.ctx.location}: {' and '.join(bad)}{moved}; {how}")

    def _writing(self) -> contextlib.AbstractContextManager[bool]:
        # under the shared lock: gc must not take our temp file for a leftover (a bucket
        # has no temp files, and its lease would cost three requests per copy written)
        if not self.ctx.backend.file_locks:
            return contextlib.nullcontext(False)
        return self.ctx.backend.lock(exclusive=False, timeout=self.ctx.lock_timeout, purpose="save")
