"""Saves handed to the OS but not yet durable, and their completion after a crash.

A background save is *staged* on the kernel's thread when the cell returns: every
blob it adds is written to a temporary file beside its final name (no fsync, so
at page-cache speed and without a second copy of the data in the kernel's memory),
and a record of the commit still to do is written to ``pending/<id>.json``: the
signed manifest and, for each blob, the temporary file that holds it.  The
background writer then fsyncs those files, moves them into place, and publishes
the manifest (see :mod:`ipy_resume.store.background`); the record goes last.

A small save (new blobs of :data:`~ipy_resume.store.snapshot.INLINE_MAX` bytes at most)
is staged as its record alone: the record holds each blob's bytes (``inline``), and the
writer writes the blob files from its own copy.  Recovery treats those bytes as it treats
a staged file: each is checked against the manifest's checksum before it is written.

Because the bytes live in the OS, not in the kernel, a kernel that dies (SIGKILL,
out of memory, a crash in C code) loses nothing it staged: the next process that
reads the store finds the records of dead writers and finishes their commits
(:func:`recover`), after checking the manifest's signature and every staged
blob's checksum.  What is never trusted: the record itself.  Its manifest must
verify under this store's key, and each blob is read whole and checked against
the checksum the manifest gives before it is fsynced and moved into place; a
blob that fails (the machine lost power before the writer's fsync, say) abandons
that commit: the cell executes again next time, as for any lost save.

A record names its writer by process id, process start time and boot id, so a
process id reused after a reboot or by a later process is not taken for the
writer, and a live writer's commit is never taken over.  A large save's blobs are
written by a forked child (see :mod:`ipy_resume.store.snapshot`); the record, written
by the kernel before the cell returns, names that child as the writer's ``helper``,
and the writer is alive while either process is.  The child is a session of its own,
so the kill of the kernel's process group (what Jupyter's restart does) lets it
finish handing the bytes to the OS, and the next reader then commits them.

A large array's blob address is not known when the record is written: the forked child
takes it after the cell returned (see :mod:`ipy_resume.store.late`).  Such a record's
manifest is provisional and its ``late`` entry names the completion the child writes
beside it, the signed manifest in full with every staged file, before any blob byte;
recovery commits from the completion, and abandons a record whose completion never came.

Staging is a power of a backend with ``local_files`` (a folder): records and staged
blobs are named by key (``pending/<id>.json``, ``objects/ab/.tmp-…``), and their files
come from ``backend.local_path``.  A bucket's store stages nothing (its saves go up
before the cell returns).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import posixpath
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from ipy_resume.store import fsio
from ipy_resume.store.backend import Backend, LocalBackend

if TYPE_CHECKING:
    from ipy_resume.store.context import StoreContext

__all__ = [
    "FOLDER",
    "Recovered",
    "Staged",
    "discard_completion",
    "helper",
    "live_temps",
    "owner",
    "record_bytes",
    "record_key",
    "record_path",
    "records",
    "recover",
    "remove_record",
    "stage_blob",
    "write_completion",
    "write_record",
    "writing",
]

FOLDER = "pending"
"""The store sub-folder of commit records (one ``<checkpoint id>.json`` per staged save)."""

_VERSION = 1


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int, zombie: str = "dead") -> str:
    """The start time of process *pid* (clock ticks since boot), '' where unknown, and
    *zombie* for a process that has ended but is not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after its end
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] in ("Z", "X") and zombie:
        return zombie  # a zombie runs nothing any more
    return fields[19] if len(fields) > 19 else ""


_BOOT = _boot_id()


_started: tuple[int, str] | None = None  # (pid, start time) of this process, read once


def owner() -> dict[str, Any]:
    """What names this process as the writer of a record.

    >>> owner()["pid"] == os.getpid()
    True
    """
    global _started
    pid = os.getpid()
    if _started is None or _started[0] != pid:  # (a forked child is another process)
        _started = (pid, _start_time(pid))
    return {"pid": pid, "start": _started[1], "boot": _BOOT}


