"""The timeline: an append-only journal of every execution and restore.

SQLite in WAL mode gives what the journal needs and nothing it doesn't: each
append is one transaction, a kernel killed mid-write leaves the last committed
row intact, and several kernels can append to one store at once (SQLite's own
locking, with a busy timeout). Manifests stay the source of truth for *what*
is stored; the journal records *when* and *how* it was used.

So a journal that is lost (deleted) or damaged (SQLite reports it malformed, or
``quick_check`` fails when it is opened) costs no checkpoint: it is moved to
``quarantine/`` and rebuilt from the manifests, one ``executed`` event per
checkpoint (see :func:`events_from_manifests` for what cannot be rebuilt).

The event of a restore is appended with :meth:`Journal.append_later`: a helper thread
writes such events in one transaction at most :data:`DEFER_SECONDS` later, and before
anything in this process reads or appends to the same journal file, and when the process
exits.  A kernel killed within that window loses those restore events, which hold nothing
of the user's work (the checkpoints they restored are untouched); every other event is
committed before ``append`` returns.

The journal is the store's through its backend: this SQLite file is the key
``journal.sqlite`` of a backend with ``local_files`` (a folder), reached with
``backend.local_path``, because SQLite needs a real file with POSIX locks.  A backend
without that capability (a bucket) keeps its timeline as one immutable object per
event instead (:mod:`.remote_journal`), and this class serves there only as the
local index of those events, in the user's cache.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .backend import Backend, LocalBackend
from .manifest import Manifest, order_key
from .unique import random_bits

JOURNAL_FILE = "journal.sqlite"
# failed = executed but could not be saved; uncached = executed without a key (see detail);
# resumed = the start of a kernel session brought back by %resume or a timeline restore.
OUTCOMES = ("executed", "restored", "incomplete", "failed", "uncached", "resumed")
_BUSY_TIMEOUT_S = 30.0
_DETACHED_TIMEOUT_S = 1.0
_RECHECK_S = 5.0
_SETTLE_SECONDS = 60.0
_REBUILT_PREFIX = "rebuilt-"
DEFER_SECONDS = 0.5
"""The longest a restore's event waits for the helper thread to write it."""
SYNC_ENV = "IPY_RESUME_JOURNAL_SYNC"
"""Set to 1, every event is written before ``append_later`` returns: for runners that read
each cell's outcome from the timeline, from another process, right after the cell."""
_DEFER_MAX = 256  # queued events that make the helper write at once

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    checkpoint_id TEXT,
    cell_id TEXT NOT NULL,
    key TEXT,
    parent TEXT,
    session TEXT NOT NULL,
    started REAL NOT NULL,
    created TEXT NOT NULL,
    duration REAL NOT NULL DEFAULT 0,
    saved REAL NOT NULL DEFAULT 0,
    io REAL NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    names TEXT NOT NULL DEFAULT '[]',
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_by_cell ON events(cell_id, seq);
CREATE INDEX IF NOT EXISTS events_by_session ON events(session, seq);
"""


def _uuid4_hex() -> str:
    """``uuid.uuid4().hex``, without the UUID object (every event makes one).

    >>> h = _uuid4_hex(); len(h), h[12], h[16] in "89ab", uuid.UUID(h).version
    (32, '4', True, 4)
    """
    raw = bytearray(random_bits(128).to_bytes(16, "little"))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


@dataclass
class Event:
    """One row of the timeline.

    ``duration`` is the run time for an execution and the restore time for a
    restore; ``saved`` is the time a restore saved (run time minus restore time);
    ``io`` is the time spent saving (executions) or loading (restores).

    >>> Event(cell_id="train", session="s1", outcome="executed").outcome
    'executed'
    """

    cell_id: str
    session: str
    outcome: str
    checkpoint_id: str | None = None
    key: str | None = None
    parent: str | None = None
    started: float = field(default_factory=time.time)
    duration: float = 0.0
    saved: float = 0.0
    io: float = 0.0
    bytes: int = 0
    names: list[str] = field(default_factory=list)
    detail: str = ""
    event_id: str = field(default_factory=lambda: _uuid4_hex())
    seq: int | None = None

    @property
    def created(self) -> str:
        """ISO 8601 UTC time of ``started``, to the millisecond."""
        moment = datetime.fromtimestamp(self.started, tz=timezone.utc)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict including ``created``."""
        data = asdict(self)
        data["created"] = self.created
        return data


