"""``store.json``: the store's format and base seed, kept so that no single loss changes it.

The base seed feeds every default seed (``rng.derive_seed``) and so every key: if it
changed, every checkpoint of the store would miss and every default-seeded draw
would differ.  It is therefore kept in three places:

* ``store.json`` — ``{"format", "created", "seed_base", "check"}``;
* ``store.backup.json`` — the same bytes;
* ``seed_base`` of every manifest saved since (signed with the checkpoint).

``check`` is a sha256 of the other fields, so a flipped digit is found rather than
used.  Reading takes the first sound copy in that order (the manifests vote: the
value most of them carry); whichever copy was missing or damaged is written again.
Stores made before ``check`` existed have a ``store.json`` without it: it is read
as before and rewritten with its ``check`` and a backup the first time it is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ipy_resume.store import fsio

__all__ = ["BACKUP", "FILE", "Copy", "decode_copy", "encode", "new", "read_copy", "recover"]

FILE = "store.json"
BACKUP = "store.backup.json"
STORE_FORMAT_VERSION = 1


@dataclass
class Copy:
    """One copy of the store's info as found on disk.

    ``state`` is ``"ok"``, ``"legacy"`` (sound JSON without ``check``: written before
    it existed, so a flip cannot be detected), ``"missing"`` or ``"damaged"``.
    """

    name: str
    state: str
    doc: dict[str, Any] | None = None
    data: bytes = b""
    problem: str = ""

    @property
    def usable(self) -> bool:
        return self.state in ("ok", "legacy")


def _check(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "check"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def encode(doc: dict[str, Any]) -> bytes:
    """The bytes of ``store.json`` (and of its backup) for *doc*, with its ``check``.

    >>> b'"check"' in encode({"format": 1, "created": "2026", "seed_base": 7})
    True
    """
    body = {k: v for k, v in doc.items() if k != "check"}
    body["check"] = _check(body)
    return json.dumps(body, indent=1, sort_keys=True).encode("utf-8") + b"\n"


def new(created: str) -> dict[str, Any]:
    """The info of a new store: a random 63-bit base seed.

    >>> new("2026-01-01T00:00:00.000Z")["format"]
    1
    """
    return {"format": STORE_FORMAT_VERSION, "created": created, "seed_base": secrets.randbits(63)}


def read_copy(path: Path) -> Copy:
    """Read and check one copy (``store.json`` or its backup); never raises for damage.

    >>> read_copy(Path("/nonexistent/store.json")).state
    'missing'
    """
    name = path.name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Copy(name, "missing")
    except OSError as exc:
        return Copy(name, "damaged", problem=f"cannot be read ({exc.strerror or exc})")
    return decode_copy(name, data)


def decode_copy(name: str, data: bytes) -> Copy:
    """Check the bytes of one copy called *name*; never raises for damage.

    >>> decode_copy("store.json", b"{").state
    'damaged'
    """
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Copy(name, "damaged", data=data, problem="is not valid JSON")
    if not isinstance(doc, dict):
        return Copy(name, "damaged", data=data, problem="is not a JSON object")
    fmt, seed = doc.get("format"), doc.get("seed_base")
    if not (_is_int(fmt) and _is_int(seed) and fmt >= 1):
        return Copy(name, "damaged", data=data, problem="lacks a valid format or seed_base")
    if "check" not in doc:
        return Copy(name, "legacy", dict(doc), data)
    if doc["check"] != _check(doc):
        return Copy(name, "damaged", data=data, problem="failed its checksum")
    return Copy(name, "ok", dict(doc), data)


def first_doc(copies: tuple[Copy, Copy], store: str) -> dict[str, Any] | None:
    """The document of the first sound copy (``store.json``, then its backup), or None.

    Raises :class:`~.fsio.FormatTooNew` when either is of a format newer than this
    version reads: nothing of such a store may be rewritten. *store* names it in the message.

    >>> first_doc((read_copy(root / FILE), read_copy(root / BACKUP)), "s")  # doctest: +SKIP
    {'format': 1, ...}
    """
    for copy in copies:
        if copy.doc is not None and copy.doc["format"] > STORE_FORMAT_VERSION:
            raise fsio.FormatTooNew(
                f"the store {store} has format {copy.doc['format']}, but this "
                f"ipy_resume reads format {STORE_FORMAT_VERSION} at most; upgrade ipy_resume "
                "or use another store",
                path=copy.name,
                found=copy.doc["format"],
                supported=STORE_FORMAT_VERSION,
            )
    return next((c.doc for c in copies if c.doc is not None), None)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def recover(copies: Iterable[tuple[str, int | None]]) -> dict[str, Any] | None:
    """The store's info rebuilt from the manifests' ``(created, seed_base)``, or None.

    The base seed most manifests carry wins (they are signed, so a damaged one is never
    read); ``created`` is the oldest such manifest's, so every process rebuilds the same.

    >>> recover([("2026-01-02", 5), ("2026-01-01", 5), ("2026-01-03", None)])
    {'format': 1, 'created': '2026-01-01', 'seed_base': 5}
    """
    votes: Counter[int] = Counter()
    first: dict[int, str] = {}
    for created, seed in copies:
        if _is_int(seed):
            votes[seed] += 1
            first[seed] = min(first.get(seed, created), created)
    if not votes:
        return None
    seed, _ = votes.most_common(1)[0]
    return {"format": STORE_FORMAT_VERSION, "created": first[seed], "seed_base": seed}


def write(path: Path, doc: dict[str, Any], *, exclusive: bool = False) -> None:
    """Write one copy atomically (``exclusive``: only when *path* does not exist yet)."""
    with fsio.atomic_write(path, exclusive=exclusive) as f:
        f.write(encode(doc))


def describe(root: str | os.PathLike[str], copy: Copy) -> str:
    """One line for ``verify`` about a damaged or missing copy, saying how it heals."""
    what = "is missing" if copy.state == "missing" else copy.problem
    return (
        f"{copy.name} {what}; the store's base seed is kept in the other copy and in the "
        f"manifests, so nothing is lost: it is written again the next time a cell runs "
        f"(or now by 'ipy-resume gc --store {os.fspath(root)}')"
    )
