"""The timeline: an append-only journal of every execution and restore.

SQLite in WAL mode gives what the journal needs and nothing it doesn't: each
append is one transaction, a kernel killed mid-write leaves the last committed
row intact, and several kernels can append to one store at once (SQLite's own
locking, with a busy timeout). Manifests stay the source of truth for *what*
is stored; the journal records *when* and *how* it was used.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import fsio

JOURNAL_FILE = "journal.sqlite"
# failed = executed but could not be saved; uncached = executed without a key (see detail);
# resumed = the start of a kernel session brought back by %resume or a timeline restore.
OUTCOMES = ("executed", "restored", "incomplete", "failed", "uncached", "resumed")
_BUSY_TIMEOUT_S = 30.0

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
    event_id: str = field(default_factory=lambda: uuid.uuid4().hex)
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

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.path = self.root / JOURNAL_FILE
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def _connect(self, create: bool) -> Iterator[sqlite3.Connection | None]:
        # One connection per Journal, kept open: opening and closing per event made SQLite
        # checkpoint the WAL (with fsyncs) on every close, ~10 ms per cell.
        with self._lock:
            if self._conn is not None and not self.path.exists():
                self._close_locked()  # the store was deleted under us
            if self._conn is None:
                if not create and not self.path.exists():
                    yield None
                    return
                if create:
                    fsio.makedirs(self.root)
                conn = sqlite3.connect(
                    self.path,
                    timeout=_BUSY_TIMEOUT_S,
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA journal_mode=WAL")
                # In WAL mode NORMAL keeps every committed row through a killed process; only
                # an OS crash may lose the newest rows, never the file's consistency.
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                self._conn = conn
            yield self._conn

    def _close_locked(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the connection (it reopens on the next use)."""
        with self._lock:
            self._close_locked()

    def append(self, event: Event) -> Event:
        """Commit *event* durably; returns it with ``seq`` filled in."""
        with self._connect(create=True) as conn:
            assert conn is not None
            cursor = conn.execute(
                "INSERT INTO events (event_id, checkpoint_id, cell_id, key, parent, session,"
                " started, created, duration, saved, io, bytes, names, outcome, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            event.seq = cursor.lastrowid
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
        with self._connect(create=False) as conn:
            if conn is None:
                return []
            conn.row_factory = sqlite3.Row
            return [_row_to_event(row) for row in conn.execute(sql, params)]

    def checkpoint_ids(self) -> set[str]:
        """Every checkpoint id an event refers to."""
        sql = "SELECT DISTINCT checkpoint_id FROM events WHERE checkpoint_id IS NOT NULL"
        with self._connect(create=False) as conn:
            if conn is None:
                return set()
            return {row[0] for row in conn.execute(sql)}

    def last(self, session: str | None = None) -> Event | None:
        """The most recent event (of *session*, when given)."""
        sql = "SELECT * FROM events"
        params: Sequence[Any] = ()
        if session is not None:
            sql += " WHERE session = ?"
            params = (session,)
        sql += " ORDER BY seq DESC LIMIT 1"
        with self._connect(create=False) as conn:
            if conn is None:
                return None
            conn.row_factory = sqlite3.Row
            row = conn.execute(sql, params).fetchone()
            return None if row is None else _row_to_event(row)


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