class Journal:
    """Append and query timeline events of one store.

    >>> journal = Journal(Path("/tmp/doc-store"))  # doctest: +SKIP
    >>> journal.append(Event(cell_id="train", session="s1", outcome="executed"))  # doctest: +SKIP
    """

    def __init__(
        self,
        root: Backend | str | os.PathLike[str],
        source: Callable[[set[str]], Iterable[Manifest]] | None = None,
        alive: Callable[[Any], bool] | None = None,
        listed: Callable[[], set[str]] | None = None,
    ) -> None:
        # a store's backend (local_files), or the folder of one
        self.backend = root if isinstance(root, Backend) else LocalBackend(root)
        self.path = self.backend.local_path(JOURNAL_FILE)
        # the store's verified manifests except those of the ids given: what a lost or
        # damaged journal is rebuilt from, and what fills rows a damaged WAL dropped
        self.source = source
        # whether the writer a manifest's stamp names may still append its event
        self.alive = alive
        # the ids of the store's checkpoints from file names alone (nothing read or waited
        # for), and those of them that never get an event (loops): what reconcile skips
        self.listed = listed
        self._eventless: set[str] = set()
        self._unexplained: tuple[frozenset[str], float] = (frozenset(), 0.0)
        self._conn: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._lock = threading.Lock()
        # The thread holding _lock, and events it appended meanwhile: opening a lost
        # journal rebuilds it from the manifests, which may finish a dead kernel's staged
        # save, whose event is appended to this same journal (after the lock is let go).
        self._owner: int | None = None
        self._after: list[Event] = []
        self.rebuilt = 0  # events this object rebuilt from manifests
        self.quarantined: list[str] = []  # damaged journal files this object moved away
        # why events appended with append_later could not be written (None: all were)
        self.deferred_error: BaseException | None = None
        self._named: set[str] | None = None  # checkpoint ids events name (None: not read)

    @contextmanager
    def _connect(
        self, create: bool, skip: frozenset[str | None] = frozenset()
    ) -> Iterator[sqlite3.Connection | None]:
        # One connection per Journal, kept open: opening and closing per event made SQLite
        # checkpoint the WAL (with fsyncs) on every close, ~10 ms per cell.
        try:
            with self._lock:
                self._owner = threading.get_ident()
                try:
                    if self._conn is not None and self._inode != _inode(self.path):
                        # deleted under us, or moved to quarantine by another process that
                        # found it damaged: what we would write there is lost, so follow
                        # the new file
                        self._close_locked()
                    if self._conn is None:
                        missing = not self.path.exists()
                        if missing and not create and not self._rebuildable():
                            yield None
                            return
                        self._conn = self._open_locked(missing, skip)
                    yield self._conn
                finally:
                    self._owner = None
        finally:
            if self._after:
                waiting, self._after = self._after, []
                for event in waiting:
                    self.append(event)

    def _rebuildable(self) -> bool:
        return self.source is not None and self.backend.has_prefix("manifests")

    def _open_locked(self, missing: bool, skip: frozenset[str | None]) -> sqlite3.Connection:
        """Open the journal; a damaged one is quarantined, a lost one rebuilt.

        *skip*: checkpoints not to rebuild (the one whose event is being appended: a new
        store's journal is created by the first event, after its manifest).
        """
        self.backend.prepare()
        conn: sqlite3.Connection | None = None
        try:
            conn = self._open_file()
            if not missing and self.source is not None:
                # a flipped page is found here, once per process, not in the middle of a row
                status = conn.execute("PRAGMA quick_check").fetchone()
                if status is None or status[0] != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {status[0] if status else '?'}")
        except sqlite3.OperationalError:
            raise  # busy, locked, read-only, I/O: not damage
        except sqlite3.DatabaseError:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._quarantine_files()
            conn = self._open_file()
            missing = True
        if self.source is not None:
            # Also for a sound journal: rows that a damaged WAL dropped, and the events of
            # kernels that ended between a manifest and its event, come back.
            self.rebuilt += self._rebuild(conn, skip, missing)
        return conn

    def _rebuild(self, conn: sqlite3.Connection, skip: Iterable[str | None], missing: bool) -> int:
        assert self.source is not None
        # A checkpoint whose kernel is about to append its event is not given one, unless
        # its manifest says which kernel that is and it has ended; after a minute, always.
        return rebuild(
            conn,
            self.source,
            skip,
            settle=0.0 if missing else _SETTLE_SECONDS,
            alive=self.alive,
            detail=REBUILT if missing else ADOPTED,
            eventless=self._eventless,
        )

    def reconcile(self) -> int:
        """Add the events the journal lacks of checkpoints the store holds (their kernel
        ended before it appended them), as reading the timeline does; returns how many.

        >>> Store("/tmp/doc-store").journal().reconcile()  # doctest: +SKIP
        0
        """
        if self.source is None:
            return 0
        before = self.rebuilt  # (opening the journal may add them already)
        if self.listed is not None and self.path.exists():
            # The cheap question first, from file names (the panel asks on every refresh);
            # what is left unexplained (damaged, or its live kernel's to append) is asked
            # again only after a few seconds.
            with contextlib.suppress(OSError):
                lacking = self.listed() - self.checkpoint_ids() - self._eventless
                left, when = self._unexplained
                if not lacking or (lacking <= left and time.monotonic() - when < _RECHECK_S):
                    return self.rebuilt - before
        flush_deferred(self.path)
        added = self.recovering(lambda conn: self._rebuild(conn, (), False), create=False)
        self.rebuilt += int(added or 0)
        if self.rebuilt > before:
            self._named = None
        if self.listed is not None:
            with contextlib.suppress(OSError):
                still = self.listed() - self.checkpoint_ids() - self._eventless
                self._unexplained = (frozenset(still), time.monotonic())
        return self.rebuilt - before

    def _open_file(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=_BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL keeps every committed row through a killed process; only
            # an OS crash may lose the newest rows, never the file's consistency.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        self._inode = _inode(self.path)
        self._named = None
        return conn

    def _quarantine_files(self) -> None:
        """Move a damaged journal (and its WAL and shared memory) to quarantine/."""
        stamp = f"{int(time.time() * 1000)}.{uuid.uuid4().hex[:6]}"
        for suffix in ("", "-wal", "-shm"):
            src = JOURNAL_FILE + suffix
            if not self.backend.exists(src):
                continue
            with contextlib.suppress(OSError):
                self.backend.move(src, f"quarantine/{JOURNAL_FILE}{suffix}.{stamp}")
                self.quarantined.append(f"quarantine/{JOURNAL_FILE}{suffix}.{stamp}")

    def recovering(
        self,
        action: Callable[[sqlite3.Connection], Any],
        create: bool,
        skip: frozenset[str | None] = frozenset(),
    ) -> Any:
        """Run *action* on the connection; a journal found damaged meanwhile is rebuilt once."""
        for attempt in (0, 1):
            with self._connect(create=create, skip=skip) as conn:
                if conn is None:
                    return None
                try:
                    return action(conn)
                except sqlite3.OperationalError:
                    raise
                except sqlite3.DatabaseError:
                    if attempt or self.source is None:
                        raise
            with self._lock:
                self._close_locked()
                self._quarantine_files()
        return None  # pragma: no cover - the loop returns or raises

    def _close_locked(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
            self._inode = None
        self._named = None

    def close(self) -> None:
        """Close the connection (it reopens on the next use); events queued are written first."""
        flush_deferred(self.path)
        with self._lock:
            self._close_locked()

    def append_later(self, event: Event) -> Event:
        """Queue *event* for the helper thread, which writes it within ``DEFER_SECONDS``.

        For events a crash may lose (a restore's): the order of events is kept, since
        every read or ``append`` of this journal file in the process writes the queue
        first; ``seq`` is filled in once written.

        >>> event = Event(cell_id="c", session="s", outcome="restored")
        >>> journal.append_later(event)  # doctest: +SKIP
        """
        # A checkpoint the journal does not name yet (its event was lost with a damaged
        # journal, or it came from another store) is named at once: the timeline must
        # list every checkpoint even if this process dies next.  Opening the journal here
        # also rebuilds a lost or damaged one at once.
        if (
            event.checkpoint_id is None
            or os.environ.get(SYNC_ENV) == "1"
            or not self._names(event.checkpoint_id)
        ):
            return self.append(event)
        _defer(self, event)
        return event

    def append_detached(self, event: Event) -> bool:
        """Commit *event* (after the restore events queued before it) on a connection of its
        own, waiting at most a second; False when it could not (the journal is missing,
        damaged or busy): then append it as usual.

        For the background writer's thread, which journals a save once it is durable: it
        must not wait for this object's lock, which a reader may hold while it waits for
        that very save (``StoreWriter.barrier``).

        >>> journal.append_detached(event)  # doctest: +SKIP
        True
        """
        if not self.path.exists() or not _write_lock.acquire(timeout=_DETACHED_TIMEOUT_S):
            return False
        try:
            with _queue_lock:
                batch = _queues.pop(str(self.path), None)
            queued = [] if batch is None else batch[1]
            try:
                conn = _detached_connection(self.path)
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    for each in queued:
                        each.seq = insert_event(conn, each, ignore=True).lastrowid
                    insert_event(conn, event)
                    conn.execute("COMMIT")
                except BaseException:
                    _drop_detached()  # (a connection left inside a transaction is not kept)
                    raise
            except sqlite3.Error:
                if queued:  # (still to be written, first)
                    with _queue_lock:
                        later = _queues.pop(str(self.path), (self, []))[1]
                        _queues[str(self.path)] = (self, [*queued, *later])
                return False
        finally:
            _write_lock.release()
        self._named = None  # (this object did not see them)
        _appended(event.event_id)
        return True

    def warm(self) -> None:
        """Open the journal (checked, and rebuilt if lost), read which checkpoints its
        events name and start the thread that writes restores' events: what a kernel's
        first restore needs, done before it is needed.

        >>> Store("/tmp/doc-store").journal().warm()  # doctest: +SKIP
        """
        if self.path.exists():
            self._names("")
            _start_helper()  # (the thread that writes a restore's event, waiting for one)

    def _names(self, checkpoint_id: str) -> bool:
        """True when an event of the journal names *checkpoint_id* (one query per connection)."""
        named = self._named
        if (
            named is not None
            and checkpoint_id in named
            and self._conn is not None
            and self._inode == _inode(self.path)
        ):
            return True  # (a hit's question, asked on the connection's file as _connect does)

        def query(conn: sqlite3.Connection) -> bool:
            if self._named is None:
                self._named = {
                    row[0]
                    for row in conn.execute(
                        "SELECT DISTINCT checkpoint_id FROM events WHERE checkpoint_id IS NOT NULL"
                    )
                }
            return checkpoint_id in self._named

        return bool(self.recovering(query, create=True))

    def _named_now(self, events: Iterable[Event]) -> None:
        if self._named is not None:
            self._named.update(e.checkpoint_id for e in events if e.checkpoint_id)

    def _append_many(self, events: list[Event]) -> None:
        def insert(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for event in events:
                    event.seq = insert_event(conn, event, ignore=True).lastrowid
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            self._named_now(events)

        self.recovering(insert, create=True)

    def append(self, event: Event) -> Event:
        """Commit *event* durably; returns it with ``seq`` filled in (later, when appended
        while this thread is opening the journal: then once the journal is open)."""
        if self._owner == threading.get_ident():
            self._after.append(event)  # (waiting for the lock this thread holds: a deadlock)
            return event
        flush_deferred(self.path)  # the events queued before it come first

        def insert(conn: sqlite3.Connection) -> int | None:
            if event.checkpoint_id is None or event.outcome not in ("executed", "incomplete"):
                seq = insert_event(conn, event).lastrowid
                self._named_now([event])
                return seq
            # A journal rebuilt while this checkpoint's kernel was between its manifest and
            # this event holds a stand-in for it: the real event takes its place.
            stand_in = f"{_REBUILT_PREFIX}{event.checkpoint_id}"
            conn.execute("BEGIN IMMEDIATE")
            try:
                seq = insert_event(conn, event).lastrowid
                # (an event that is that stand-in itself, appended again, took its row above)
                if (
                    event.event_id != stand_in
                    and conn.execute("DELETE FROM events WHERE event_id = ?", (stand_in,)).rowcount
                ):
                    conn.execute(
                        "UPDATE events SET parent = ? WHERE parent = ?", (event.event_id, stand_in)
                    )
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            self._named_now([event])
            return seq

        event.seq = self.recovering(insert, create=True, skip=frozenset([event.checkpoint_id]))
        _appended(event.event_id)
        return event

    def events(
        self,
        *,
        cell_id: str | None = None,
        session: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events oldest first, optionally filtered; ``after`` is a ``seq`` to page from."""
        clauses: list[str] = []
        params: list[Any] = []
        if cell_id is not None:
            clauses.append("cell_id = ?")
            params.append(cell_id)
        if session is not None:
            clauses.append("session = ?")
            params.append(session)
        if after is not None:
            clauses.append("seq > ?")
            params.append(after)
        sql = "SELECT * FROM events"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)

        def query(conn: sqlite3.Connection) -> list[Event]:
            conn.row_factory = sqlite3.Row
            return [_row_to_event(row) for row in conn.execute(sql, params)]

        flush_deferred(self.path)
        return self.recovering(query, create=False) or []

    def checkpoint_ids(self) -> set[str]:
        """Every checkpoint id an event refers to."""
        sql = "SELECT DISTINCT checkpoint_id FROM events WHERE checkpoint_id IS NOT NULL"

        def query(conn: sqlite3.Connection) -> set[str]:
            return {row[0] for row in conn.execute(sql)}

        flush_deferred(self.path)
        return self.recovering(query, create=False) or set()

    def last(self, session: str | None = None) -> Event | None:
        """The most recent event (of *session*, when given)."""
        sql = "SELECT * FROM events"
        params: Sequence[Any] = ()
        if session is not None:
            sql += " WHERE session = ?"
            params = (session,)
        sql += " ORDER BY seq DESC LIMIT 1"

        def query(conn: sqlite3.Connection) -> Event | None:
            conn.row_factory = sqlite3.Row
            row = conn.execute(sql, params).fetchone()
            return None if row is None else _row_to_event(row)

        flush_deferred(self.path)
        result: Event | None = self.recovering(query, create=False)
        return result


# ---- events written later (see Journal.append_later) ------------------------------------------

_queue_lock = threading.Condition()
_queues: dict[str, tuple[Journal, list[Event]]] = {}  # journal file -> (writer, events in order)
_write_lock = threading.Lock()  # held from taking a queue to its commit: readers wait for it
_hurry = threading.Event()
_helper: threading.Thread | None = None


def _start_helper() -> None:
    global _helper
    with _queue_lock:
        if _helper is None or not _helper.is_alive():
            _helper = threading.Thread(target=_help, name="ipy_resume-journal", daemon=True)
            _helper.start()


def _defer(journal: Journal, event: Event) -> None:
    with _queue_lock:
        queued = _queues.setdefault(str(journal.path), (journal, []))[1]
        queued.append(event)
        _start_helper()
        if len(queued) == 1:
            _queue_lock.notify()
        if len(queued) >= _DEFER_MAX:
            _hurry.set()


def _help() -> None:
    while True:
        with _queue_lock:
            while not _queues:
                _queue_lock.wait()
        _hurry.wait(DEFER_SECONDS)  # gather what follows in one transaction
        _hurry.clear()
        flush_deferred()


def flush_deferred(path: str | os.PathLike[str] | None = None) -> None:
    """Write the events queued by :meth:`Journal.append_later` (of the journal at *path*).

    A failure is kept in the journal's ``deferred_error``; those events are dropped.

    >>> flush_deferred()
    """
    if not _queues:
        return
    with _write_lock:
        with _queue_lock:
            if path is None:
                batches = list(_queues.values())
                _queues.clear()
            else:
                batch = _queues.pop(str(path), None)
                batches = [] if batch is None else [batch]
        for journal, events in batches:
            try:
                journal._append_many(events)
            except (OSError, sqlite3.Error) as exc:
                journal.deferred_error = exc


def _after_fork() -> None:
    # the parent's queue is the parent's to write; its locks may have been held at the fork
    global _queue_lock, _write_lock, _hurry, _helper
    _queues.clear()
    _coming.clear()
    _queue_lock, _write_lock, _hurry, _helper = (
        threading.Condition(),
        threading.Lock(),
        threading.Event(),
        None,
    )


atexit.register(flush_deferred)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


_UPSERT = " ON CONFLICT(event_id) DO UPDATE SET " + ", ".join(
    f"{column} = excluded.{column}"
    for column in [
        "checkpoint_id",
        "cell_id",
        "key",
        "parent",
        "session",
        "started",
        "created",
        "duration",
        "saved",
        "io",
        "bytes",
        "names",
        "outcome",
        "detail",
    ]
)


def insert_event(conn: sqlite3.Connection, event: Event, ignore: bool = False) -> sqlite3.Cursor:
    """Insert *event* into an open journal database (*ignore*: skip one already there).

    >>> insert_event(conn, event, ignore=True).rowcount  # doctest: +SKIP
    1
    """
    # Not ignored, an event already there (rebuilt from its checkpoint's manifest while its
    # kernel was about to append it) takes the kernel's fields and keeps its place (seq).
    verb = "INSERT OR IGNORE" if ignore else "INSERT"
    update = "" if ignore else _UPSERT
    return conn.execute(
        f"{verb} INTO events (event_id, checkpoint_id, cell_id, key, parent, session,"
        " started, created, duration, saved, io, bytes, names, outcome, detail)"
        f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){update}",
        (
            event.event_id,
            event.checkpoint_id,
            event.cell_id,
            event.key,
            event.parent,
            event.session,
            event.started,
            event.created,
            event.duration,
            event.saved,
            event.io,
            event.bytes,
            json.dumps(sorted(event.names)),
            event.outcome,
            event.detail,
        ),
    )


# The connection of append_detached, one per thread (the background writer's, in
# practice): opened once per journal file, not once per save, since a run of small cells
# journals dozens of saves a second and each connect cost the writer more than its insert.
_detached = threading.local()


def _detached_connection(path: Path) -> sqlite3.Connection:
    """This thread's own connection to the journal at *path*, opened again when the file
    was replaced (a rebuilt journal) or another journal is asked for."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    # (the change time too: a journal removed and made again may get the same inode)
    ident = None if st is None else (st.st_dev, st.st_ino, st.st_ctime_ns)
    held: tuple[str, Any, sqlite3.Connection] | None = getattr(_detached, "conn", None)
    if held is not None and ident is not None and held[:2] == (str(path), ident):
        return held[2]
    _drop_detached()
    conn = sqlite3.connect(path, timeout=_DETACHED_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=NORMAL")  # (WAL mode is the file's already)
    except sqlite3.Error:
        conn.close()
        raise
    _detached.conn = (str(path), ident, conn)
    return conn


def _drop_detached() -> None:
    """Close this thread's connection of append_detached, if it has one."""
    held = getattr(_detached, "conn", None)
    _detached.conn = None
    if held is not None:
        with contextlib.suppress(sqlite3.Error):
            held[2].close()


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


REBUILT = "rebuilt from its manifest: the journal was lost or damaged"
OUTCOME_PAYLOAD = "ipy_resume"
"""The ``source`` of the execute-reply payload naming a ``%%checkpoint`` cell's outcome
(read by headless runs: a background save's event is appended once it is durable)."""
RECOVERED = "saved by a kernel that died before the save was durable; finished after it"
"""``detail`` of the events of saves finished for a dead kernel (see ``pending``)."""
ADOPTED = "journaled from its manifest: its kernel ended before it wrote this event"
"""``detail`` of the events :func:`rebuild` adds to a sound journal."""
STAMP = "event"
"""The key of a manifest's ``info`` that holds its event as the kernel made it (see
:func:`stamp`), so the journal can be derived from the manifests exactly."""


def stamp(parent: str | None, writer: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The identity of the timeline event of a checkpoint about to be saved, kept in its
    manifest: its id, its parent, when it was made and which process will journal it.

    A kernel that dies between publishing the manifest and appending the event leaves
    everything the next reader needs to append that very event (:func:`rebuild`).

    >>> sorted(stamp("e1", {"pid": 1}))
    ['id', 'parent', 'started', 'writer']
    """
    event_id = _uuid4_hex()
    with _coming_lock:
        _coming.add(event_id)
    return {"id": event_id, "parent": parent, "started": time.time(), "writer": writer}


_coming: set[str] = set()  # stamped here, not appended yet (see rebuild)
_coming_lock = threading.Lock()


def _appended(event_id: str) -> None:
    if event_id in _coming:
        with _coming_lock:
            _coming.discard(event_id)


def _stamp_of(m: Manifest) -> dict[str, Any] | None:
    doc = m.info.get(STAMP)
    if isinstance(doc, dict) and isinstance(doc.get("id"), str) and doc["id"]:
        return doc
    return None


def events_from_manifests(
    manifests: Iterable[Manifest],
    known: Mapping[str, Sequence[tuple[float, str]]] | None = None,
    detail: str = REBUILT,
) -> list[Event]:
    """One event per checkpoint, as its execution was journaled, oldest first.

    A manifest saved with a :func:`stamp` gives its event back exactly: id, parent and
    time.  An older one gets a stand-in (``rebuilt-<id>``).  Given *known* (session ->
    (started, event id) of the journal's events), a parent that is not there (a
    restore's event, which a crash may lose) is the latest earlier event of the same
    kernel session among those and the ones made here.  What a manifest cannot tell is lost with a journal:
    restores and failed or uncached runs.

    >>> events_from_manifests([])
    []
    """
    out: list[Event] = []
    checked = known is not None  # (else a stamped parent is taken as it is)
    known = known or {}
    made: dict[str, list[tuple[float, str]]] = {}
    ids = {e for chain in known.values() for _t, e in chain}

    def earlier(session: str, started: float) -> str | None:
        found = [*known.get(session, ()), *made.get(session, ())]
        before = [(t, e) for t, e in found if t <= started]
        return max(before)[1] if before else None

    def when(m: Manifest) -> float:
        stamped = _stamp_of(m)
        if stamped is not None and isinstance(stamped.get("started"), (int, float)):
            return float(stamped["started"])
        return datetime.fromisoformat(m.created.replace("Z", "+00:00")).timestamp()

    for m in sorted(manifests, key=lambda m: (when(m), order_key(m))):
        session = m.info.get("session")
        session = session if isinstance(session, str) and session else "rebuilt"
        started = when(m)
        stamped = _stamp_of(m)
        event_id = stamped["id"] if stamped is not None else f"{_REBUILT_PREFIX}{m.id}"
        parent = stamped.get("parent") if stamped is not None else None
        if not (isinstance(parent, str) and (parent in ids or not checked)):
            parent = earlier(session, started)
        duration = m.info.get("duration")
        event = Event(
            cell_id=m.cell_id,
            session=session,
            outcome="executed" if m.complete else "incomplete",
            checkpoint_id=m.id,
            key=m.key,
            parent=parent,
            started=started,
            duration=float(duration) if isinstance(duration, (int, float)) else 0.0,
            bytes=m.bytes_written,
            names=sorted(m.values),
            detail=detail,
            event_id=event_id,
        )
        made.setdefault(session, []).append((started, event_id))
        ids.add(event_id)
        out.append(event)
    return out


def _known_events(conn: sqlite3.Connection) -> dict[str, list[tuple[float, str]]]:
    known: dict[str, list[tuple[float, str]]] = {}
    for session, started, event_id in conn.execute("SELECT session, started, event_id FROM events"):
        known.setdefault(session, []).append((float(started), event_id))
    return known


def rebuild(
    conn: sqlite3.Connection,
    source: Callable[[set[str]], Iterable[Manifest]],
    skip: Iterable[str | None] = (),
    settle: float = 0.0,
    alive: Callable[[Any], bool] | None = None,
    detail: str = REBUILT,
    eventless: set[str] | None = None,
) -> int:
    """Add an event for each checkpoint the journal does not name; returns how many.

    *source* gives the verified manifests except those of the ids it is passed (only
    the missing ones are read); *skip* are ids not to add, and so are checkpoints whose
    event this process is about to append.  With *settle*, a checkpoint younger than
    that many seconds is left for its own kernel to journal, unless its stamp names a
    writer that *alive* says has ended.  Loop checkpoints of ``resumable``
    never had events and get none (their ids are added to *eventless*).  One transaction, taken before reading what is
    there, so two processes rebuilding add each event once.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        known = {row[0] for row in conn.execute("SELECT DISTINCT checkpoint_id FROM events")}
        known.update(i for i in skip if i)
        cutoff = time.time() - settle

        def settled(m: Manifest) -> bool:
            stamped = _stamp_of(m)
            if stamped is not None and stamped["id"] in _coming:
                # (even into a journal being rebuilt: this process appends it, and its row
                # keeps its place among the ones appended around it)
                return False
            if not settle or m.created_at.timestamp() < cutoff:
                return True
            writer = None if stamped is None else stamped.get("writer")
            return alive is not None and isinstance(writer, dict) and not alive(writer)

        found = [m for m in source({i for i in known if i}) if m.id not in known]
        if eventless is not None:
            eventless.update(m.id for m in found if m.info.get("kind") == "loop")
        manifests = [m for m in found if m.info.get("kind") != "loop" and settled(m)]
        added = 0
        if manifests:
            for event in events_from_manifests(manifests, _known_events(conn), detail):
                added += insert_event(conn, event, ignore=True).rowcount
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return added


def check(root: Backend | str | os.PathLike[str]) -> str | None:
    """What is wrong with the journal of the store at *root*, a backend with
    ``local_files`` or its folder (None: sound or absent).

    Reads only: a damaged journal is moved away and rebuilt by the next
    :class:`Journal` with a source (the engine's, ``gc``'s).

    >>> check(Path("/nonexistent")) is None
    True
    """
    backend = root if isinstance(root, Backend) else LocalBackend(root)
    path = backend.local_path(JOURNAL_FILE)
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=_BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        return f"cannot be opened ({exc})"
    try:
        status = conn.execute("PRAGMA quick_check").fetchone()
        if status is None or status[0] != "ok":
            return f"is damaged ({status[0] if status else 'no answer'})"
        conn.execute("SELECT COUNT(*) FROM events").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return "is damaged (it has no events table)"
        return None  # busy or locked: in use, not damaged
    except sqlite3.DatabaseError as exc:
        return f"is damaged ({exc})"
    finally:
        conn.close()
    return None


def _row_to_event(row: sqlite3.Row) -> Event:
    return Event(
        cell_id=row["cell_id"],
        session=row["session"],
        outcome=row["outcome"],
        checkpoint_id=row["checkpoint_id"],
        key=row["key"],
        parent=row["parent"],
        started=row["started"],
        duration=row["duration"],
        saved=row["saved"],
        io=row["io"],
        bytes=row["bytes"],
        names=list(json.loads(row["names"])),
        detail=row["detail"],
        event_id=row["event_id"],
        seq=row["seq"],
    )
