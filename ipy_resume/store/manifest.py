"""The manifest: the signed commit record of one checkpoint.

A manifest is a JSON document (see :meth:`Manifest.to_json`) listing every
blob of a checkpoint with its checksum, plus the versions it was written
with.  Its ``signature`` is the HMAC-SHA256, under the user's key, of the
canonical JSON (sorted keys, no whitespace, UTF-8, ``ensure_ascii=False``) of
the document without the ``signature`` field.

Reading (:func:`decode`) is strict about the order of checks: parse; a
``format`` newer than :data:`FORMAT_VERSION` raises :class:`FormatTooNew`;
then the signature is verified (missing or wrong: :class:`Untrusted`); only
then is the content interpreted.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
import shlex
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePath
from typing import Any

from ipy_resume.store import blobs, signing
from ipy_resume.store.fsio import FormatTooNew, ManifestError, Untrusted
from ipy_resume.store.unique import random_bits

__all__ = [
    "FORMAT_VERSION",
    "BlobRef",
    "Manifest",
    "canonical_json",
    "cell_dir",
    "checksum",
    "decode",
    "encode",
    "new_checkpoint_id",
    "now_iso",
    "order_key",
    "signer",
    "unique_prefixes",
    "valid_id",
]

# 2: pickled values of one checkpoint may be grouped (``member``) and link to other
# checkpoints' values (``links``); a reader of format 1 would misread those, so it must refuse.
# 3: the file is the signed document's compact canonical JSON (what is signed, with the
# signature), not an indented layout; a reader of format 2 would take it for altered.
FORMAT_VERSION = 3
COMPACT_FORMAT = 3
"""The first format whose files are compact (see :func:`encode`)."""
KINDS = ("hdf5", "pickle", "raw")
_ID = re.compile(r"[0-9a-f]{16}")


# what json.dumps would build for each call, built once (a save encodes four documents)
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_LAYOUT = json.JSONEncoder(sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False)


def canonical_json(doc: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN/Infinity.

    >>> canonical_json({"b": 1, "a": "é"}).decode()
    '{"a":"é","b":1}'
    """
    return _CANONICAL.encode(doc).encode("utf-8")


_clock_lock = threading.Lock()
_last_ms = 0


