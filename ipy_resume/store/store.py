"""The :class:`Store` façade: save, find and load checkpoints.

Layout of a store folder::

    store.json, store.backup.json        the format and base seed, with spare copies (info.py)
    journal.sqlite                       the timeline (journal.py), rebuilt from manifests if lost
    lock                                 the store lock (lock.py); its content is advisory
    objects/ab/cdef…                     content-addressed blobs (see blobs.py)
    manifests/<cell-dir>/<key>/<id>.json signed manifests, the commit records
    quarantine/                          blobs that failed verification

A save writes every blob durably first and the manifest last, with
``os.link`` so it never replaces another manifest: a crash at any instant
leaves either no new checkpoint (plus unreferenced blobs for ``gc``) or a
complete one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import Any

from ipy_resume.store import background, info, lock, manifest, pending, retention, signing
from ipy_resume.store.audit import Audit, refusal
from ipy_resume.store.audit import audit as audit_store
from ipy_resume.store.backend import Backend, LocalBackend
from ipy_resume.store.blobs import BlobStore
from ipy_resume.store.committer import OWN_CHURN_RESCAN
from ipy_resume.store.context import StoreContext, check_cell_id, check_key, check_text
from ipy_resume.store.fsio import StoreError
from ipy_resume.store.journal import JOURNAL_FILE, RECOVERED, Journal, events_from_manifests
from ipy_resume.store.loader import DecodeError, Loader, forget_decoded
from ipy_resume.store.lock import StoreLocked
from ipy_resume.store.manifest import Manifest
from ipy_resume.store.parts import StoreParts
from ipy_resume.store.reader import forget_verified as forget_read
from ipy_resume.store.results import Listed, SaveResult
from ipy_resume.store.retention import GcReport
from ipy_resume.store.snapshot import Snapshot
from ipy_resume.store.writing import (
    MISSING,
    PACK_TARGET,
    PACK_VALUE_MAX,
    LateDigest,
    Linker,
    Writer,
    build,
)

__all__ = [
    "MISSING",
    "OWN_CHURN_RESCAN",
    "PACK_TARGET",
    "PACK_VALUE_MAX",
    "DecodeError",
    "Linker",
    "SaveResult",
    "Store",
    "StoreLocked",
]

# The layout of store.json (see info.py); manifests carry their own (manifest.FORMAT_VERSION).
STORE_FORMAT_VERSION = info.STORE_FORMAT_VERSION
PEER_SAVE_WAIT = 120.0
"""Seconds a lookup waits for another live process's staged save of the same key
(a large save's bytes going to disk while its kernel restarts, say)."""


def forget_verified() -> None:
    """Drop every manifest this process verified and every extra it decoded, so the next
    reads verify and decode them again.

    >>> forget_verified()
    """
    forget_read()
    forget_decoded()


class Store:
    """A checkpoint store in folder *root* (created on first save).

    *key* is the signing key; None loads (or creates) the user's key with
    :func:`signing.load_or_create_key`.

    The store is a façade: what it does, its parts do (:mod:`.reader`, :mod:`.committer`,
    :mod:`.loader`, :mod:`.info_keeper`, over the state they share, :mod:`.context`), and
    the saves it hands to the background go to its own writer (:attr:`writer`).  Before
    it reads, it waits for its writer's saves of what it reads and finishes the staged
    saves of kernels that died: the parts never do either.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        key: bytes | None = None,
        *,
        backend: Backend | None = None,
    ) -> None:
        folder = Path(root)
        # store contents are addressed by key through this; see backend.py for the
        # capabilities (flock, local files) the local store builds on
        chosen: Backend = LocalBackend(folder) if backend is None else backend
        repairs: list[str] = []
        signing_key = signing.load_or_create_key(notes=repairs) if key is None else bytes(key)
        self.ctx = StoreContext(folder, chosen, signing_key)
        self.ctx.repairs.extend(repairs)
        self.parts = StoreParts.of(self.ctx)
        self.reader = self.parts.reader
        self.info = self.parts.info
        self.committer = self.parts.committer
        self.loader: Loader = self.parts.loader
        self._journal: Journal | None = None
        self._writer: tuple[Path | str, background.StoreWriter] | None = None
        self._said_journal = 0  # how many of the journal's quarantined files were said

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.location)!r})"

    # -- what the parts share (set here, seen by all of them) ----------------------

    @property
    def root(self) -> PurePath:
        """The store's folder (``.`` for a bucket's store)."""
        return self.ctx.root

    @root.setter
    def root(self, value: PurePath) -> None:
        self.ctx.root = value

    @property
    def backend(self) -> Backend:
        """How the store's keys are read and written (a folder, a bucket)."""
        return self.ctx.backend

    @property
    def key(self) -> bytes:
        """The signing key manifests are signed and verified with."""
        return self.ctx.key

    @key.setter
    def key(self, value: bytes) -> None:
        self.ctx.key = value

    @property
    def blobs(self) -> BlobStore:
        """The store's blobs (``objects/``, ``quarantine/``)."""
        return self.ctx.blobs

    @blobs.setter
    def blobs(self, value: BlobStore) -> None:
        self.ctx.blobs = value

    @property
    def lock_timeout(self) -> float:
        """Seconds a save waits for a running ``gc`` before giving up (values stay in memory)."""
        return self.ctx.lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, value: float) -> None:
        self.ctx.lock_timeout = value

    @property
    def repairs(self) -> list[str]:
        """Damage found and repaired, one line each, until said (:meth:`take_repairs`)."""
        return self.ctx.repairs

    @property
    def abandoned(self) -> dict[str, str]:
        """Staged saves of dead writers that could not be finished, by checkpoint id (why)."""
        return self.committer.abandoned

    @property
    def writer(self) -> background.StoreWriter:
        """This store's background writer (one per folder, or per URL).

        >>> Store("/tmp/doc-store").writer.pending()
        []
        """
        # (asked several times by every cell: looked up once per place the store is)
        where = self.location
        if self._writer is None or self._writer[0] != where:
            self._writer = (where, background.writer_for(where))
        return self._writer[1]

    @property
    def stages_saves(self) -> bool:
        """Saves can be staged to local files and made durable in the background (with the
        backend's ``local_files``; a bucket's save goes up before the cell returns)."""
        return self.ctx.backend.local_files

    @property
    def location(self) -> Path | str:
        """Where the store lives: its folder, or the URL of an object store.

        >>> Store("/tmp/doc-store").location
        PosixPath('/tmp/doc-store')
        """
        return self.ctx.location

    def exists(self) -> bool:
        """True once the store has been created (a first save, or ``store.json``)."""
        return self.ctx.exists()

    @staticmethod
    def created_at(root: Path) -> bool:
        """:meth:`exists` of the local store at *root*, without opening it (no key is read).

        >>> Store.created_at(Path("/nonexistent"))
        False
        """
        return LocalBackend(root).exists(info.FILE) or Store.has_checkpoints_at(root)

    @staticmethod
    def has_checkpoints_at(root: Path) -> bool:
        """True when the local store at *root* may hold checkpoints (it has saved one, or
        staged one that a dead kernel left for the next reader to finish).

        >>> Store.has_checkpoints_at(Path("/nonexistent"))
        False
        """
        backend = LocalBackend(root)
        return backend.has_prefix("manifests") or backend.has_prefix(pending.FOLDER)

    # -- store.json ----------------------------------------------------------

    @property
    def seed_base(self) -> int:
        """The per-store base seed (creates the store folder and ``store.json`` if needed)."""
        return self.info.seed_base

    def info_copies(self) -> tuple[info.Copy, info.Copy]:
        """``store.json`` and its backup as read now (see :mod:`.info`)."""
        return self.info.copies()

    def heal_info(self) -> None:
        """Write ``store.json`` or its backup again where one is damaged or missing.

        Raises :class:`FormatTooNew` (nothing is touched) for a store of a newer format.

        >>> Store("s").heal_info()  # doctest: +SKIP
        """
        self.info.heal()

    def take_repairs(self) -> list[str]:
        """The damage this store found and repaired since last asked, one line each: its
        ``store.json`` copies, its journal and the signing key.

        >>> Store("/tmp/doc-store").take_repairs()
        []
        """
        said = self.ctx.repairs[:]
        self.ctx.repairs.clear()
        journal = self._journal
        moved = [*getattr(journal, "quarantined", [])][self._said_journal :]
        if moved:
            self._said_journal += len(moved)
            said.append(
                f"the store {self.ctx.location}: {JOURNAL_FILE} was damaged (moved to "
                f"{', '.join(moved)}); "
                "the timeline was rebuilt from the manifests; the restores and failed runs "
                "it recorded are lost, no checkpoint is"
            )
        return said

    # -- paths ---------------------------------------------------------------

    def healing(self, cell_id: str, key: str) -> bool:
        """True when the next save of (cell_id, key) replaces a checkpoint that failed to
        load: it checks every blob it reuses, so it is not left to the background writer."""
        return (cell_id, key) in self.ctx.suspect

    def path_of(self, key: str) -> PurePath:
        """What a manifest read from *key* carries as ``path``: its file, or (in a bucket)
        the key itself.

        >>> Store("/tmp/s").path_of("manifests/train/k/0190ab.json")
        PosixPath('/tmp/s/manifests/train/k/0190ab.json')
        """
        return self.ctx.path_of(key)

    def relative(self, path: PurePath | str | None) -> str:
        """*path* as messages name it: relative to the store (``manifests/…``) when inside.

        >>> Store("/tmp/s").relative(Path("/tmp/s/objects/ab/cd"))
        'objects/ab/cd'
        """
        return self.ctx.rel(path)

    def blob_path(self, address: str) -> PurePath:
        """The file of blob *address*."""
        return self.blobs.path(address)

    # -- saving --------------------------------------------------------------

    def save(
        self,
        cell_id: str,
        key: str,
        values: Mapping[str, object],
        *,
        extras: Mapping[str, object] | None = None,
        info: Mapping[str, Any] | None = None,
        complete: bool = True,
        linker: Linker | None = None,
        late_digests: Mapping[str, LateDigest] | None = None,
    ) -> SaveResult:
        """Store *values* and *extras* as a new checkpoint of (cell_id, key).

        Values that share objects (one object under two names, a view of another
        value's array, an object inside another value) are stored so that they share
        them again when loaded; with a *linker*, so are objects that other checkpoints
        stored, as long as they have not changed since.

        A value that cannot be pickled is left out and reported in
        ``SaveResult.failed`` (an extra as ``"extra:<name>"``); the checkpoint
        is then incomplete, as it is with ``complete=False``.  An OS error
        raises :class:`SaveError`; nothing is committed then.

        *late_digests* names values whose fingerprints go in ``info['output_digests']``
        (name -> function giving the hex fingerprint): a :meth:`snapshot` takes those of
        large arrays after the cell returned (see :mod:`ipy_resume.store.late`).
        """
        check_cell_id(cell_id)
        check_key(key)
        extras = {} if extras is None else extras
        info_doc = dict(info or {})
        try:
            manifest.canonical_json(info_doc)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"info must be JSON-serialisable: {exc}") from exc
        for name in [*values, *extras]:
            check_text("a value name", name)

        suspect = self.ctx.suspect.get((cell_id, key))
        writer = Writer(self.blobs, verify=suspect is not None)
        ident = manifest.new_checkpoint_id()
        try:
            # A copy of the base seed goes into every manifest: with both store.json
            # copies lost, the seeds (and so every key) are rebuilt from the manifests.
            seed_base = self.info.seed_base
            # Shared with other saves, exclusive of gc: from the first "this blob exists,
            # skip it" to the committed manifest, no gc may delete what we rely on.
            with self.committer.saving() as locked:
                writer.touch = not locked
                m, failed = build(
                    writer,
                    ident,
                    cell_id,
                    key,
                    values,
                    extras,
                    info_doc,
                    complete,
                    linker,
                    late_digests,
                )
                m.seed_base = seed_base
                m.bytes_written = writer.bytes_written
                manifest_bytes = self.committer.commit_manifest(m, writer)
                if suspect is not None:
                    self.committer.heal(m, suspect)
        except StoreLocked as exc:
            raise self.committer.locked_error(cell_id, exc) from exc
        except OSError as exc:
            raise self.committer.save_error(cell_id, exc, writer.current) from exc
        return SaveResult(
            m, failed, writer.bytes_written + manifest_bytes, sorted(writer.added), writer.members
        )

    def snapshot(
        self,
        cell_id: str,
        key: str,
        values: Mapping[str, object],
        *,
        extras: Mapping[str, object] | None = None,
        info: Mapping[str, Any] | None = None,
        complete: bool = True,
        linker: Linker | None = None,
        late_digests: Mapping[str, LateDigest] | None = None,
    ) -> Snapshot:
        """Serialise a save of *values* to memory now; write it later with ``commit``.

        Everything :meth:`save` decides (what is stored, what links where, the
        manifest and its id) is decided here, and nothing is written: pickles are
        kept as bytes, and the blobs still to be written keep views of the live
        arrays until :meth:`Snapshot.stage` hands them to the OS.  Blobs found
        present now are not kept; the commit checks again, under the lock, that
        they still are.

        >>> snap = store.snapshot("train", key, {"model": model})  # doctest: +SKIP
        >>> snap.stage(); snap.commit().manifest.id  # doctest: +SKIP
        """
        check_cell_id(cell_id)
        check_key(key)
        extras = {} if extras is None else extras
        # (whether it is JSON is told by the manifest's encoding, in stage: a whole encoding
        # of it here cost a small save more than its pickles)
        info_doc = dict(info or {})
        for name in [*values, *extras]:
            check_text("a value name", name)
        writer = Writer(self.blobs, defer=True)
        # The shared lock is held from here, where blobs found present are left out
        # (dedup), to the commit (Snapshot.release): a gc cannot remove one in between.
        held = contextlib.ExitStack()
        try:
            seed_base = self.info.seed_base
            held.enter_context(
                self.ctx.backend.lock(
                    exclusive=False, timeout=self.ctx.lock_timeout, purpose="save"
                )
            )
            m, failed = build(
                writer,
                manifest.new_checkpoint_id(),
                cell_id,
                key,
                values,
                extras,
                info_doc,
                complete,
                linker,
                late_digests,
            )
        except lock.StoreLocked as exc:
            held.close()
            raise self.committer.locked_error(cell_id, exc) from exc
        except OSError as exc:
            held.close()
            raise self.committer.save_error(cell_id, exc, writer.current) from exc
        except BaseException:
            held.close()
            raise
        m.seed_base = seed_base
        suspect = self.ctx.suspect.get((cell_id, key))
        return Snapshot(self.committer, m, writer, failed, suspect, held=held)

    # -- reading: what every read does first ------------------------------------

    def _before_read(self, key: tuple[str, str] | None = None, cell_id: str | None = None) -> None:
        """Wait for this process's saves of what is read (of *key*, of *cell_id*, or all),
        then finish the staged saves of kernels that died, with their timeline events."""
        self.writer.barrier(key=key, cell_id=cell_id, callbacks=False)
        finished = self.committer.settle_pending()
        if finished:
            self._note_recovered(finished)

    def settle_pending(self) -> None:
        """Finish the staged saves of kernels that died, and add their timeline events,
        as every read of checkpoints does first: for readers of the timeline alone.

        >>> Store("/tmp/doc-store").settle_pending()  # doctest: +SKIP
        """
        finished = self.committer.settle_pending()
        if finished:
            self._note_recovered(finished)

    def _note_recovered(self, ids: list[str]) -> None:
        """Timeline events for the saves finished on behalf of a dead kernel."""
        wanted = set(ids)
        paths = [p for p in self.reader.manifest_paths() if p.name[:-5] in wanted]
        recovered = list(self.reader.verified(paths))
        try:
            journal = self.journal()
            for event in events_from_manifests(recovered, detail=RECOVERED):
                if event.event_id.startswith("rebuilt-"):  # (saved before manifests had stamps)
                    # (not the stand-in's id: append replaces a stand-in of the same checkpoint)
                    event.event_id = f"recovered-{event.checkpoint_id}"
                journal.append(event)
        except (OSError, sqlite3.Error):
            pass  # the timeline misses a row; the checkpoints themselves are whole

    # -- finding -------------------------------------------------------------

    def read_manifest(self, path: PurePath, quick: bool = False) -> Manifest:
        """The verified manifest at *path* (see :meth:`Reader.read_manifest
        <ipy_resume.store.reader.Reader.read_manifest>` for what is trusted when).

        >>> store.read_manifest(m.path).id == m.id  # doctest: +SKIP
        True
        """
        return self.reader.read_manifest(path, quick=quick)

    def find(
        self,
        cell_id: str,
        key: str,
        accept: Callable[[Manifest], bool] | None = None,
        waiting: Callable[[str], None] | None = None,
    ) -> Manifest | None:
        """The newest complete, verified checkpoint of (cell_id, key), or None.

        *accept*, when given, must also hold: the engine passes a check that the
        files the cell read are unchanged, so an older checkpoint whose files match
        the disk again is found.

        *waiting*, when given, lets a lookup that found nothing wait for another live
        process's staged save of the same key (see :func:`pending.writing`), up to
        :data:`PEER_SAVE_WAIT` seconds; it is called once, with what is waited for.

        Manifests that cannot be trusted or read are skipped in favour of an
        older good one; when there is none, the error of the newest bad one is
        raised (:class:`Untrusted`, :class:`FormatTooNew`, :class:`ManifestError`)
        so the caller can say why the cell executes again.

        >>> store.find("train", key) is None  # doctest: +SKIP
        False
        """
        check_cell_id(cell_id)
        check_key(key)
        # read our own writes: a save of this key still being written is waited for
        self._before_read(key=(cell_id, key))
        found = self.reader.find_once(cell_id, key, accept)
        if found is not None or waiting is None or not self.committer.pending_live:
            return found
        writers = pending.writing(self.ctx, cell_id, key, self.committer.pending_live)
        if not writers:
            return found
        waiting(
            f"waiting for process {', '.join(map(str, writers))} to finish saving this "
            f"cell (up to {PEER_SAVE_WAIT:.0f} s)"
        )
        deadline = time.monotonic() + PEER_SAVE_WAIT
        while writers and time.monotonic() < deadline:
            time.sleep(0.05)
            writers = pending.writing(self.ctx, cell_id, key)
        self.committer.rescan()  # (scan again now: the writer's record has just gone)
        self._before_read()
        return self.reader.find_once(cell_id, key, accept)

    def scan(self) -> Iterator[Listed]:
        """Every manifest file of the store, read once: its manifest, or why it is unusable.

        An untrusted one comes with its contents read without trusting them
        (``unverified``: its blob list, never its values); a misfiled one with its
        manifest and ``misfiled``.  A file removed meanwhile is left out.

        >>> [entry.rel for entry in Store("s").scan() if entry.error]  # doctest: +SKIP
        ['manifests/train/3f2a/0190ab.json']
        """
        return self.reader.scan()

    def misfiled(self, m: Manifest, path: PurePath) -> bool:
        """True when the file *path* of *m* is not in the folder of its cell and key.

        >>> store.misfiled(m, m.path)  # doctest: +SKIP
        False
        """
        return self.reader.misfiled(m, path)

    def history(self, cell_id: str) -> list[Manifest]:
        """Every verified checkpoint of *cell_id* (any key, complete or not), oldest first.

        >>> [m.key for m in store.history("train")]  # doctest: +SKIP
        ['3f2a', '9c1d']
        """
        check_cell_id(cell_id)
        self._before_read(cell_id=cell_id)
        return self.reader.history(cell_id)

    def manifests_except(self, ids: set[str]) -> list[Manifest]:
        """Every verified checkpoint whose id is not in *ids* (the others are not read)."""
        self._before_read()
        return self.reader.manifests_except(ids)

    def manifests(self) -> list[Manifest]:
        """Every verified checkpoint of the store, oldest first."""
        self._before_read()
        return self.reader.manifests()

    def ids(self) -> set[str]:
        """Every checkpoint id the store holds, from file names alone (nothing is read)."""
        return self.reader.ids()

    def short_ids(self, extra: Iterable[str] = ()) -> dict[str, str]:
        """Id → the prefix to show: at least 8 characters, unique in the store (as git does).

        *extra* are ids to keep apart as well (those the timeline names, gone or not).

        >>> Store("s").short_ids()  # doctest: +SKIP
        {'3f2a9c1d2e4b5a6f': '3f2a9c1d', ...}
        """
        self.writer.barrier(callbacks=False)
        return self.reader.short_ids(extra)

    def short_id(self, checkpoint_id: str) -> str:
        """The prefix of *checkpoint_id* to show (see :meth:`short_ids`), from a listing
        reused for a few seconds.

        >>> Store("s").short_id("3f2a9c1d2e4b5a6f")  # doctest: +SKIP
        '3f2a9c1d'
        """
        return self.reader.short_id(checkpoint_id)

    # -- loading -------------------------------------------------------------

    def load_values(
        self,
        manifest: Manifest,
        names: Iterable[str] | None = None,
        cache: dict[Any, Any] | None = None,
        linker: Linker | None = None,
    ) -> dict[str, object]:
        """The values of a verified checkpoint (all of them, or *names*); see
        :meth:`Loader.load_values <ipy_resume.store.loader.Loader.load_values>`.

        >>> store.load_values(store.find("train", key))  # doctest: +SKIP
        {'model': ...}
        """
        return self.loader.load_values(manifest, names, cache, linker)

    def load_extras(
        self,
        manifest: Manifest,
        cache: dict[Any, Any] | None = None,
        names: Iterable[str] | None = None,
        reuse: Iterable[str] = (),
    ) -> dict[str, object]:
        """The extras of a verified checkpoint (verified like values); see
        :meth:`Loader.load_extras <ipy_resume.store.loader.Loader.load_extras>`.

        >>> store.load_extras(m, names=["rng"])  # doctest: +SKIP
        {'rng': ...}
        """
        return self.loader.load_extras(manifest, cache, names, reuse)

    def restore_paths(self, manifest: Manifest) -> dict[str, str]:
        """How a restore would load each value of *manifest*: ``"mapped"``, ``"buffers mapped"``
        (a pickled value whose large out-of-band buffers are mapped) or ``"read"``.

        >>> Store("/tmp/doc-store").restore_paths(m)  # doctest: +SKIP
        {'big': 'mapped', 'small': 'read'}
        """
        return self.loader.restore_paths(manifest)

    @staticmethod
    def paths_taken(
        manifest: Manifest, cache: dict[Any, Any], names: Iterable[str]
    ) -> dict[str, str]:
        """How a load with *cache* did load each of *names* (see :meth:`restore_paths`)."""
        return Loader.paths_taken(manifest, cache, names)

    # -- maintenance -----------------------------------------------------------

    def verify(self) -> list[str]:
        """Check every file of the store, referenced or not; one line per problem.

        Each line names the file and says what to do (usually nothing: the store heals
        on the next run, or ``gc`` cleans it now).  See :func:`audit` for the notes.

        >>> Store("s").verify()  # doctest: +SKIP
        []
        """
        return self.audit().lines

    def audit(self) -> Audit:
        """:meth:`verify` with details: problems, notes, and what ``gc`` would clean."""
        self.writer.barrier(callbacks=False)
        return audit_store(self.parts)

    def journal(self) -> Journal:
        """The store's timeline, rebuilt from the manifests when it was lost or damaged.

        >>> Store("s").journal().events()  # doctest: +SKIP
        []
        """
        if self._journal is None:
            if self.ctx.backend.local_files:
                # one SQLite file in the folder (see journal.py and the README's architecture)
                self._journal = Journal(
                    self.ctx.backend,
                    source=self.manifests_except,
                    alive=pending.writer_alive,
                    listed=self.ids,
                )
            else:
                # any other backend: one immutable object per event, merged on read
                from ipy_resume.store.remote_journal import RemoteJournal

                self._journal = RemoteJournal(self.ctx)  # type: ignore[assignment]
        assert self._journal is not None
        return self._journal

    def trust(self, problems: list[str] | None = None) -> int:
        """Adopt a store written under another key: re-sign manifests whose blobs verify.

        Each manifest is parsed without trusting it, every blob it references is
        checked against its checksum, and only then is it re-signed under this
        store's key.  Manifests with a bad, missing or altered blob, unreadable
        ones and newer formats are left as they are and described in *problems*.
        Returns how many manifests were re-signed.

        >>> Store("shared-store").trust()  # doctest: +SKIP
        12
        """
        problems = [] if problems is None else problems
        self.writer.barrier(callbacks=False)
        count = 0
        if not self.ctx.exists():
            return 0
        with self.ctx.backend.lock(exclusive=False, timeout=self.ctx.lock_timeout, purpose="trust"):
            for path in self.reader.manifest_paths():
                rel = self.ctx.rel(path)
                try:
                    data = self.ctx.backend.get(rel)
                except FileNotFoundError:
                    continue
                try:
                    m = manifest.decode_unverified(data, rel, path)
                except StoreError as exc:
                    problems.append(f"not adopted: {exc}")
                    continue
                refused = refusal(m, self.blobs, rel)
                if refused is not None:
                    problems.append(refused)
                    continue
                # (these bytes, whose blobs were checked: not the file read again)
                self.ctx.backend.put(rel, [manifest.encode(m, self.ctx.key)])
                count += 1
        return count

    def gc(
        self,
        *,
        keep_last: int | None = None,
        max_size: int | None = None,
        grace: float | None = None,
        timeout: float = 60.0,
    ) -> GcReport:
        """Apply retention and remove unreferenced blobs, temp files and quarantine.

        See :mod:`ipy_resume.store.retention` for the rules.

        >>> print(Store("s").gc(keep_last=3).summary())  # doctest: +SKIP
        removed 4 checkpoint(s) of 'train', kept 3 ...
        """
        self.writer.barrier(callbacks=False)
        return retention.collect(
            self.parts, keep_last=keep_last, max_size=max_size, grace=grace, timeout=timeout
        )
