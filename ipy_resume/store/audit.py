"""``verify``: every file of a store checked, referenced or not, each problem with a remedy.

What each file is, what its loss or damage means, and how it heals:

===========================  ==============================================================
``store.json`` and           the base seed of default seeds.  Kept in both files (each
``store.backup.json``        holding spare copies of it) and in every manifest; a damaged
                             or missing copy is written again from another the next time
                             a cell runs (or by ``gc``), one unreadable moved to
                             quarantine/ first.
``journal.sqlite`` (+ WAL)   the timeline.  A damaged journal is moved to quarantine/ and,
                             like a lost one, rebuilt from the manifests (restores and
                             failed runs are lost, checkpoints are not).
``lock``                     advisory content only; recreated when missing.
``manifests/…/<id>.json``    one checkpoint.  A damaged one is ignored (its cell executes
                             once) and moved to quarantine/ when a sound one replaces it.
``objects/ab/cdef…``         a blob, named by the digest of its bytes, so each is checked
                             against its own name.  A damaged blob is quarantined when a
                             load finds it, and written again by the re-execution.
``quarantine/``              what failed verification; nothing reads it; ``gc`` empties it.
===========================  ==============================================================

Quarantined files, temporary leftovers and a missing journal are *notes*, not
problems: the store is sound and ``gc`` tidies them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ipy_resume.store import blobs, fsio, info, journal, lock
from ipy_resume.store.backend import Backend
from ipy_resume.store.fsio import FormatTooNew, StoreError
from ipy_resume.store.manifest import BlobRef, Manifest

if TYPE_CHECKING:
    from ipy_resume.store.parts import StoreParts

__all__ = ["Audit", "Problem", "audit", "check_manifest", "refusal"]

_TEMP_FOLDERS = ("manifests", "objects")
_KNOWN_TOP = {
    info.FILE,
    info.BACKUP,
    journal.JOURNAL_FILE,
    journal.JOURNAL_FILE + "-wal",
    journal.JOURNAL_FILE + "-shm",
    lock.LOCK_FILE,
    "objects",
    "manifests",
    "quarantine",
    "pending",  # commit records of saves being made durable (store/pending.py)
}


@dataclass
class Problem:
    """One thing wrong with one file: ``path`` (relative to the store) and a line of text."""

    path: str
    text: str
    kind: str  # store-info, journal, manifest, blob, orphan-blob, stray


@dataclass
class Audit:
    """What :func:`audit` found; ``gc`` acts on ``broken`` and ``bad_blobs``."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # checkpoints that can never load (a blob missing or bad) -> their bad blobs
    broken: dict[PurePath, list[str]] = field(default_factory=dict)
    bad_blobs: dict[str, str] = field(default_factory=dict)  # address -> what is wrong
    strays: list[str] = field(default_factory=list)  # keys in objects/, manifests/ of no use
    blobs_checked: int = 0
    files_checked: int = 0

    @property
    def lines(self) -> list[str]:
        return [p.text for p in self.problems]


def _uses(refs: dict[str, list[Manifest]], address: str) -> str:
    users = refs.get(address, [])
    first = users[0].describe()
    more = f" and {len(users) - 1} other checkpoint(s)" if len(users) > 1 else ""
    return f"{first}{more}"


