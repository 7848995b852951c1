"""``gc``: retention by count and size, and removal of everything unreferenced.

What ``gc`` removes, in this order (so a crash at any point leaves a sound
store, at worst with orphans for the next ``gc``):

0. what ``verify`` finds is healed first: a damaged or missing ``store.json`` (or
   backup) is written again, a damaged or lost journal rebuilt from the manifests;
1. checkpoints dropped by the retention rules (their manifests);
2. unreadable or damaged manifests, checkpoints whose blobs are missing or fail
   their checksum (they can never be restored: their cells execute again), and
   files in ``objects/`` or ``manifests/`` that are not part of the store;
3. blobs no kept manifest refers to (damaged ones included);
4. temporary files left by interrupted writes (``.tmp-*``);
5. everything in ``quarantine/``;
6. folders left empty.

Retention rules, applied only to checkpoints signed under the user's key:

* ``keep_last=N`` keeps the N newest checkpoints **of each CELL_ID** (all keys
  of a cell together, complete or not) and removes the older ones.  Per cell is
  the useful reading: a store-wide count would let one busy loop evict every
  other cell's only checkpoint.
* ``max_size=BYTES`` then removes the oldest remaining checkpoints, store-wide,
  until the blobs and manifests still referenced fit in BYTES.  It never
  removes the newest checkpoint of a CELL_ID (that is what a restart resumes
  from); when the budget cannot be met without doing so, the report says so.

Blobs shared by several checkpoints are freed only when the last checkpoint
referring to them goes.  Manifests written under another key (or unsigned,
or tampered) are never removed and their blobs are kept: the user may still
adopt the store with ``ipy-resume trust``.  When a manifest of a newer format
is present no blob is removed at all, because this version cannot know which
blobs it refers to.

``gc`` runs under the exclusive store lock (see :mod:`.lock`), so it never
deletes a blob a concurrent save is about to commit a manifest for.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ipy_resume.runtime import units
from ipy_resume.store import blobs, manifest, pending
from ipy_resume.store.audit import audit
from ipy_resume.store.backend import Backend, ObjectInfo
from ipy_resume.store.fsio import FormatTooNew, ManifestError, StoreError, Untrusted
from ipy_resume.store.journal import Journal
from ipy_resume.store.manifest import Manifest

if TYPE_CHECKING:
    from ipy_resume.store.parts import StoreParts

__all__ = [
    "GC_USAGE",
    "GcReport",
    "Scan",
    "collect",
    "count_argument",
    "format_size",
    "parse_gc_words",
    "parse_size",
    "scan_manifests",
    "size_argument",
]

UNLOCKED_GRACE = 3600.0
"""Without a working lock, unreferenced files younger than this (seconds) are spared."""

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from a size such as ``500M``, ``2G``, ``1.5GB``, ``800k`` or ``12345`` (binary units).

    >>> parse_size("500M"), parse_size("2G"), parse_size("1024")
    (524288000, 2147483648, 1024)
    """
    match = _SIZE.fullmatch(text)
    if not match or (match.group(3) and not match.group(2) and match.group(3).lower() != "b"):
        raise ValueError(f"bad size {text!r}: give a number with an optional K, M, G or T")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(value: int) -> str:
    """A short binary size, in the units ``--max-size`` takes: ``1.5 KiB``.

    >>> format_size(1536)
    '1.5 KiB'
    """
    return units.format_size(value, base=1024)


