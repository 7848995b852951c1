"""Finding, listing and verifying a store's manifests: the part every read starts with.

A manifest is trusted only once its signature verifies under the store's key; what
was verified is remembered for the process (by the bytes' sha256 and the file's
identity, see :meth:`Reader.read_manifest`), so a hit does not verify it again.  The
reader never waits for saves on their way and never finishes a dead writer's: the
façade (:class:`~ipy_resume.store.store.Store`) does both before it asks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath

from ipy_resume.store import blobs, manifest
from ipy_resume.store.context import StoreContext, check_cell_id, manifest_prefix
from ipy_resume.store.fsio import FormatTooNew, ManifestError, StoreError, Untrusted
from ipy_resume.store.manifest import Manifest
from ipy_resume.store.results import Listed

__all__ = ["Reader", "forget_verified"]

VERIFY_HINT = "Run 'ipy-resume verify' to list others."
_ID_CACHE_SECONDS = 5.0
_READ_CACHE_MAX = 50_000


@dataclass
class _Verified:
    """A manifest verified in this process, and what identified its bytes then."""

    ident: Hashable  # backend.identity: a file's (dev, ino, size, mtime, ctime), an etag
    digest: bytes  # sha256 of the bytes that verified (or that this process signed)
    manifest: Manifest | None  # None: written here, parsed (not verified again) on first use
    # (a background commit's is parsed on the writer thread: see Reader.remember)
    settled: bool  # the identity could not change unseen any more when it was read
    # published by this process, ident read right after (see Reader.read_manifest: trusted
    # once the file has settled with that same identity)
    own: bool = False


# (where the manifest lives, trust id of the key it verified under) -> what was verified;
# shared by every store of the process, so the panel's and the CLI helpers' reads reuse
# the magic's.  Where: its file, or the URL of the store and its key.
_verified: dict[tuple[str, bytes], _Verified] = {}


# key folder -> (its identity, the manifest files it held, settled): a hit lists the folder
# of its key again only when the folder changed (an entry added, removed or renamed)
_listed: dict[str, tuple[Hashable, tuple[PurePath, ...], bool]] = {}


def forget_verified() -> None:
    """Drop every manifest this process verified, so the next reads verify them again.

    >>> forget_verified()
    """
    _verified.clear()
    _listed.clear()


class Reader:
    """Reads the manifests of the store *ctx* describes.

    >>> Reader(store.ctx).ids()  # doctest: +SKIP
    {'0190ab3f2a9c1d2e'}
    """

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx
        self._id_cache: tuple[float, set[str]] | None = None  # (when listed, ids)
        self._by_prefix: tuple[set[str], int, dict[str, list[str]]] | None = None

    def forget_ids(self) -> None:
        """List the ids again at the next :meth:`short_id` (checkpoints were added)."""
        self._id_cache = None

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
        rel = self.ctx.rel(path)
        slot = (self.ctx.origin + rel, self.ctx.trust())
        known = _verified.get(slot)
        backend = self.ctx.backend
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
            m = manifest.decode(
                data, self.ctx.key, rel=rel, store=str(self.ctx.location), path=path
            )
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
            return manifest.decode(
                data, self.ctx.key, rel=rel, store=str(self.ctx.location), path=path
            )

    def remember(self, path: PurePath, data: bytes, parse: bool = False) -> None:
        """Note manifest bytes this process just signed and published at *path*.

        With *parse* (a commit on the background writer, off the kernel's thread), they
        are parsed now, so the first hit of the checkpoint does not parse them: it still
        reads the file and compares its bytes with these by sha256 before using them.
        """
        rel = self.ctx.rel(path)
        try:
            seen = self.ctx.backend.identity(rel)
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
        _verified[(self.ctx.origin + rel, self.ctx.trust())] = _Verified(
            None if seen is None else seen[0], hashlib.sha256(data).digest(), parsed, False, True
        )

    def manifest_paths(self, prefix: str = "manifests") -> list[PurePath]:
        """The manifests under *prefix* (``manifests``, a cell's or a key's folder), as the
        ``path`` a manifest read from them carries (see :meth:`path_of`), in key order."""
        # manifests/<cell-dir>/<key>/<id>.json, whatever level the listing starts at
        depth = 3 - prefix.count("/")
        keys = [k for k in self.ctx.backend.keys(prefix, depth) if k.endswith(".json")]
        if not self.ctx.backend.local_files:
            return [PurePosixPath(k) for k in keys]
        return list(self.ctx.backend.local_paths(keys))

    def _key_files(self, cell_id: str, key: str) -> list[PurePath]:
        """The manifest files of (cell_id, key); in a folder, listed again only when the
        folder changed.

        The folder's identity (as for manifests, with the same margin) stands for its
        entries; a listing that missed a new file could only give an older checkpoint of
        the same key, and a file removed since is skipped when it cannot be read.  A
        bucket's key is listed every time.
        """
        prefix = manifest_prefix(cell_id, key)
        try:
            seen = self.ctx.backend.identity(prefix)
        except OSError:
            return []
        if seen is None:
            return self.manifest_paths(prefix)
        name = self.ctx.origin + prefix
        known = _listed.get(name)
        if known is not None and known[2] and known[0] == seen[0]:
            return list(known[1])
        files = self.manifest_paths(prefix)
        if len(_listed) >= _READ_CACHE_MAX:
            _listed.clear()
        _listed[name] = (seen[0], tuple(files), seen[1])
        return files

    def misfiled_error(self, m: Manifest, cell_id: str, key: str | None) -> StoreError | None:
        """Why *m* is not used for (cell_id, key) when it is filed under another, else None."""
        if m.cell_id == cell_id and (key is None or m.key == key):
            return None
        rel = self.ctx.rel(m.path)
        return ManifestError(
            f"{m.describe()} in {rel} is filed under the wrong cell or key; it is ignored "
            f"and the cell will execute again. {VERIFY_HINT}",
            path=rel,
        )

    def find_once(
        self, cell_id: str, key: str, accept: Callable[[Manifest], bool] | None
    ) -> Manifest | None:
        """The newest complete, verified checkpoint of (cell_id, key) that *accept* takes,
        or None; see :meth:`Store.find <ipy_resume.store.store.Store.find>`, which waits
        for saves on their way first."""
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
            wrong = self.misfiled_error(m, cell_id, key)
            if wrong is not None:
                problem = problem or wrong
            elif m.complete:
                good.append(m)
        if good:
            if bad:  # a sound checkpoint of the same key replaces them
                self.retire(bad)
            for m in sorted(good, key=manifest.order_key, reverse=True):
                if accept is None or accept(m):
                    return m
            return None
        if bad:
            # What the next save of this key heals (see Committer.heal): the blobs it would reuse
            # are checked first, and these manifests are moved to quarantine/.
            self.ctx.suspect.setdefault((cell_id, key), set()).update(bad)
        if problem is not None:
            raise problem
        return None

    def verified(self, paths: Iterable[PurePath]) -> Iterator[Manifest]:
        """The manifests at *paths* that verify, in order (the others are skipped)."""
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
        for path in self.manifest_paths():
            rel = self.ctx.rel(path)
            try:
                data = self.ctx.backend.get(rel)
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
            m = manifest.decode(
                data, self.ctx.key, rel=rel, store=str(self.ctx.location), path=path
            )
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
        return self.ctx.rel(path).rpartition("/")[0] != manifest_prefix(m.cell_id, m.key)

    def retire(self, paths: Iterable[PurePath]) -> None:
        """Move manifests that can never be restored to quarantine/ (gc deletes them)."""
        for path in paths:
            key = self.ctx.rel(path)
            name = f"{key.replace('/', '.')}.{int(time.time() * 1000)}.{secrets.token_hex(3)}"
            with contextlib.suppress(OSError, StoreError):
                self.ctx.backend.move(key, f"{blobs.QUARANTINE}/{name}")

    def ids(self) -> set[str]:
        """Every checkpoint id the store holds, from file names alone (nothing is read)."""
        out: set[str] = set()
        for path in self.manifest_paths():
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
        self.note_id(checkpoint_id)
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

    def note_id(self, checkpoint_id: str) -> None:
        """Add an id made (or met) since the ids were listed to the listing and its index."""
        if self._id_cache is None or checkpoint_id in self._id_cache[1]:
            return
        known = self._id_cache[1]
        known.add(checkpoint_id)
        if self._by_prefix is not None and self._by_prefix[0] is known:
            _, count, index = self._by_prefix
            index.setdefault(checkpoint_id[: manifest.SHORT_ID], []).append(checkpoint_id)
            self._by_prefix = (known, count + 1, index)

    def history(self, cell_id: str) -> list[Manifest]:
        """Every verified checkpoint of *cell_id* (any key, complete or not), oldest first."""
        check_cell_id(cell_id)
        found = [
            m
            for m in self.verified(self.manifest_paths(f"manifests/{manifest.cell_dir(cell_id)}"))
            if self.misfiled_error(m, cell_id, None) is None
        ]
        return sorted(found, key=manifest.order_key)

    def manifests_except(self, ids: set[str]) -> list[Manifest]:
        """Every verified checkpoint whose id is not in *ids* (the others are not read)."""
        paths = [p for p in self.manifest_paths() if p.name[:-5] not in ids]
        return sorted(self.verified(paths), key=manifest.order_key)

    def manifests(self) -> list[Manifest]:
        """Every verified checkpoint of the store, oldest first."""
        return sorted(self.verified(self.manifest_paths()), key=manifest.order_key)
