"""Digests of a save's large arrays, taken by the forked writer after the cell returned.

A cell that returns a large array used to pay two passes over its bytes before the kernel
was free again: the fingerprint a later cell's key takes and the address of the HDF5 blob
it becomes, about 40 ms for 512 MB even with one pass per core.  Nothing the next cell
does needs either at once, and a save that large is written by a forked child anyway (see
:mod:`ipy_resume.store.snapshot`), which sees the array exactly as it was when the cell
returned.  So for such an array (a :class:`LateArray`, :data:`LATE_MIN` bytes or more) the
child takes both digests, before it writes the blob, and the kernel returns once it has
forked.

Until then the manifest names each such blob by a placeholder address, unique within the
save, that no reader ever sees.  The child completes its copy of the manifest, signs it and
writes it, with the list of the staged files, as a *completion* beside the commit record
(``pending/<id>.late``, see :func:`completion_key`), before it writes any blob; then it
tells the kernel the same digests on its pipe (:func:`report`), which the kernel's writer
thread (or a later save that links to one of these arrays) reads and applies to the
kernel's own manifest (:func:`apply`) before it publishes.

Crash safety stays the staging protocol's: a kernel killed at any moment after the fork
leaves the child running (a session of its own), and the next reader commits from the
completion, every blob verified against it.  A record whose completion was never written
(the machine went down within those milliseconds) is abandoned: the cell executes again
next time; nothing half-written is ever restored.  Where no child is forked (staging off,
no ``fork``) the digests are taken in the kernel before staging, as before.

>>> placeholder(0)
'00000000000000000000000000000001'
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ipy_resume.store import blobs
from ipy_resume.store.arrays import ArrayPlan, plan_array
from ipy_resume.store.blobs import XXH3
from ipy_resume.store.manifest import Manifest

__all__ = [
    "DIGESTS_INFO",
    "LATE_MIN",
    "LateArray",
    "Taken",
    "apply",
    "completion_key",
    "layout_versions",
    "parse_report",
    "placeholder",
    "report",
    "take",
]

LATE_MIN = 8 << 20
"""Arrays this large have their digests taken by the writer: below it, hashing costs less
than the bookkeeping (an 8 MB array hashes in well under a millisecond)."""
DIGESTS_INFO = "output_digests"
"""The manifest's ``info`` entry the fingerprints go in (name -> hex), beside the others'."""

Taken = dict[str, tuple[str, str | None, int, int]]
"""placeholder -> (blob address, hex fingerprint of the value or None when it has none,
offset of the data in the blob, size of the blob)."""


@dataclass
class LateArray:
    """One array of a save whose digests are taken late.

    *fingerprint* gives the value's hex fingerprint (the caller's: the store knows nothing
    of fingerprints); it runs in the forked child, so it must take no lock another thread
    of the kernel may hold.  The HDF5 layout (*plan*) is made there too, by :func:`take`:
    the kernel need not import h5py for a save whose arrays are all late.
    """

    placeholder: str
    name: str
    value: Any  # an array of :func:`arrays.simple_layout`
    fingerprint: Callable[[object], str | None]
    plan: ArrayPlan | None = None

    @property
    def estimate(self) -> int:
        """The blob's size as far as it is known before its layout is (a few KB more)."""
        return self.plan.size if self.plan is not None else int(self.value.nbytes) + 2 * 4096

    def chunks(self) -> list[Any]:
        """The blob's bytes (its layout made first, by :func:`take`)."""
        assert self.plan is not None
        return list(self.plan.chunks())


def placeholder(index: int) -> str:
    """The address a manifest names the *index*-th late blob of a save by, until it is known.

    Well-formed, so a provisional manifest still decodes (another kernel reads its cell and
    key, to wait for it), and never the xxh3 of a real file.
    """
    return f"{index + 1:032x}"


def completion_key(record_key: str) -> str:
    """The key of the completion the child writes beside commit record *record_key*.

    >>> completion_key("pending/0190ab.json")
    'pending/0190ab.late'
    """
    return record_key.removesuffix(".json") + ".late"