def helper(pid: int) -> dict[str, Any]:
    """What names the child process *pid* that writes a save's blobs for this one
    (a record's ``owner["helper"]``): its id and start time, read even if it has
    ended already (then it is taken for dead at once)."""
    return {"pid": pid, "start": _start_time(pid, zombie="")}


def writer_alive(who: Any) -> bool:
    """Whether the writer *who* (a record's ``owner``) may still commit its save, or
    its ``helper`` still write the save's blobs."""
    return _running_pid(who) is not None


def _running_pid(who: Any) -> int | None:
    """The process of the writer *who* that still runs: the kernel, else (the kernel
    gone) the ``helper`` writing its blobs; None when neither does."""
    if not isinstance(who, dict):
        return None
    for each in (who, who.get("helper")):
        if isinstance(each, dict) and _running(each, who.get("boot")):
            return int(each["pid"])
    return None


def _running(who: dict[str, Any], boot: Any) -> bool:
    """Whether the process *who* names (``pid``, ``start``) runs, on this boot."""
    pid, start = who.get("pid"), who.get("start")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if _BOOT and boot and boot != _BOOT:
        return False  # written before a reboot
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    except OSError:
        return False
    now = _start_time(pid)
    if now == "dead":
        return False
    return not (start and now and now != start)


def _local(where: Backend | str | os.PathLike[str]) -> Backend:
    """The backend of a store, or of the store folder *where*."""
    return where if isinstance(where, Backend) else LocalBackend(where)


@dataclass
class Staged:
    """One blob of a staged save: its temporary file (and that file's key), address, size."""

    temp: Path
    address: str
    size: int
    key: str = ""


def record_bytes(
    manifest_bytes: bytes,
    staged: list[Staged],
    who: dict[str, Any] | None = None,
    inline: list[tuple[str, bytes]] | None = None,
    late: str | None = None,
) -> bytes:
    """The commit record of a staged save: the signed manifest, its staged blobs, the writer.

    *inline*: blobs whose bytes the record holds itself, ``(address, bytes)`` (a small
    save's, staged as this one file; written as ``[address, size, base64]``).  *late*: the
    key of the completion the writer's child writes (see :mod:`ipy_resume.store.late`):
    the record's manifest is provisional, the completion's is the one to commit.

    >>> record_bytes(encoded, staged)  # doctest: +SKIP
    b'{"version": 1, ...}'
    """
    doc: dict[str, Any] = {
        "version": _VERSION,
        "owner": owner() if who is None else who,
        "manifest": manifest_bytes.decode("utf-8"),
        "blobs": [[s.key, s.address, s.size] for s in staged],
    }
    if inline:
        doc["inline"] = [[a, len(d), base64.b64encode(d).decode("ascii")] for a, d in inline]
    if late:
        doc["late"] = late
    return json.dumps(doc).encode("utf-8")


def record_key(checkpoint_id: str) -> str:
    """The key of the commit record of checkpoint *checkpoint_id*.

    >>> record_key("0190ab3f2a9c1d2e")
    'pending/0190ab3f2a9c1d2e.json'
    """
    return f"{FOLDER}/{checkpoint_id}.json"


def record_path(root: Backend | str | os.PathLike[str], checkpoint_id: str) -> Path:
    """The file of that record in the store *root* (a backend with ``local_files``)."""
    return _local(root).local_path(record_key(checkpoint_id))


# The records this process wrote and has not removed yet, with the identity (inode, size,
# mtime) of the file as written.  Such a record is this live process's, so the scan before
# every read skips it without reading it or asking /proc.  Its file is compared with that
# identity once, at the first scan that sees it (a record changed before then, or a fork's
# inherited list, falls back to reading its owner); later scans go by its name alone, so a
# scan costs one stat per record of this process over the record's life, not one per read.
_mine: dict[str, tuple[int, int, int] | None] = {}  # None: checked already
_mine_lock = threading.Lock()  # (the writer thread removes records)


