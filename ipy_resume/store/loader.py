"""Rebuilding a checkpoint's values from its verified blobs.

Every blob is verified against the manifest before a byte of it is decoded (a large
HDF5 or raw blob of a folder is mapped copy-on-write and checked as it is mapped, see
:mod:`.blobs`); a blob that fails sends the checkpoint's other blobs to be checked too
(:meth:`Loader.sweep`), so the run that executes the cell again writes every damaged
one again.  Loads that share a cache share the objects they decode: values of several
checkpoints that held one object hold one object again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ipy_resume.store import codecs
from ipy_resume.store.blobs import MAP_MIN, aligned_empty
from ipy_resume.store.context import StoreContext
from ipy_resume.store.fsio import CorruptBlob, StoreError
from ipy_resume.store.manifest import BlobRef, Manifest
from ipy_resume.store.writing import MISSING, Linker, token

__all__ = ["DecodeError", "Loader", "forget_decoded"]

# Below this many bytes in all, reading a checkpoint's blobs two at a time gains nothing.
PREFETCH_MIN = 16 << 20


class DecodeError(StoreError):
    """A verified value could not be rebuilt (e.g. its class no longer exists)."""


# (blob, offset, length, member) -> the object those verified bytes decoded to, for extras
# a caller only reads (see Loader.load_extras)
_decoded: dict[tuple[str, int, int | None, str | None], object] = {}
_DECODED_MAX = 256
_DECODED_BYTES = 1 << 16


def _reusable(ref: BlobRef) -> bool:
    return ref.kind == "pickle" and not ref.buffers and (ref.length or 0) <= _DECODED_BYTES


def forget_decoded() -> None:
    """Drop the extras this process decoded, so the next loads unpickle them again.

    >>> forget_decoded()
    """
    _decoded.clear()


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


class Loader:
    """Loads values and extras from the store *ctx* describes.

    >>> Loader(store.ctx).load_values(m)  # doctest: +SKIP
    {'model': ...}
    """

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx

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
        if len(todo) < 2 or sum(r.size for r in todo.values()) < PREFETCH_MIN:
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
        mapping = getattr(self.ctx.blobs, "mapping", None)  # (a bucket's blobs are never mapped)
        return ref.kind in ("hdf5", "raw") and mapping is not None and bool(mapping(ref.size))

    def _fetch(self, ref: BlobRef, context: str, cache: dict[Any, Any]) -> np.ndarray:
        """The verified bytes of *ref*'s blob: a copy-on-write map for a large HDF5 or raw
        blob of a local store, else a read; ``cache[("how", blob)]`` says which."""
        if self._maps(ref):
            mapped = self.ctx.blobs.map(ref.blob, ref.algo, ref.checksum, ref.size, context=context)
            if mapped is not None:
                cache[("how", ref.blob)] = "mapped"
                return mapped
        cache[("how", ref.blob)] = "read"
        return self.ctx.blobs.read(ref.blob, ref.algo, ref.checksum, ref.size, context=context)

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
                    group = codecs.unpickle_group(
                        stream, views, lambda tok: self._linked(m, tok, cache, linker)
                    )
                    cache[where] = group
                if ref.member not in group:
                    raise ValueError(f"the group has no member {ref.member!r}")
                return group[ref.member]
            raise ValueError(f"a {ref.kind} blob cannot hold a value")
        except StoreError:
            raise
        except Exception as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            rel = self.ctx.blobs.relpath(ref.blob)
            raise DecodeError(
                f"{m.describe()} cannot be restored: {name!r} in {rel} could not be rebuilt "
                f"({reason}); the cell will execute again.",
                path=rel,
            ) from exc

    def sweep(self, m: Manifest) -> None:
        """A blob of *m* failed: check all of them, quarantine every bad one.

        So the re-execution that follows writes every damaged blob again, and the
        checkpoint is whole after one run however many of its files were hit.
        """
        self.ctx.suspect.setdefault((m.cell_id, m.key), set())
        for ref in m.blob_refs():
            problem = self.ctx.blobs.check(ref.blob, ref.algo, ref.checksum, ref.size)
            if problem is not None and problem != "is missing":
                self.ctx.blobs.quarantine(ref.blob)

    def _sweeping(self, m: Manifest) -> _Sweeping:
        return _Sweeping(self, m)


class _Sweeping:
    """Around a load of *m*: a corrupt blob sends the checkpoint's other blobs to be checked
    (:meth:`Loader.sweep`) before the error goes on.  (A class: a hit enters it twice.)"""

    __slots__ = ("_loader", "_m")

    def __init__(self, loader: Loader, m: Manifest) -> None:
        self._loader = loader
        self._m = m

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is not None and issubclass(kind, CorruptBlob):
            self._loader.sweep(self._m)