def size_argument(text: str) -> int:
    """:func:`parse_size` for argparse (a bad size is a usage error).

    >>> size_argument("2G")
    2147483648
    """
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count_argument(text: str) -> int:
    """A ``--keep-last`` count for argparse: an integer of at least 1.

    >>> count_argument("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"--keep-last needs a whole number of at least 1, got {text!r}"
        )
    return value


def parse_gc_words(words: list[str]) -> tuple[int | None, int | None]:
    """``(keep_last, max_size)`` from ``%checkpoint gc`` words; ValueError with usage on a mistake.

    >>> parse_gc_words(["--keep-last", "3", "--max-size", "1G"])
    (3, 1073741824)
    """

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # a usage mistake, not an exit
            raise ValueError(f"%checkpoint gc: {message}. {GC_USAGE}")

    parser = _Parser(prog="%checkpoint gc", add_help=False)
    parser.add_argument("--keep-last", type=count_argument, default=None)
    parser.add_argument("--max-size", type=size_argument, default=None)
    args = parser.parse_args(words)
    return args.keep_last, args.max_size


GC_USAGE = "usage: %checkpoint gc [--keep-last N] [--max-size SIZE]   (SIZE like 500M, 2G)"


@dataclass
class GcReport:
    """What one ``gc`` removed and kept.  ``freed`` is the total bytes removed.

    >>> GcReport().freed
    0
    """

    removed_checkpoints: list[tuple[str, str]] = field(default_factory=list)  # (id, cell_id)
    kept_checkpoints: int = 0
    checkpoint_bytes: int = 0  # manifest bytes removed
    removed_blobs: int = 0
    blob_bytes: int = 0
    removed_temp: int = 0
    temp_bytes: int = 0
    removed_quarantine: int = 0
    quarantine_bytes: int = 0
    removed_unreadable: list[str] = field(default_factory=list)  # relative paths
    removed_broken: list[str] = field(default_factory=list)  # manifests whose blobs are bad
    removed_strays: list[str] = field(default_factory=list)  # files that are no blob
    removed_journal: list[str] = field(default_factory=list)  # a damaged journal, set aside
    rebuilt_events: int = 0  # timeline events rebuilt from manifests
    untrusted_kept: int = 0
    size_after: int = 0  # bytes of kept manifests and the blobs they reference
    locked: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return self.checkpoint_bytes + self.blob_bytes + self.temp_bytes + self.quarantine_bytes

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {
            "removed_checkpoints": [{"id": i, "cell_id": c} for i, c in self.removed_checkpoints],
            "kept_checkpoints": self.kept_checkpoints,
            "removed_blobs": self.removed_blobs,
            "removed_temp": self.removed_temp,
            "removed_quarantine": self.removed_quarantine,
            "removed_unreadable": list(self.removed_unreadable),
            "removed_broken": list(self.removed_broken),
            "removed_strays": list(self.removed_strays),
            "rebuilt_events": self.rebuilt_events,
            "untrusted_kept": self.untrusted_kept,
            "freed": self.freed,
            "size_after": self.size_after,
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """Lines for a terminal."""
        cells = sorted({c for _, c in self.removed_checkpoints})
        lines = [
            f"removed {len(self.removed_checkpoints)} checkpoint(s)"
            + (f" of {', '.join(repr(c) for c in cells)}" if cells else "")
            + f", kept {self.kept_checkpoints}",
            f"removed {self.removed_blobs} unreferenced blob(s) "
            f"({format_size(self.blob_bytes)}), {self.removed_temp} temporary file(s) "
            f"({format_size(self.temp_bytes)}), {self.removed_quarantine} quarantined file(s) "
            f"({format_size(self.quarantine_bytes)})",
        ]
        if self.removed_unreadable:
            lines.append(
                f"removed {len(self.removed_unreadable)} unreadable manifest(s): "
                + ", ".join(self.removed_unreadable)
            )
        if self.removed_broken:
            lines.append(
                f"removed {len(self.removed_broken)} checkpoint(s) whose data was damaged or "
                "missing (their cells execute again when next run): "
                + ", ".join(self.removed_broken)
            )
        if self.removed_strays:
            lines.append(
                f"removed {len(self.removed_strays)} file(s) that were not part of the store: "
                + ", ".join(self.removed_strays)
            )
        if self.rebuilt_events or self.removed_journal:
            lines.append(
                f"rebuilt the timeline from the manifests ({self.rebuilt_events} event(s))"
                + (
                    "; the damaged journal went to quarantine and was deleted"
                    if self.removed_journal
                    else ""
                )
            )
        if self.untrusted_kept:
            lines.append(
                f"kept {self.untrusted_kept} checkpoint(s) not signed under your key and their "
                "blobs (adopt them with 'ipy-resume trust', or delete them by hand)"
            )
        lines.extend(self.notes)
        lines.append(
            f"freed {format_size(self.freed)}; the store now holds {format_size(self.size_after)}"
        )
        return "\n".join(lines)


@dataclass
class Scan:
    """The manifests retention judges, sorted by what may happen to them and their blobs."""

    trusted: list[Manifest] = field(default_factory=list)
    sizes: dict[PurePath, int] = field(default_factory=dict)  # manifest path -> bytes
    pinned: set[str] = field(default_factory=set)  # blobs of manifests retention never drops
    unreadable: list[PurePath] = field(default_factory=list)
    untrusted: int = 0
    newer: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)  # manifests that cannot be read


def scan_manifests(store: StoreParts) -> Scan:
    """What retention judges, from ``store.reader.scan()`` (a local store or an object store)."""
    found = Scan()
    for entry in store.reader.scan():
        error = entry.error
        if isinstance(error, OSError):  # unreadable here: its blobs are unknown, so none may go
            found.opaque.append(f"{entry.rel} ({error.strerror or error})")
            continue
        found.sizes[entry.path] = entry.size
        if isinstance(error, FormatTooNew):
            found.newer.append(entry.rel)
        elif isinstance(error, Untrusted):
            found.untrusted += 1
            if entry.unverified is not None:  # its blob list, read without trusting it
                found.pinned.update(r.blob for r in entry.unverified.blob_refs())
        elif isinstance(error, ManifestError):
            found.unreadable.append(entry.path)
        elif error is not None:
            raise error
        elif entry.manifest is not None and entry.misfiled:
            found.untrusted += 1  # misfiled: never restored, but not ours to judge
            found.pinned.update(r.blob for r in entry.manifest.blob_refs())
        elif entry.manifest is not None:
            found.trusted.append(entry.manifest)
    return found


def _blob_objects(backend: Backend) -> dict[str, ObjectInfo]:
    """Every blob of ``objects/`` by its address (keys that are no blob are left out)."""
    found: dict[str, ObjectInfo] = {}
    for obj in backend.list("objects"):
        parts = obj.key.split("/")
        if len(parts) == 3 and blobs.valid_address(parts[1] + parts[2]):
            found[parts[1] + parts[2]] = obj
    return found


def _old_enough(obj: ObjectInfo | None, grace: float, now: float) -> bool:
    if grace <= 0:
        return True
    return obj is not None and obj.age(now) >= grace


def retain(
    scan: Scan, keep_last: int | None, max_size: int | None, blob_sizes: dict[str, int]
) -> tuple[list[Manifest], list[Manifest], list[str]]:
    """Split trusted manifests into (kept, removed) and say where max_size could not be met."""
    by_cell: dict[str, list[Manifest]] = defaultdict(list)
    for m in scan.trusted:
        by_cell[m.cell_id].append(m)
    kept: list[Manifest] = []
    removed: list[Manifest] = []
    newest: set[str] = set()
    for group in by_cell.values():
        group.sort(key=manifest.order_key, reverse=True)
        newest.add(group[0].id)
        limit = len(group) if keep_last is None else keep_last
        kept.extend(group[:limit])
        removed.extend(group[limit:])
    notes: list[str] = []
    if max_size is None:
        return kept, removed, notes

    refs: dict[str, int] = defaultdict(int)
    for address in scan.pinned:
        refs[address] += 1
    for m in kept:
        for r in m.blob_refs():
            refs[r.blob] += 1

    def total() -> int:
        held = sum(blob_sizes.get(a, 0) for a, n in refs.items() if n > 0)
        return held + sum(scan.sizes.get(m.path, 0) for m in kept if m.path is not None)

    size = total()
    for m in sorted(kept, key=manifest.order_key):
        if size <= max_size:
            break
        if m.id in newest:
            continue
        kept.remove(m)
        removed.append(m)
        for r in m.blob_refs():
            refs[r.blob] -= 1
        size = total()
    if size > max_size:
        notes.append(
            f"the store still holds {format_size(size)}, more than --max-size "
            f"{format_size(max_size)}: only the newest checkpoint of each CELL_ID is left, and "
            "gc never removes those (delete a cell's checkpoints by hand if you must)"
        )
    return kept, removed, notes


def _still_broken(store: StoreParts, m: Manifest, addresses: list[str]) -> bool:
    refs = {r.blob: r for r in m.blob_refs()}
    return any(
        a in refs and store.ctx.blobs.check(a, refs[a].algo, refs[a].checksum, refs[a].size)
        for a in addresses
    )


def _heal_files(store: StoreParts, report: GcReport) -> None:
    """Write store.json and its backup again where one is damaged, and rebuild the journal."""
    try:
        store.info.heal()
    except StoreError as exc:  # a newer format: nothing of it is touched
        report.notes.append(str(exc))
    healer = Journal(store.ctx.backend, source=store.reader.manifests_except)
    try:
        healer.last()  # opening it checks it; a damaged or missing one is rebuilt
    except sqlite3.Error as exc:
        report.notes.append(f"the journal could not be checked ({exc}); run gc again later")
    finally:
        healer.close()
    report.rebuilt_events = healer.rebuilt
    report.removed_journal = [*healer.quarantined]


def _remove_leftovers(
    store: StoreParts,
    report: GcReport,
    remove: Callable[[str], bool],
    grace: float,
    now: float,
    locked: bool,
    staged: set[str],
) -> None:
    """Steps 4-6 of gc: temporary files, the quarantine, and folders left empty.

    *staged* are the keys of temporary files a live writer's staged save still names:
    spared.
    """
    backend = store.ctx.backend
    # 4. temporary files anywhere in the store
    for obj in backend.leftovers():
        if _old_enough(obj, grace, now) and obj.key not in staged and remove(obj.key):
            report.removed_temp += 1
            report.temp_bytes += obj.size

    # 5. quarantine
    for obj in backend.list(blobs.QUARANTINE):
        if remove(obj.key):
            report.removed_quarantine += 1
            report.quarantine_bytes += obj.size

    # 6. empty folders (only under a real lock: a save may be creating them)
    if locked:
        backend.prune(("manifests", "objects", blobs.QUARANTINE))


def collect(
    store: StoreParts,
    *,
    keep_last: int | None = None,
    max_size: int | None = None,
    grace: float | None = None,
    timeout: float = 60.0,
) -> GcReport:
    """Apply retention and remove everything unreferenced; see the module docstring.

    *grace* spares unreferenced blobs and temporary files younger than that many
    seconds (default: 0 under the store lock, :data:`UNLOCKED_GRACE` without one).

    >>> collect(Store("/tmp/s").parts, keep_last=3, max_size=parse_size("2G")).summary()  # doctest: +SKIP
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError("--keep-last must be at least 1 (gc never removes every checkpoint)")
    if max_size is not None and max_size < 0:
        raise ValueError("--max-size must not be negative")
    report = GcReport()
    if not store.ctx.backend.names(""):
        return report
    # What verify finds, found first and without the lock (it reads every blob): gc acts
    # on it below, checking again under the lock what it removes.
    found = audit(store)
    _heal_files(store, report)
    backend = store.ctx.backend
    with backend.lock(exclusive=True, timeout=timeout, purpose="gc") as locked:
        report.locked = locked
        if grace is None:
            grace = 0.0 if locked else UNLOCKED_GRACE
        now = time.time()
        # saves staged by kernels that died are finished first (they are checkpoints
        # like any other); a live writer's staged files are spared below
        pending.recover(store.ctx)
        staged = pending.live_temps(backend)
        scan = scan_manifests(store)
        # checkpoints that can never load: a blob is missing or fails its checksum (a
        # concurrent save may have written it again since the audit: checked again)
        broken = {
            m.path
            for m in scan.trusted
            if m.path in found.broken and _still_broken(store, m, found.broken[m.path])
        }
        scan.trusted = [m for m in scan.trusted if m.path not in broken]
        files = _blob_objects(backend)
        blob_sizes = {a: o.size for a, o in files.items()}
        kept, removed, notes = retain(scan, keep_last, max_size, blob_sizes)
        report.notes.extend(notes)
        report.untrusted_kept = scan.untrusted

        def remove(key: str) -> bool:
            try:
                backend.delete(key)
            except OSError as exc:  # e.g. a read-only folder: report it, carry on
                report.notes.append(f"could not remove {key} ({exc.strerror or exc}); it is kept")
                return False
            return True

        # 1-2. manifests first: from here on nothing refers to what follows
        for m in sorted(removed, key=manifest.order_key):
            assert m.path is not None
            if not remove(store.ctx.rel(m.path)):
                kept.append(m)  # still there, so are its blobs
                continue
            report.removed_checkpoints.append((m.id, m.cell_id))
            report.checkpoint_bytes += scan.sizes.get(m.path, 0)
        for path in scan.unreadable:
            if remove(store.ctx.rel(path)):
                report.checkpoint_bytes += scan.sizes.get(path, 0)
                report.removed_unreadable.append(store.ctx.rel(path))
        for path in sorted(p for p in broken if p is not None):
            if remove(store.ctx.rel(path)):
                report.checkpoint_bytes += scan.sizes.get(path, 0)
                report.removed_broken.append(store.ctx.rel(path))
        for stray in found.strays:
            if _old_enough(backend.stat(stray), grace, now) and remove(stray):
                report.removed_strays.append(stray)
        report.kept_checkpoints = len(kept)

        # 3. blobs no kept manifest refers to
        referenced = set(scan.pinned)
        for m in kept:
            referenced.update(r.blob for r in m.blob_refs())
        if scan.newer:
            report.notes.append(
                f"no blob was removed: {', '.join(scan.newer[:3])} "
                f"{'has' if len(scan.newer) == 1 else 'have'} a newer format than this "
                f"ipy_resume reads ({manifest.FORMAT_VERSION}); upgrade ipy_resume to collect it"
            )
        elif scan.opaque:
            report.notes.append(
                f"no blob was removed: {', '.join(scan.opaque[:3])} cannot be read, so the blobs "
                "it refers to are unknown; fix its permissions and run gc again"
            )
        else:
            for address, obj in sorted(files.items()):
                if address in referenced or not _old_enough(obj, grace, now):
                    continue
                if remove(obj.key):
                    report.removed_blobs += 1
                    report.blob_bytes += blob_sizes[address]

        _remove_leftovers(store, report, remove, grace, now, locked, staged)

        report.size_after = sum(blob_sizes.get(a, 0) for a in referenced if a in files) + sum(
            scan.sizes.get(m.path, 0) for m in kept if m.path is not None
        )
    return report