def take(items: list[LateArray]) -> Taken:
    """Both digests of each item: the blob's on a helper thread, the fingerprint here.

    xxh3 lets go of the interpreter lock, so on two cores the two passes cost about one.

    Each item's HDF5 layout is made first (importing h5py where it is not yet).

    >>> import numpy as np
    >>> y = np.ones(1 << 20)
    >>> t = take([LateArray(placeholder(0), "y", y, lambda v: "ab")])
    >>> t[placeholder(0)][1]
    'ab'
    """
    for item in items:
        if item.plan is None:
            item.plan = plan_array(item.value)
        if item.plan is None:  # (simple_layout said it would not be)
            raise ValueError(f"{item.name} cannot be laid out as HDF5")
    addresses: dict[str, str] = {}
    failure: list[BaseException] = []

    def blob_digests() -> None:
        try:
            for item in items:
                addresses[item.placeholder] = blobs.digest(XXH3, item.chunks())
        except BaseException as exc:  # (said by the caller, below)
            failure.append(exc)

    helper = threading.Thread(target=blob_digests, name="ipy-resume-late")
    helper.start()
    try:
        prints = {item.placeholder: item.fingerprint(item.value) for item in items}
    finally:
        helper.join()
    if failure:
        raise failure[0]
    return {
        item.placeholder: (
            addresses[item.placeholder],
            prints[item.placeholder],
            item.plan.offset,
            item.plan.size,
        )
        for item in items
        if item.plan is not None
    }


def layout_versions() -> dict[str, str]:
    """The h5py and HDF5 versions the blobs were laid out with (after :func:`take`): what a
    manifest records, which the kernel may not know (it need not import h5py).

    >>> sorted(layout_versions()) in ([], ["h5py", "hdf5"])
    True
    """
    h5py = sys.modules.get("h5py")
    if h5py is None:
        return {}
    return {"h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version}


def apply(
    manifest: Manifest, items: list[LateArray], taken: Taken, versions: Mapping[str, str]
) -> None:
    """Put the digests *taken* and the layout's *versions* into *manifest* in place of the
    placeholders.

    >>> apply(m, [], {})  # doctest: +SKIP
    """
    recorded = manifest.info.get(DIGESTS_INFO)
    recorded = dict(recorded) if isinstance(recorded, dict) else {}
    for item in items:
        address, fingerprint, offset, size = taken[item.placeholder]
        ref = manifest.values[item.name]
        manifest.values[item.name] = dataclasses.replace(
            ref, blob=address, checksum=address, offset=offset, size=size
        )
        if fingerprint is not None:
            recorded[item.name] = fingerprint
    manifest.info[DIGESTS_INFO] = recorded
    manifest.versions = {**manifest.versions, **versions}
    manifest.bytes = sum(r.size for r in manifest.blob_refs())


def report(
    taken: Taken, temps: Mapping[str, str], dirs: list[str], versions: Mapping[str, str]
) -> bytes:
    """The child's line to the kernel: the digests, the staged files, the folders it made
    and the layout's versions.

    >>> parse_report(report({"p": ("a", "f", 4096, 8192)}, {"a": "objects/.tmp"}, [], {}))
    ({'p': ('a', 'f', 4096, 8192)}, {'a': 'objects/.tmp'}, [], {})
    """
    import json

    doc = {"taken": taken, "temps": dict(temps), "dirs": dirs, "versions": dict(versions)}
    return b"L" + json.dumps(doc).encode("utf-8") + b"\n"


def parse_report(line: bytes) -> tuple[Taken, dict[str, str], list[str], dict[str, str]]:
    """What :func:`report` wrote; ValueError for anything else (the child failed first)."""
    import json

    if not line.startswith(b"L") or not line.endswith(b"\n"):
        raise ValueError("no digests from the writing process")
    doc: Any = json.loads(line[1:])
    taken: Taken = {
        str(p): (str(a), None if f is None else str(f), int(o), int(n))
        for p, (a, f, o, n) in doc["taken"].items()
    }
    temps = {str(a): str(t) for a, t in doc["temps"].items()}
    versions = {str(k): str(v) for k, v in doc["versions"].items()}
    return taken, temps, [str(d) for d in doc["dirs"]], versions
