"""``gc`` of a store in a bucket (see :mod:`.remote`).

It follows the local rules (:mod:`.retention`) on the keys of the
bucket.  What differs is how ``gc`` keeps clear of concurrent saves: there is no
``flock`` on a bucket, so it uses the two-phase marking described in :mod:`.remote`:

1. write ``gc/<id>.json`` (saves that start now wait until it is gone);
2. apply retention and delete manifests (never unsafe: a save never relies on another
   checkpoint's manifest);
3. list ``leases/``: while a live save holds one, no blob is deleted this time (the
   report says so; the next ``gc`` removes them);
4. otherwise list the manifests again (a save may have committed since step 2) and
   delete every blob none of them references, older than the grace period;
5. abort multipart uploads left by killed saves; empty ``quarantine/``;
6. delete the marker.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import PurePath, PurePosixPath
from typing import TYPE_CHECKING

from ipy_resume.store import manifest
from ipy_resume.store.audit import audit
from ipy_resume.store.fsio import StoreError
from ipy_resume.store.leases import GC_MARKER_STALE, marker, stale
from ipy_resume.store.manifest import Manifest
from ipy_resume.store.remote_backend import FsspecBackend
from ipy_resume.store.retention import GcReport, retain, scan_manifests

if TYPE_CHECKING:
    from ipy_resume.store.parts import StoreParts

__all__ = ["collect"]


def _foreign(data: bytes, rel: str, path: PurePath) -> Manifest | None:
    """A manifest's blob list read without trusting it (no value is decoded)."""
    try:
        return manifest.decode_unverified(data, rel, path)
    except StoreError:
        return None


def _referenced(store: StoreParts) -> set[str] | None:
    """Every blob any manifest of the store names now (trusted or not); None if unsure."""
    out: set[str] = set()
    for obj in store.ctx.backend.list("manifests"):
        try:
            data = store.ctx.backend.get(obj.key)
        except FileNotFoundError:
            continue
        m = _foreign(data, obj.key, PurePosixPath(obj.key))
        if m is None:
            with contextlib.suppress(StoreError):
                fmt = manifest.parse(data, obj.key).get("format")
                if isinstance(fmt, int) and fmt > manifest.FORMAT_VERSION:
                    return None  # a newer writer's blobs cannot be known
            continue
        out.update(r.blob for r in m.blob_refs())
    return out


def collect(
    store: StoreParts,
    lease_stale: float,
    *,
    keep_last: int | None = None,
    max_size: int | None = None,
    grace: float | None = None,
) -> GcReport:
    """Retention plus removal of unreferenced blobs, safe against concurrent saves: a save
    whose lease is younger than *lease_stale* seconds keeps every blob.

    >>> collect(RemoteStore("s3://bucket/team").parts, LEASE_STALE).summary()  # doctest: +SKIP
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError("--keep-last must be at least 1 (gc never removes every checkpoint)")
    if max_size is not None and max_size < 0:
        raise ValueError("--max-size must not be negative")
    report = GcReport(locked=False)
    backend = store.ctx.backend
    if not store.ctx.exists():
        return report
    grace = lease_stale if grace is None else grace
    found = audit(store)
    with contextlib.suppress(StoreError):
        store.info.heal()
    gc_marker = f"gc/{manifest.new_checkpoint_id()}.json"
    backend.put(gc_marker, [marker("gc")])
    try:
        now = time.time()
        scan = scan_manifests(store)
        broken = {m.path for m in scan.trusted if m.path in found.broken}
        scan.trusted = [m for m in scan.trusted if m.path not in broken]
        blob_objects = {
            "".join(o.key.split("/")[1:]): o
            for o in backend.list("objects")
            if len(o.key.split("/")) == 3
        }
        sizes = {a: o.size for a, o in blob_objects.items()}
        kept, removed, notes = retain(scan, keep_last, max_size, sizes)
        report.notes.extend(notes)
        report.untrusted_kept = scan.untrusted
        for m in sorted(removed, key=manifest.order_key):
            assert m.path is not None
            backend.delete(store.ctx.rel(m.path))
            report.removed_checkpoints.append((m.id, m.cell_id))
            report.checkpoint_bytes += scan.sizes.get(m.path, 0)
        for path in scan.unreadable:
            backend.delete(store.ctx.rel(path))
            report.removed_unreadable.append(store.ctx.rel(path))
        for bad in sorted(str(p) for p in broken if p is not None):
            backend.delete(bad)
            report.removed_broken.append(bad)
        for stray in found.strays:
            backend.delete(stray)
            report.removed_strays.append(stray)
        report.kept_checkpoints = len(kept)

        # blobs: only with no save in flight (its lease), and against a fresh listing
        live = []
        for lease in backend.list("leases"):
            # by its process (dead, on this host) or its age; never by --grace, which is
            # about unreferenced blobs, not about saves still running
            if stale(backend, lease, lease_stale, now):
                backend.delete(lease.key)
            else:
                live.append(lease.key)
        referenced = _referenced(store)
        if live:
            report.notes.append(
                f"no blob was removed: {len(live)} save(s) in progress; run gc again later"
            )
        elif referenced is None or scan.newer:
            report.notes.append(
                "no blob was removed: a manifest has a newer format than this ipy_resume "
                f"reads ({manifest.FORMAT_VERSION}); upgrade ipy_resume to collect it"
            )
        else:
            for address, obj in sorted(blob_objects.items()):
                if address in referenced or address in scan.pinned:
                    continue
                if grace > 0 and obj.age(now) < min(grace, 60.0):
                    continue  # just written by a save that may not hold a lease yet
                backend.delete(obj.key)
                report.removed_blobs += 1
                report.blob_bytes += obj.size
        if isinstance(backend, FsspecBackend):
            # With no live lease, every unfinished upload is a killed save's (a save that
            # starts now waits for the marker): none can complete any more.
            report.removed_temp += backend.abort_stale_uploads(older_than=grace if live else 0)
        for obj in backend.list("quarantine"):
            backend.delete(obj.key)
            report.removed_quarantine += 1
            report.quarantine_bytes += obj.size
        for obj in backend.list("gc"):
            if obj.key != gc_marker and stale(backend, obj, GC_MARKER_STALE, now):
                backend.delete(obj.key)
        final = referenced or set()
        report.size_after = sum(sizes.get(a, 0) for a in final) + sum(
            scan.sizes.get(m.path, 0) for m in kept if m.path is not None
        )
    finally:
        with contextlib.suppress(OSError, StoreError):
            backend.delete(gc_marker)
    return report
