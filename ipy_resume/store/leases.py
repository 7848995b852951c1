"""Leases and gc markers of an object store: who wrote one, and when it no longer counts.

A save writes a lease before it looks for gc markers; gc writes a marker before it looks
for leases (see :mod:`.remote`).  Both hold the same small JSON document.  :func:`hold`
is the lease side: an object store backend's shared ``lock``.

>>> b"purpose" in marker("save")
True
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator

from ipy_resume.store import manifest
from ipy_resume.store.backend import Backend, ObjectInfo
from ipy_resume.store.fsio import StoreError
from ipy_resume.store.lock import StoreLocked

__all__ = ["GC_MARKER_STALE", "LEASE_STALE", "hold", "marker", "stale"]

LEASE_STALE = 3600.0
"""A lease (a save in progress) older than this is taken as left by a dead process."""
GC_MARKER_STALE = 900.0
"""A gc marker older than this no longer holds saves back."""
_HOST = socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours
    return True


def marker(purpose: str) -> bytes:
    """The content of a lease or gc marker: who wrote it and when."""
    doc = {"host": _HOST, "pid": os.getpid(), "created": time.time(), "purpose": purpose}
    return json.dumps(doc, sort_keys=True).encode()


def stale(backend: Backend, obj: ObjectInfo, older_than: float, now: float) -> bool:
    """True when the lease or marker *obj* was left by a dead process or is too old."""
    if obj.age(now) >= older_than:
        return True
    try:
        doc = json.loads(backend.get(obj.key))
    except (FileNotFoundError, ValueError):
        return True
    if isinstance(doc, dict) and doc.get("host") == _HOST and isinstance(doc.get("pid"), int):
        return not _alive(doc["pid"])
    return False


def gc_running(backend: Backend, now: float | None = None) -> bool:
    """True while a live gc marker is under ``gc/``."""
    now = time.time() if now is None else now
    return any(not stale(backend, obj, GC_MARKER_STALE, now) for obj in backend.list("gc"))


@contextlib.contextmanager
def hold(backend: Backend, *, timeout: float, purpose: str) -> Iterator[bool]:
    """A lease under ``leases/`` for a ``with`` block; waits while a gc is deleting blobs.

    Yields False (no lock is held: a bucket's gc keeps its grace period as well).

    >>> with hold(backend, timeout=120, purpose="save"):  # doctest: +SKIP
    ...     pass
    """
    lease = f"leases/{manifest.new_checkpoint_id()}.json"
    backend.put(lease, [marker(purpose)])
    try:
        deadline = time.monotonic() + timeout
        while gc_running(backend):
            if time.monotonic() > deadline:
                raise StoreLocked(
                    f"a gc of {backend.url} has been deleting blobs for over {timeout:.0f} s",
                    path="gc/",
                )
            time.sleep(0.2)
        yield False
    finally:
        with contextlib.suppress(OSError, StoreError):
            backend.delete(lease)
