"""``store.json``: the store's format and base seed, kept so that no single loss changes it.

The base seed feeds every default seed (``rng.derive_seed``) and so every key: if it
changed, every checkpoint of the store would miss and every default-seeded draw
would differ.  It is therefore kept in three places:

* ``store.json`` — ``{"format", "created", "seed_base", "check", "copies"}``;
* ``store.backup.json`` — the same bytes;
* ``seed_base`` of every manifest saved since (signed with the checkpoint).

``check`` is a sha256 of the other fields, so a flipped digit is found rather than
used.  Each file also carries the document :data:`COPIES` more times in ``copies``,
each on its own line with its own ``check``: a byte flipped anywhere spoils the file
as a whole and at most one of those, so a file with a few flipped bytes still gives
the seed (its state is then ``"mended"``), also when every manifest was damaged too.
Reading takes the first sound copy in that order (the manifests vote: the value most
of them carry); whichever copy was missing or damaged is written again.  A file that
cannot be read at all is moved to ``quarantine/`` first (see ``InfoKeeper._resolve``).

Older files still read: a single document without ``copies`` (rewritten with them on
first use), and one made before ``check`` existed (``"legacy"``).  A file with copies
is still one JSON object whose ``check`` covers them, so older versions read it too.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ipy_resume.store import fsio

__all__ = [
    "BACKUP",
    "COPIES",
    "FILE",
    "Copy",
    "decode_copy",
    "encode",
    "new",
    "read_copy",
    "recover",
]

FILE = "store.json"
BACKUP = "store.backup.json"
STORE_FORMAT_VERSION = 1
COPIES = 3
"""Spare copies of the document inside each file: with the backup's, any five flipped
bytes leave one sound."""
_OWN = ("check", "copies")  # the fields that are not the document's own
_LEGACY_FIELDS = {"format", "created", "seed_base"}  # all a store.json had before its check
# one spare copy: a JSON object holding no other (a flipped brace spoils only its own)
_SPARE = re.compile(rb"\{[^{}]*\}")


@dataclass
class Copy:
    """One copy of the store's info as found on disk.

    ``state`` is ``"ok"``, ``"legacy"`` (sound JSON without ``check``: written before
    it existed, so a flip cannot be detected), ``"mended"`` (damaged, but one of the
    spare copies it holds is sound: ``doc`` is that one's and ``problem`` says what was
    wrong), ``"missing"``, ``"denied"`` (the file may be sound, but reading it was not
    permitted) or ``"damaged"``.  ``doc`` never holds ``check`` or ``copies``.
    """

    name: str
    state: str
    doc: dict[str, Any] | None = None
    data: bytes = b""
    problem: str = ""

    @property
    def usable(self) -> bool:
        return self.state in ("ok", "legacy", "mended")


def _own(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in _OWN}


def _check(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "check"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _compact(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(", ", ": "))


def encode(doc: dict[str, Any]) -> bytes:
    """The bytes of ``store.json`` (and of its backup) for *doc*: one JSON object with its
    ``check``, holding :data:`COPIES` spare copies, one a line, each with its own.

    >>> data = encode({"format": 1, "created": "2026", "seed_base": 7})
    >>> decode_copy("store.json", data).state, data.count(b'"seed_base": 7')
    ('ok', 4)
    """
    own = _own(doc)
    spare = {**own, "check": _check(own)}
    body = {**own, "copies": [spare] * COPIES}
    body["check"] = _check(body)
    # laid out by hand so that each spare copy is one line a reader can pick out alone
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(body.items()) if k != "copies"]
    spares = ",\n".join(f"  {_compact(spare)}" for _ in range(COPIES))
    lines.insert(1, f' "copies": [\n{spares}\n ]')  # (after "check", as sorted)
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("utf-8")


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
        return unreadable(name, exc)
    return decode_copy(name, data)


def permission_denied(exc: BaseException) -> bool:
    """True when *exc* is a permission error (EACCES, EPERM): the only cause for which a
    message may tell the user to check permissions.

    >>> permission_denied(OSError(errno.EACCES, "Permission denied")), permission_denied(ValueError())
    (True, False)
    """
    return isinstance(exc, OSError) and (
        isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM)
    )


def unreadable(name: str, exc: OSError) -> Copy:
    """The copy *name* that could not be read because of *exc*: ``"denied"`` for a
    permission error, else ``"damaged"``.

    >>> unreadable("store.json", PermissionError(13, "Permission denied")).state
    'denied'
    """
    state = "denied" if permission_denied(exc) else "damaged"
    return Copy(name, state, problem=f"cannot be read ({exc.strerror or exc})")


def decode_copy(name: str, data: bytes) -> Copy:
    """Check the bytes of one copy called *name*; never raises for damage.

    >>> decode_copy("store.json", b"{").state
    'damaged'
    """
    whole = _decode(data, spare=False)
    if isinstance(whole, Copy):
        whole.name, whole.data = name, data
        return whole
    for found in _SPARE.finditer(data):
        spare = _decode(found.group(), spare=True)
        if isinstance(spare, Copy) and spare.state == "ok":
            problem = f"{whole} (a spare copy inside it is sound)"
            return Copy(name, "mended", spare.doc, data, problem=problem)
    return Copy(name, "damaged", data=data, problem=whole)


def _decode(data: bytes, *, spare: bool) -> Copy | str:
    """The sound (or legacy) document in *data*, or what is wrong with it."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "is not valid JSON"
    if not isinstance(doc, dict):
        return "is not a JSON object"
    fmt, seed = doc.get("format"), doc.get("seed_base")
    if not (_is_int(fmt) and _is_int(seed) and fmt >= 1):
        return "lacks a valid format or seed_base"
    if "check" not in doc:
        # (a spare copy always has its check: without one it is no copy of ours; nor is a
        # document with other fields, such as a "check" whose name a flip changed)
        if spare or not set(doc) <= _LEGACY_FIELDS:
            return "lacks its check"
        return Copy("", "legacy", _own(doc))
    if doc["check"] != _check(doc) or (spare and "copies" in doc):
        return "failed its checksum"
    return Copy("", "ok", _own(doc))


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
    if copy.state == "denied":
        return f"{copy.name} {what}; check the permissions of {os.fspath(root)} and of the file"
    return (
        f"{copy.name} {what}; the store's base seed is kept in the other copy and in the "
        f"manifests, so nothing is lost: it is written again the next time a cell runs "
        f"(or now by 'ipy-resume gc --store {os.fspath(root)}')"
    )