def audit(store: StoreParts) -> Audit:
    """Check every file of *store* without changing any (a folder or a bucket, by key).

    >>> print("\\n".join(audit(Store("s").parts).lines) or "sound")  # doctest: +SKIP
    sound
    """
    found = Audit()
    backend = store.ctx.backend
    # (a bucket's keys have no folders to list cheaply: there, the store must exist)
    if not (backend.names("") if backend.local_files else store.ctx.exists()):
        return found
    gc_hint = f"'ipy-resume gc --store {store.ctx.location}'"

    manifests = list(backend.list("manifests"))
    _check_info(store, found, gc_hint, bool(manifests))
    if backend.local_files:  # a bucket's timeline is immutable event objects, no database
        _check_journal(backend, found, gc_hint, bool(manifests))

    # -- manifests
    refs: dict[str, list[Manifest]] = defaultdict(list)
    expected: dict[str, BlobRef] = {}
    newer = False
    for obj in manifests:
        rel = obj.key
        path = store.ctx.path_of(rel)
        if not rel.endswith(".json") or rel.count("/") != 3:
            found.problems.append(
                Problem(rel, f"{rel} is not a checkpoint manifest; {gc_hint} removes it", "stray")
            )
            found.strays.append(rel)
            continue
        found.files_checked += 1
        unusable = check_manifest(store, path, rel, found, refs, expected)
        newer = newer or isinstance(unusable, FormatTooNew)

    _check_blobs(store, found, gc_hint, refs, expected, newer)

    # -- everything else
    quarantined = sum(1 for _ in backend.list(blobs.QUARANTINE))
    if quarantined:
        what = "file(s)" if backend.local_files else "object(s)"
        found.notes.append(
            f"{quarantined} {what} in quarantine/ (found damaged and set aside; nothing "
            f"reads them): {gc_hint} deletes them"
        )
    # temp files of interrupted writes at the top, in manifests/ and objects/
    temps = sum(
        1
        for o in backend.leftovers()
        if o.key.partition("/")[0] in _TEMP_FOLDERS or "/" not in o.key
    )
    if backend.local_files:  # (a bucket's top is every key: there is no folder to list)
        for name in backend.names(""):
            if not fsio.is_temp_name(name) and name not in _KNOWN_TOP:
                found.notes.append(f"{name} is not a file of ipy_resume; it is left alone")
    if temps:
        found.notes.append(
            f"{temps} temporary file(s) left by interrupted writes: {gc_hint} removes them"
        )
    return found


def _check_info(store: StoreParts, found: Audit, gc_hint: str, has_manifests: bool) -> None:
    """``store.json`` and its backup: sound, equal, and of a format this version reads."""
    where = store.ctx.location
    primary, backup = store.info.copies()
    sound = [c for c in (primary, backup) if c.usable]
    for copy in (primary, backup):
        found.files_checked += copy.state != "missing"
        if copy.doc is not None and copy.doc["format"] > info.STORE_FORMAT_VERSION:
            found.problems.append(
                Problem(
                    copy.name,
                    f"{copy.name} has format {copy.doc['format']}, but this ipy_resume reads "
                    f"format {info.STORE_FORMAT_VERSION} at most; upgrade ipy_resume",
                    "store-info",
                )
            )
        elif copy.state in ("damaged", "mended", "denied") or (copy.state == "missing" and sound):
            if copy.name == info.BACKUP and copy.state == "missing" and primary.state == "legacy":
                # a store from before the backup existed: made on its next use, nothing lost
                found.notes.append(f"{info.BACKUP} will be written when the store is next used")
                continue
            found.problems.append(Problem(copy.name, info.describe(where, copy), "store-info"))
    if not sound and primary.state == "missing" and has_manifests:
        found.problems.append(Problem(info.FILE, info.describe(where, primary), "store-info"))
    if len(sound) == 2 and sound[0].doc != sound[1].doc:
        found.problems.append(
            Problem(
                info.BACKUP,
                f"{info.BACKUP} differs from {info.FILE}; {info.FILE} is used and the backup "
                f"is written again the next time a cell runs (or by {gc_hint})",
                "store-info",
            )
        )


def _check_journal(backend: Backend, found: Audit, gc_hint: str, has_manifests: bool) -> None:
    """The journal opens and passes SQLite's check (a lost one is rebuilt when next opened)."""
    trouble = journal.check(backend)
    if trouble is not None:
        found.problems.append(
            Problem(
                journal.JOURNAL_FILE,
                f"{journal.JOURNAL_FILE} {trouble}; the timeline is rebuilt from the manifests "
                f"the next time a cell runs or the timeline is opened (or by {gc_hint}); the "
                "restores and failed runs it recorded are lost, no checkpoint is",
                "journal",
            )
        )
    elif not backend.exists(journal.JOURNAL_FILE) and has_manifests:
        found.notes.append(
            f"there is no {journal.JOURNAL_FILE}: the timeline is rebuilt from the manifests "
            "when it is next opened"
        )
    else:
        found.files_checked += backend.exists(journal.JOURNAL_FILE)