def _forked() -> None:
    # the child writes nothing but blob files (see snapshot._fork_writer); another
    # thread may have held the lock at the fork, and that thread is not in the child
    global _mine_lock
    _mine_lock = threading.Lock()
    _mine.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _ident(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _is_mine(path: str) -> bool:
    with _mine_lock:
        if path not in _mine:
            return False
        known = _mine[path]
        if known is None:
            return True
        try:
            same = _ident(os.stat(path)) == known
        except OSError:
            same = False
        if same:
            _mine[path] = None
        else:
            del _mine[path]
        return same


def own_in_flight() -> bool:
    """Whether this process has commit records of its own still on their way.

    >>> own_in_flight()  # doctest: +SKIP
    False
    """
    return bool(_mine)


def write_record(path: Path, data: bytes) -> Path:
    """Make a commit record visible at *path* (atomically, not durably).

    >>> write_record(record_path(store.root, m.id), record_bytes(...))  # doctest: +SKIP
    PosixPath('.../pending/0190ab3f2a9c.json')
    """
    temp = fsio.stage(path, [data])  # (its folder is made with the save's, see Snapshot.stage)
    st = os.stat(temp)
    os.replace(temp, path)
    with _mine_lock:
        _mine[os.fspath(path)] = _ident(st)
    return path


def write_completion(path: Path, data: bytes) -> None:
    """Make the completion of a late save visible at *path* (atomically, not durably): what
    the writer's child writes once it has the digests (see :mod:`ipy_resume.store.late`)."""
    temp = fsio.stage(path, [data])
    os.replace(temp, path)


def _completion(record: Path, doc: dict[str, Any], backend: Backend) -> Path | None:
    """The completion file *doc* (the record at *record*) names, if it names one beside it."""
    key = doc.get("late")
    if not isinstance(key, str) or posixpath.dirname(key) != FOLDER or not key.endswith(".late"):
        return None
    path = backend.local_path(key)
    return path if path.parent == record.parent else None


def discard_completion(path: Path, backend: Backend) -> None:
    """Remove the completion at *path* and the temporary files it names (its save will not
    be committed)."""
    doc = _load(path)
    _drop(path, doc, backend)


def remove_record(path: Path) -> None:
    """Remove the commit record at *path* (its commit is durable, or abandoned).

    >>> remove_record(snap.record)  # doctest: +SKIP
    """
    with _mine_lock:
        _mine.pop(os.fspath(path), None)
    with contextlib.suppress(OSError):
        os.unlink(path)


def records(root: Backend | str | os.PathLike[str]) -> list[Path]:
    """The commit records in the store *root* (its backend, or its folder), oldest first (by
    name: ids sort by time)."""
    backend = _local(root)
    if not backend.local_files:
        return []
    names = backend.names(FOLDER)
    return [backend.local_path(f"{FOLDER}/{n}") for n in names if n.endswith(".json")]


def _temp_key(entry: Any) -> str:
    """The key of a staged file a record names (a path relative to the store, as written)."""
    return posixpath.normpath(str(entry[0]).replace(os.sep, "/"))


def live_temps(root: Backend | str | os.PathLike[str]) -> set[str]:
    """Keys of the temporary files a live writer's records still name (``gc`` spares them)."""
    keep: set[str] = set()
    for path in records(root):
        doc = _load(path)
        if doc is None or not writer_alive(doc.get("owner")):
            continue
        completion = _completion(path, doc, _local(root))
        more = (_load(completion) or {}) if completion is not None else {}
        for entry in [*doc.get("blobs", []), *more.get("blobs", [])]:
            with contextlib.suppress(TypeError, ValueError, IndexError):
                keep.add(_temp_key(entry))
    return keep


def _load(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("version") == _VERSION else None


@dataclass
class Recovered:
    """What :func:`recover` did: commits finished, and those abandoned (with why)."""

    finished: list[str]
    abandoned: dict[str, str]
    live: list[str] = field(default_factory=list)  # other live writers' records (files)
    others: int = 0  # records of other processes seen (whatever became of them)


def recover(store: StoreContext) -> Recovered:
    """Finish the staged saves of writers that died; abandon those that cannot be trusted.

    Called before a store is read (``find``, ``list``), so a run after a crash
    restores every cell whose save the dead kernel had staged.

    >>> recover(store.ctx).finished  # doctest: +SKIP
    ['0190ab3f2a9c1d2e']
    """
    done = Recovered([], {})
    backend = store.backend
    if not backend.local_files:
        return done
    # As text, and a Path made only for another process's record: this runs before every
    # read, and while the writer catches up the folder holds dozens of this process's own.
    keys = [f"{FOLDER}/{name}" for name in backend.names(FOLDER) if name.endswith(".json")]
    for where in backend.local_names(keys):
        if _is_mine(where):
            continue  # this process's own save, still on its way: a live writer's
        done.others += 1
        path = Path(where)
        doc = _load(path)
        if doc is None and not os.path.lexists(path):
            continue  # committed (or finished by another reader) since the listing
        if doc is None:
            # unreadable: a record is made visible whole (rename), so this is damage
            _drop(path, doc, backend)
            done.abandoned[path.stem] = "its commit record is unreadable"
            continue
        if writer_alive(doc.get("owner")):
            done.live.append(where)
            continue
        completion = _completion(path, doc, backend)
        if completion is not None:
            problem = _finish_late(store, doc, completion)
            discard_completion(completion, backend)
        else:
            problem = _finish(store, doc)
        _drop(path, doc, backend)
        if problem is None:
            done.finished.append(path.stem)
        else:
            done.abandoned[path.stem] = problem
    return done


def writing(
    store: StoreContext, cell_id: str, key: str, among: Iterable[str] | None = None
) -> list[int]:
    """Process ids of other live processes whose staged save is of (*cell_id*, *key*).

    What a lookup that found nothing may wait for: another kernel's save of the same
    cell, still on its way (or a killed kernel's forked child finishing its bytes).
    Only a record whose manifest verifies under this store's key counts.  *among*: the
    record files to look at (those :func:`recover` found live), else every one.

    >>> writing(store.ctx, "train", key)  # doctest: +SKIP
    [41207]
    """
    from ipy_resume.store import manifest

    backend = store.backend
    if not backend.local_files:
        return []
    if among is None:
        names = backend.names(FOLDER)
        among = backend.local_names([f"{FOLDER}/{n}" for n in names if n.endswith(".json")])
    found: list[int] = []
    for where in among:
        if _is_mine(where):
            continue
        doc = _load(Path(where))
        pid = None if doc is None else _running_pid(doc.get("owner"))
        if doc is None or pid is None:
            continue
        try:
            data = str(doc["manifest"]).encode("utf-8")
            m = manifest.decode(data, store.key, rel=f"{FOLDER}/record", store=str(store.location))
        except (KeyError, fsio.StoreError):
            continue
        if m.cell_id == cell_id and m.key == key:
            found.append(pid)
    return found


def _finish_late(store: StoreContext, doc: dict[str, Any], completion: Path) -> str | None:
    """:func:`_finish` of a record whose manifest the child completed (see ``late``)."""
    from ipy_resume.store import manifest

    try:
        data = str(doc["manifest"]).encode("utf-8")
        m = manifest.decode(data, store.key, rel=f"{FOLDER}/record", store=str(store.location))
    except (KeyError, fsio.StoreError) as exc:
        return f"its manifest does not verify ({exc})"
    done = _load(completion)
    if done is None:
        if store.backend.exists(store.manifest_key(m)):
            return None  # published already: only the record outlived the commit
        return "its writer stopped before it had the checksums of its arrays"
    try:
        final = manifest.decode(
            str(done["manifest"]).encode("utf-8"),
            store.key,
            rel=f"{FOLDER}/completion",
            store=str(store.location),
        )
    except (KeyError, fsio.StoreError) as exc:
        return f"its completed manifest does not verify ({exc})"
    if (final.id, final.cell_id, final.key) != (m.id, m.cell_id, m.key):
        return "its completion is of another save"
    return _finish(store, done)


def _finish(store: StoreContext, doc: dict[str, Any]) -> str | None:
    """Verify and commit one dead writer's save; None on success, else why not."""
    from ipy_resume.store import blobs, manifest

    backend = store.backend
    try:
        data = str(doc["manifest"]).encode("utf-8")
        m = manifest.decode(data, store.key, rel=f"{FOLDER}/record", store=str(store.location))
    except (KeyError, fsio.StoreError) as exc:
        return f"its manifest does not verify ({exc})"
    temps: dict[str, Path] = {}
    for entry in doc.get("blobs", []):
        try:
            rel, address, _size = _temp_key(entry), str(entry[1]), int(entry[2])
            final = store.blobs.key(address)
        except (TypeError, ValueError, IndexError):
            return "its commit record is damaged"
        # only a temporary file beside the blob's own name is taken (never a file elsewhere)
        beside, _, name = rel.rpartition("/")
        if beside != final.rpartition("/")[0] or not fsio.is_temp_name(name):
            return "its commit record names a file outside the store's objects"
        temps[address] = backend.local_path(rel)
    held: dict[str, bytes] = {}  # blobs the record holds itself (a small save's)
    for entry in doc.get("inline", []):
        try:
            address, size, text = str(entry[0]), int(entry[1]), str(entry[2])
            raw = base64.b64decode(text.encode("ascii"), validate=True)
        except (TypeError, ValueError, IndexError, UnicodeEncodeError, binascii.Error):
            return "its commit record is damaged"
        if len(raw) != size:
            return "its commit record is damaged"
        held[address] = raw
    dirs: set[Path] = set()
    for ref in m.blob_refs():
        if store.blobs.exists(ref.blob, ref.size):
            continue
        inline = held.get(ref.blob)
        if inline is not None:
            # trusted only once the signed manifest's checksum says these are its bytes
            if len(inline) != ref.size or blobs.digest(ref.algo, [inline]) != ref.checksum:
                return f"blob {ref.blob[:16]}… failed its checksum"
            try:
                store.blobs.put(ref.blob, [inline], ref.size, dirs=dirs)
            except (OSError, ValueError) as exc:
                return f"blob {ref.blob[:16]}… could not be written ({exc})"
            continue
        staged = temps.get(ref.blob)
        if staged is None:
            return f"blob {ref.blob[:16]}… is missing"
        problem = store.blobs.check_file(staged, ref.algo, ref.checksum, ref.size)
        if problem is not None:
            return f"blob {ref.blob[:16]}… {problem}"
        try:
            fsio.settle(staged, store.blobs.path(ref.blob), dirs=dirs)
        except OSError as exc:
            return f"blob {ref.blob[:16]}… could not be moved into place ({exc})"
    try:
        for folder in sorted(dirs):
            fsio.fsync_dir(folder)
        # the commit point, as a save's: put-if-absent, never over another manifest
        if not backend.put_if_absent(store.manifest_key(m), data):
            return None  # another process finished it first
    except OSError as exc:
        return f"its manifest could not be published ({exc})"
    return None


def _drop(path: Path, doc: dict[str, Any] | None, backend: Backend) -> None:
    """Remove a record and the temporary files it names that are still there."""
    for entry in (doc or {}).get("blobs", []):
        with contextlib.suppress(OSError, TypeError, ValueError, IndexError):
            key = _temp_key(entry)
            if fsio.is_temp_name(key.rpartition("/")[2]):
                os.unlink(backend.local_path(key))
    remove_record(path)


def stage_blob(path: PurePath, chunks: list[Any], size: int, temp: Path | None = None) -> Path:
    """Write one blob's bytes to a temporary file beside *path* (no fsync); returns it.

    *temp* is the temporary file's name when the caller chose it (see
    :meth:`LocalBackend.temp_key`); the folder must exist (``backend.make_parents``).
    """
    temp = fsio.stage(path, chunks, temp=temp)
    actual = os.stat(temp).st_size
    if actual != size:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise ValueError(f"blob {Path(path).name} is {actual} bytes, expected {size}")
    return temp