def now_iso() -> str:
    """The current time as ISO 8601 UTC with milliseconds, e.g. ``2026-05-09T07:35:25.123Z``.

    Strictly increasing within a process (a millisecond is added where two calls fall in
    one): ``created`` orders the checkpoints of a key now that ids are random.

    >>> now_iso() < now_iso()
    True
    """
    global _last_ms
    with _clock_lock:
        ms = max(time.time_ns() // 1_000_000, _last_ms + 1)
        _last_ms = ms
    # whole seconds plus a timedelta: ms / 1000 as a float may round down a millisecond
    stamp = _dt.datetime.fromtimestamp(ms // 1000, _dt.timezone.utc)
    stamp += _dt.timedelta(milliseconds=ms % 1000)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_checkpoint_id() -> str:
    """16 random hex digits: ids of checkpoints made in one second differ from the first one.

    Ids used to start with the time, so checkpoints made within seconds shared their
    first 8 characters and a copied prefix was ambiguous; the time lives in ``created``.

    >>> len(new_checkpoint_id()), new_checkpoint_id() != new_checkpoint_id()
    (16, True)
    """
    return f"{random_bits(64):016x}"


def valid_id(text: str) -> bool:
    """True for a checkpoint id: 16 lowercase hex digits.

    >>> valid_id("3f2a9c1d2e4b5a6f"), valid_id("nope")
    (True, False)
    """
    return bool(_ID.fullmatch(text))


def order_key(m: Manifest) -> tuple[str, str]:
    """Sort key for checkpoints in the order they were made: ``created``, then ``id``.

    ``created`` is ISO 8601 UTC with a fixed width, so it sorts as text; ids of format-1
    stores were time-ordered, new ones are random and only break ties.
    """
    return (m.created, m.id)


SHORT_ID = 8
"""Displayed ids are at least this long (as git abbreviates hashes to 7)."""


def unique_prefixes(ids: Iterable[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """The shortest prefix of each id, at least *minimum* long, that no other id shares.

    Each prefix grows only where another id needs it to, as ``git log --abbrev`` does:
    a prefix names exactly one of *ids*.

    >>> unique_prefixes(["1a22f22d01", "1a22f22d99", "7c0ffee123"], minimum=4)
    {'1a22f22d01': '1a22f22d0', '1a22f22d99': '1a22f22d9', '7c0ffee123': '7c0f'}
    """
    ordered = sorted(set(ids))
    out: dict[str, str] = {}
    for i, ident in enumerate(ordered):
        need = minimum
        # only the neighbours in sorted order can share a longer prefix
        for j in (i - 1, i + 1):
            if 0 <= j < len(ordered):
                need = max(need, _common(ident, ordered[j]) + 1)
        out[ident] = ident[:need]
    return out


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_-]+")


@lru_cache(maxsize=4096)  # a pure function; every hit asks
def cell_dir(cell_id: str) -> str:
    """A filesystem-safe folder name for a CELL_ID: readable slug + 8 hex of its sha256."""
    ascii_form = unicodedata.normalize("NFKD", cell_id).encode("ascii", "ignore").decode("ascii")
    slug = _UNSAFE_RUN.sub("-", ascii_form).strip("-")[:40].strip("-") or "cell"
    digest = hashlib.sha256(cell_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug}-{digest}"


def describe(cell_id: object, checkpoint_id: object) -> str:
    """``checkpoint 'train' (0190ab12…)`` for messages (safe on unverified input)."""
    cell = " ".join(str(cell_id).split()) if isinstance(cell_id, str) else "?"
    if len(cell) > 60:
        cell = cell[:57] + "..."
    ident = checkpoint_id[:10] if isinstance(checkpoint_id, str) else "?"
    return f"checkpoint '{cell}' ({ident}…)"


# ---------------------------------------------------------------------------
# model


class _Malformed(ValueError):
    pass


def _get(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in doc:
        raise _Malformed(f"field {key!r} is missing")
    value = doc[key]
    if isinstance(value, bool) and kind is int:
        raise _Malformed(f"field {key!r} must be {kind.__name__}")
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _Malformed(f"field {key!r} must be {name}")
    return value


def _nonneg(doc: Mapping[str, Any], key: str) -> int:
    value: int = _get(doc, key, int)
    if value < 0:
        raise _Malformed(f"field {key!r} must not be negative")
    return value


@dataclass(frozen=True)
class BlobRef:
    """A reference from a manifest to (part of) a blob.

    * ``kind="hdf5"``: an array file; ``offset`` of the data, ``dtype`` (JSON
      form, see :func:`codecs.dtype_to_json`), ``shape``, ``order``.
    * ``kind="pickle"``: a pickle stream at ``offset``/``length`` of the blob
      (a pack, or a blob of its own), with its out-of-band ``buffers``.  With
      ``member``, the stream holds a dict of several values of one checkpoint
      pickled together (so objects they share stay shared) and the value is
      that dict's entry ``member``.
    * ``kind="raw"``: an out-of-band buffer, plain bytes.
    """

    kind: str
    blob: str
    algo: str
    checksum: str
    size: int
    offset: int = 0
    length: int | None = None
    dtype: Any = None
    shape: tuple[int, ...] | None = None
    order: str | None = None
    buffers: tuple[BlobRef, ...] = ()
    member: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": self.kind,
            "blob": self.blob,
            "checksum": {"algo": self.algo, "hex": self.checksum},
            "size": self.size,
        }
        if self.kind == "hdf5":
            doc.update(offset=self.offset, dtype=self.dtype, shape=list(self.shape or ()))
            doc["order"] = self.order
        elif self.kind == "pickle":
            doc.update(offset=self.offset, length=self.length)
            doc["buffers"] = [b.to_json() for b in self.buffers]
            if self.member is not None:
                doc["member"] = self.member
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> BlobRef:
        if not isinstance(doc, dict):
            raise _Malformed("a blob reference must be an object")
        kind = _get(doc, "kind", str)
        if kind not in KINDS:
            raise _Malformed(f"unknown blob kind {kind!r}")
        checksum = _get(doc, "checksum", dict)
        algo = _get(checksum, "algo", str)
        hexdigest = _get(checksum, "hex", str)
        expected_algo = blobs.SHA256 if kind == "pickle" else blobs.XXH3
        if algo != expected_algo:
            raise _Malformed(f"a {kind} blob must use {expected_algo}, not {algo!r}")
        address = _get(doc, "blob", str)
        if not blobs.valid_address(address, algo) or hexdigest != address:
            raise _Malformed(f"bad blob address {address!r}")
        size = _nonneg(doc, "size")
        if kind == "hdf5":
            offset = _nonneg(doc, "offset")
            shape = _get(doc, "shape", list)
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
                raise _Malformed("bad array shape")
            order = _get(doc, "order", str)
            if order not in ("C", "F"):
                raise _Malformed(f"bad array order {order!r}")
            dtype = _get(doc, "dtype", (str, list))
            return cls(
                kind, address, algo, hexdigest, size, offset, None, dtype, tuple(shape), order
            )
        if kind == "pickle":
            offset = _nonneg(doc, "offset")
            length = _nonneg(doc, "length")
            if offset + length > size:
                raise _Malformed("pickle stream lies outside its blob")
            buffers = tuple(cls.from_json(b) for b in _get(doc, "buffers", list))
            if any(b.kind != "raw" for b in buffers):
                raise _Malformed("out-of-band buffers must be raw blobs")
            member = doc.get("member")
            if member is not None and not isinstance(member, str):
                raise _Malformed("field 'member' must be str")
            return cls(
                kind, address, algo, hexdigest, size, offset, length, buffers=buffers, member=member
            )
        return cls(kind, address, algo, hexdigest, size)

    def walk(self) -> Iterator[BlobRef]:
        """This reference and those of its buffers."""
        yield self
        for b in self.buffers:
            yield from b.walk()


def _seed_base(doc: Mapping[str, Any]) -> int | None:
    if "seed_base" not in doc:
        return None
    return int(_get(doc, "seed_base", int))


def _refs(doc: Any, key: str, optional: bool = False) -> dict[str, BlobRef]:
    if optional and key not in doc:
        return {}
    section = _get(doc, key, dict)
    return {str(name): BlobRef.from_json(ref) for name, ref in section.items()}


@dataclass
class Manifest:
    """One checkpoint: what it stores, and where.  ``path`` is where it was read from."""

    id: str
    cell_id: str
    key: str
    created: str
    complete: bool
    values: dict[str, BlobRef]
    extras: dict[str, BlobRef]
    failed: dict[str, str]
    info: dict[str, Any]
    versions: dict[str, str]
    bytes: int
    bytes_written: int
    format: int = FORMAT_VERSION
    signature: str | None = None
    path: PurePath | None = field(default=None, compare=False)
    # Values of other checkpoints that this one's values share objects with, by
    # "<checkpoint id>/<name>" (see ipy_resume.engine.sharing); absent from older manifests.
    links: dict[str, BlobRef] = field(default_factory=dict)
    # The store's base seed (see info.py), one of its redundant copies; absent from older
    # manifests, and ignored by readers that predate it.
    seed_base: int | None = None
    # In the kernel that saved it, until the digests of its large arrays are in (see
    # ipy_resume.store.late): waits for them, False when they never came.  Never stored.
    late: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def created_at(self) -> _dt.datetime:
        return _dt.datetime.fromisoformat(self.created.replace("Z", "+00:00"))

    def describe(self) -> str:
        return describe(self.cell_id, self.id)

    def blob_refs(self) -> list[BlobRef]:
        """Every blob referenced (buffers included), one per address, in manifest order."""
        seen: dict[str, BlobRef] = {}
        for section in (self.values, self.extras, self.links):
            for ref in section.values():
                for r in ref.walk():
                    seen.setdefault(r.blob, r)
        return list(seen.values())

    def to_json(self) -> dict[str, Any]:
        """The document without its signature."""
        doc: dict[str, Any] = {
            "format": self.format,
            "id": self.id,
            "cell_id": self.cell_id,
            "key": self.key,
            "created": self.created,
            "complete": self.complete,
            "values": {k: v.to_json() for k, v in self.values.items()},
            "extras": {k: v.to_json() for k, v in self.extras.items()},
            "failed": dict(self.failed),
            "info": self.info,
            "versions": dict(self.versions),
            "bytes": self.bytes,
            "bytes_written": self.bytes_written,
        }
        if self.links:  # written only when used, so older readers' documents are unchanged
            doc["links"] = {k: v.to_json() for k, v in self.links.items()}
        if self.seed_base is not None:
            doc["seed_base"] = self.seed_base
        return doc

    @classmethod
    def from_json(cls, doc: Any, path: PurePath | None = None) -> Manifest:
        """Build from a verified document; raises ValueError when it is malformed."""
        if not isinstance(doc, dict):
            raise _Malformed("a manifest must be an object")
        ident = _get(doc, "id", str)
        if not _ID.fullmatch(ident):
            raise _Malformed(f"bad checkpoint id {ident!r}")
        failed = _get(doc, "failed", dict)
        versions = _get(doc, "versions", dict)
        if not all(isinstance(v, str) for v in [*failed.values(), *versions.values()]):
            raise _Malformed("failed reasons and versions must be strings")
        signature = doc.get("signature")
        return cls(
            id=ident,
            cell_id=_get(doc, "cell_id", str),
            key=_get(doc, "key", str),
            created=_get(doc, "created", str),
            complete=_get(doc, "complete", bool),
            values=_refs(doc, "values"),
            extras=_refs(doc, "extras"),
            failed=dict(failed),
            info=_get(doc, "info", dict),
            versions=dict(versions),
            bytes=_nonneg(doc, "bytes"),
            bytes_written=_nonneg(doc, "bytes_written"),
            format=_get(doc, "format", int),
            signature=signature if isinstance(signature, str) else None,
            path=path,
            links=_refs(doc, "links", optional=True),
            seed_base=_seed_base(doc),
        )


# ---------------------------------------------------------------------------
# signing, reading, writing


def signer(key: bytes) -> str:
    """A public fingerprint of *key*, written into each manifest it signs.

    With ``checksum`` it tells a manifest of ours that was damaged (heal it) from one
    signed under another key (keep it: its owner may share the store, or ``trust`` it).

    >>> len(signer(bytes(32)))
    16
    """
    return hashlib.sha256(b"ipy_resume signer\0" + key).hexdigest()[:16]


def checksum(doc: Mapping[str, Any]) -> str:
    """sha256 of the document without its ``signature`` and ``checksum``: accidental damage.

    Both fields are inside the signed content, so readers that predate them verify
    such manifests as before.
    """
    body = {k: v for k, v in doc.items() if k not in ("signature", "checksum")}
    return hashlib.sha256(canonical_json(body)).hexdigest()[:32]


def encode(manifest: Manifest, key: bytes) -> bytes:
    """The signed file content of *manifest* (sets ``manifest.signature``).

    The three canonical forms a save needs (without ``checksum`` for the checksum, with
    it for the signature, with the signature for the file) differ only in top-level
    entries: each top-level value is encoded once and the three are joined from those.
    A manifest of format 3 or later is stored as the last of them; an older one (``trust``
    signs it again) keeps the indented layout its readers insist on.

    >>> encode(m, key).startswith(b'{"bytes":')  # doctest: +SKIP
    True
    """
    doc = manifest.to_json()
    doc["signer"] = signer(key)
    try:
        pieces = {k: _CANONICAL.encode(v) for k, v in doc.items()}
    except (TypeError, ValueError) as exc:  # (all but the info is ours)
        raise TypeError(f"info must be JSON-serialisable: {exc}") from exc
    digest = hashlib.sha256(_joined(pieces).encode("utf-8")).hexdigest()[:32]
    doc["checksum"] = digest
    pieces["checksum"] = _quoted(digest)
    manifest.signature = signing.sign(key, _joined(pieces).encode("utf-8"))
    doc["signature"] = manifest.signature
    if manifest.format >= COMPACT_FORMAT:
        pieces["signature"] = _quoted(manifest.signature)
        return (_joined(pieces) + "\n").encode("utf-8")
    return _file_bytes(doc)


def _joined(pieces: Mapping[str, str]) -> str:
    """The canonical JSON of a document from its top-level values' canonical JSON."""
    return "{" + ",".join([_quoted(k) + ":" + pieces[k] for k in sorted(pieces)]) + "}"


def _compact_bytes(doc: Mapping[str, Any]) -> bytes:
    """The file of a manifest of format 3 or later: its canonical JSON and a newline."""
    return canonical_json(doc) + b"\n"


def _file_bytes(doc: Mapping[str, Any]) -> bytes:
    # The one layout a manifest file of format 1 or 2 may have: reading insists on it
    # byte for byte, so a change anywhere in the file, even in whitespace, is detected.
    parts: list[str] = []
    try:
        _lay_out(doc, "\n", parts)
    except _NotPlain:
        return _LAYOUT.encode(doc).encode("utf-8") + b"\n"
    parts.append("\n")
    return "".join(parts).encode("utf-8")


_quoted = json.encoder.encode_basestring  # (ensure_ascii=False: what _LAYOUT writes a str with)


class _NotPlain(Exception):
    """A document :func:`_lay_out` leaves to the json module (a key that is not a str)."""


def _lay_out(value: Any, indent: str, parts: list[str]) -> None:
    """Append exactly what ``_LAYOUT`` writes for *value*, its leaves written by the C encoder.

    json writes an indented document in pure Python, one generator step per item, which
    cost a small save more than signing it; here only the containers are walked in Python.
    *indent* is the newline and indentation of *value*'s own line.
    """
    if isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        if not all(type(k) is str for k in value):
            raise _NotPlain
        inner = indent + " "
        sep = "{" + inner
        for k in sorted(value):
            parts.append(sep)
            parts.append(_quoted(k))
            parts.append(": ")
            _lay_out(value[k], inner, parts)
            sep = "," + inner
        parts.append(indent + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        inner = indent + " "
        sep = "[" + inner
        for item in value:
            parts.append(sep)
            _lay_out(item, inner, parts)
            sep = "," + inner
        parts.append(indent + "]")
    elif isinstance(value, str):
        parts.append(_quoted(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float) and math.isfinite(value):
        parts.append(float.__repr__(value))
    else:  # NaN and infinities (refused there), and whatever json makes of other types
        raise _NotPlain


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for k, v in pairs:
        if k in doc:
            raise ValueError(f"duplicate key {k!r}")
        doc[k] = v
    return doc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _trust_hint(store: str) -> str:
    return f"Run 'ipy-resume trust --store {shlex.quote(store)}' to re-sign it if you trust it."


def parse(data: bytes, rel: str) -> dict[str, Any]:
    try:
        doc = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:120]
        raise ManifestError(
            f"checkpoint manifest {rel} is unreadable ({reason}); it is ignored and the cell "
            "will execute again. Run 'ipy-resume verify' to list others.",
            path=rel,
        ) from None
    if not isinstance(doc, dict):
        raise ManifestError(
            f"checkpoint manifest {rel} is not a JSON object; it is ignored and the cell will "
            "execute again. Run 'ipy-resume verify' to list others.",
            path=rel,
        )
    fmt = doc.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise ManifestError(
            f"checkpoint manifest {rel} has no valid format version ({fmt!r}); it is ignored "
            "and the cell will execute again. Run 'ipy-resume verify' to list others.",
            path=rel,
        )
    if fmt > FORMAT_VERSION:
        raise FormatTooNew(
            f"{describe(doc.get('cell_id'), doc.get('id'))} in {rel} has format {fmt}, but this "
            f"ipy_resume reads format {FORMAT_VERSION} at most; the cell will execute again. "
            "Upgrade ipy_resume to use it.",
            path=rel,
            found=fmt,
            supported=FORMAT_VERSION,
        )
    return doc


def _build(doc: dict[str, Any], path: PurePath | None, rel: str) -> Manifest:
    try:
        return Manifest.from_json(doc, path)
    except ValueError as exc:
        raise ManifestError(
            f"checkpoint manifest {rel} is malformed ({exc}); it is ignored and the cell will "
            "execute again. Run 'ipy-resume verify' to list others.",
            path=rel,
        ) from None


def decode(
    data: bytes,
    key: bytes,
    *,
    rel: str = "manifest",
    store: str = ".",
    path: PurePath | None = None,
) -> Manifest:
    """Parse and verify a manifest's bytes.

    *rel* names it in messages (its path relative to the store root), *store*
    is the store folder named in the ``trust`` hint.
    """
    doc = parse(data, rel)
    signature = doc.pop("signature", None)
    what = describe(doc.get("cell_id"), doc.get("id"))

    def damaged(why: str) -> str:
        # Not str.format: the damaged cell_id may hold braces of its own.
        return (
            f"{what} in {rel} is damaged ({why}); it is ignored, the cell will execute again "
            "and the file is moved to quarantine/ once a sound checkpoint replaces it. "
            "Run 'ipy-resume verify' to list others."
        )

    try:
        signed = canonical_json(doc)
        sound = "checksum" not in doc or doc["checksum"] == checksum(doc)
    except ValueError:  # a number damaged into one out of range (1e999): no JSON has it
        raise ManifestError(damaged("it holds an impossible number"), path=rel) from None
    if not sound:
        raise ManifestError(damaged("its checksum does not match"), path=rel)
    if signature is None:
        raise Untrusted(
            f"{what} in {rel} is unsigned; it is not trusted and the cell will execute again. "
            + _trust_hint(store),
            path=rel,
        )
    if not signing.verify(key, signed, signature):
        if "checksum" in doc and doc.get("signer") == signer(key):
            # intact content signed by this key: only the signature itself was hit
            raise ManifestError(damaged("its signature was altered"), path=rel)
        raise Untrusted(
            f"{what} in {rel} was signed under another key (another user or machine, or it "
            "was altered); it is not trusted and the cell will execute again. "
            + _trust_hint(store),
            path=rel,
        )
    doc["signature"] = signature
    built = _build(doc, path, rel)
    # (one layout per format: a change anywhere in the file, even in whitespace, shows)
    fmt = doc.get("format")
    laid_out = _compact_bytes if isinstance(fmt, int) and fmt >= COMPACT_FORMAT else _file_bytes
    if data != laid_out(doc):
        raise ManifestError(
            f"{what} in {rel} was altered (its bytes differ from the signed layout, though "
            "its content is intact); it is ignored and the cell will execute again. "
            "Run 'ipy-resume verify' to list others.",
            path=rel,
        )
    return built


def decode_unverified(data: bytes, rel: str, path: PurePath | None = None) -> Manifest:
    """A manifest's contents read WITHOUT checking its signature: never load values from it.

    For what only needs its blob list (gc keeps the blobs of a store signed under another
    key) and for ``trust``, which checks every blob before signing it again.  Raises
    :class:`ManifestError` when the document is not a well-formed manifest.

    >>> decode_unverified(path.read_bytes(), "manifests/a/k/id.json").blob_refs()  # doctest: +SKIP
    [BlobRef(...)]
    """
    doc = parse(data, rel)
    doc.pop("signature", None)
    return _build(doc, path, rel)