def _check_blobs(
    store: StoreParts,
    found: Audit,
    gc_hint: str,
    refs: dict[str, list[Manifest]],
    expected: dict[str, BlobRef],
    newer: bool,
) -> None:
    """Every blob, checked against its own name; the manifests' blobs that are missing.

    A bucket's blobs that no manifest names are not downloaded to be judged (``gc``
    removes them whatever their bytes).
    """
    present: set[str] = set()
    for obj in store.ctx.backend.list("objects"):
        rel = obj.key
        parts = rel.split("/")
        address = "".join(parts[1:])
        if len(parts) != 3 or not blobs.valid_address(address):
            found.problems.append(
                Problem(rel, f"{rel} is not a blob of this store; {gc_hint} removes it", "stray")
            )
            found.strays.append(rel)
            continue
        present.add(address)
        known = expected.get(address)
        if known is None and not store.ctx.backend.local_files:
            continue
        found.blobs_checked += 1
        found.files_checked += 1
        size = known.size if known is not None else obj.size
        problem = store.ctx.blobs.check(address, blobs.algo_of(address), address, size)
        if problem is None:
            continue
        found.bad_blobs[address] = problem
        if known is None:
            found.problems.append(
                Problem(
                    rel,
                    f"{rel} {problem} (its name is the digest its bytes must have); no "
                    f"checkpoint uses it, so nothing is lost: {gc_hint} removes it",
                    "orphan-blob",
                )
            )
            continue
        _broken(found, refs, address, rel, problem, gc_hint)
    for address in sorted(set(expected) - present):
        rel = store.ctx.blobs.relpath(address)
        found.bad_blobs[address] = "is missing"
        _broken(found, refs, address, rel, "is missing", gc_hint)
    if newer:
        found.broken.clear()  # gc removes nothing a newer reader might need


def _broken(
    found: Audit,
    refs: dict[str, list[Manifest]],
    address: str,
    rel: str,
    problem: str,
    gc_hint: str,
) -> None:
    """The blob *rel* that manifests need is bad: they are broken; the problem says what heals."""
    for m in refs[address]:
        if m.path is not None:
            found.broken.setdefault(m.path, []).append(address)
    found.problems.append(
        Problem(
            rel,
            f"{rel} {problem}: it holds data of {_uses(refs, address)}, which will execute again when "
            f"next run and write it again; or {gc_hint} removes the checkpoint(s) now",
            "blob",
        )
    )


def check_manifest(
    store: StoreParts,
    path: PurePath,
    rel: str,
    found: Audit,
    refs: dict[str, list[Manifest]],
    expected: dict[str, BlobRef],
) -> StoreError | None:
    """Audit one manifest file: a problem joins *found*, a sound one's blobs *refs*/*expected*.

    Shared by the local audit and the object store's. Returns the error of a manifest
    that does not verify (None for a sound, misfiled or vanished one).
    """
    try:
        m = store.reader.read_manifest(path)
    except FileNotFoundError:
        return None
    except StoreError as exc:
        found.problems.append(Problem(rel, str(exc), "manifest"))
        return exc
    if store.reader.misfiled(m, path):
        found.problems.append(
            Problem(
                rel,
                f"{m.describe()} in {rel} is filed under the wrong cell or key; it is "
                "ignored. Move it back, or delete it.",
                "manifest",
            )
        )
        return None
    for ref in m.blob_refs():
        refs[ref.blob].append(m)
        expected.setdefault(ref.blob, ref)
    return None


def refusal(m: Manifest, blob_store: Any, rel: str) -> str | None:
    """Why ``trust`` must not adopt *m*: its blobs that are missing or fail their checksum.

    *blob_store* is the store's blob store (local or remote). None when every blob verifies.

    >>> refusal(manifest, store.ctx.blobs, "manifests/a/k/id.json") is None  # doctest: +SKIP
    True
    """
    bad = [
        f"{blob_store.relpath(r.blob)} {problem}"
        for r in m.blob_refs()
        if (problem := blob_store.check(r.blob, r.algo, r.checksum, r.size))
    ]
    return f"not adopted: {m.describe()} in {rel}: " + "; ".join(bad) + "." if bad else None
