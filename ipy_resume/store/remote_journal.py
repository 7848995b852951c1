"""The timeline of a store in a bucket: one immutable object per event, merged on read.

SQLite cannot live in a bucket (no locks, no partial writes), and a single timeline
object rewritten by every kernel would lose events to concurrent writers.  So each
event is its own small object, ``events/<ms since epoch>-<event id>.json``, written
once with a plain PUT: kernels on different machines never contend, and a kernel
killed mid-write loses at most its own last event.

Reading lists ``events/`` and fetches only the events not seen before into a local
SQLite index under the user's cache directory (one per store URL), which answers the
queries exactly as the local journal does.  So kernel B's ``%checkpoint list``, the
panel and the widget show kernel A's events, at the cost of one LIST request (per
1,000 events) per refresh, plus one GET per new event.

Events are display data: they are parsed strictly (a malformed object is skipped) and
never unpickled; what is restored is decided by the signed manifests alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipy_resume.store.blobcache import default_cache_dir
from ipy_resume.store.journal import OUTCOMES, Event, Journal, insert_event

if TYPE_CHECKING:
    from ipy_resume.store.remote import RemoteStore

__all__ = ["EVENTS", "RemoteJournal", "event_from_json"]

EVENTS = "events"
_REFRESH_SECONDS = 1.0  # the panel asks several questions in a row: one listing serves them


def _str(value: object, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _num(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    return float(value)


def event_from_json(doc: Any) -> Event:
    """An :class:`Event` from its stored JSON; ValueError when anything is off.

    >>> event_from_json({"cell_id": "a", "session": "s", "outcome": "executed",
    ...                  "event_id": "e1", "started": 1.0}).cell_id
    'a'
    """
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    outcome = _str(doc.get("outcome"))
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    names = doc.get("names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("bad names")
    return Event(
        cell_id=str(_str(doc.get("cell_id"))),
        session=str(_str(doc.get("session"))),
        outcome=str(outcome),
        checkpoint_id=_str(doc.get("checkpoint_id"), optional=True),
        key=_str(doc.get("key"), optional=True),
        parent=_str(doc.get("parent"), optional=True),
        started=_num(doc.get("started")),
        duration=_num(doc.get("duration", 0.0)),
        saved=_num(doc.get("saved", 0.0)),
        io=_num(doc.get("io", 0.0)),
        bytes=int(_num(doc.get("bytes", 0))),
        names=list(names),
        detail=str(_str(doc.get("detail", ""))),
        event_id=str(_str(doc.get("event_id"))),
    )


def _key(event: Event) -> str:
    return f"{EVENTS}/{int(event.started * 1000):013d}-{event.event_id}.json"


def _event_id(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".json") or "-" not in name:
        return None
    return name[: -len(".json")].split("-", 1)[1] or None


class RemoteJournal:
    """The :class:`.journal.Journal` interface over event objects in the store.

    >>> RemoteJournal(RemoteStore("s3://bucket/team")).events()  # doctest: +SKIP
    [Event(cell_id='train', ...)]
    """

    def __init__(self, store: RemoteStore, cache_dir: Path | None = None) -> None:
        self.store = store
        self.backend = store.backend
        digest = hashlib.sha256(store.url.encode()).hexdigest()[:16]
        folder = (cache_dir or default_cache_dir().parent / "journals") / digest
        self.index = Journal(folder)  # a cache: rebuilt from the bucket when lost
        self.path = f"{store.url}/{EVENTS}/"
        self.rebuilt = 0
        self.quarantined: list[str] = []
        self._synced = 0.0
        self._lock = threading.Lock()

    def close(self) -> None:
        self.index.close()

    def append(self, event: Event) -> Event:
        """Write *event* to the bucket (the record), then to the local index."""
        doc = event.to_json()
        doc.pop("seq", None)
        data = json.dumps(doc, sort_keys=True).encode("utf-8")
        self.backend.put(_key(event), [data])
        return self.index.append(event)

    def sync(self, force: bool = False) -> int:
        """Fetch events other kernels wrote since the last look; how many were new."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._synced < _REFRESH_SECONDS:
                return 0
            self._synced = now
            known = self._known()
            todo = [
                obj.key
                for obj in self.backend.list(EVENTS)
                if (eid := _event_id(obj.key)) is not None and eid not in known
            ]
            if not todo:
                return 0
            with ThreadPoolExecutor(8, thread_name_prefix="ipy_resume-events") as pool:
                fetched = list(pool.map(self._fetch, todo))
            events = sorted((e for e in fetched if e is not None), key=lambda e: e.started)

            def insert(conn: sqlite3.Connection) -> int:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for event in events:
                        insert_event(conn, event, ignore=True)
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
                return len(events)

            return int(self.index._recovering(insert, create=True) or 0)

    def _fetch(self, key: str) -> Event | None:
        try:
            return event_from_json(json.loads(self.backend.get(key)))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None  # gone meanwhile, or not an event: nothing to show

    def _known(self) -> set[str]:
        def query(conn: sqlite3.Connection) -> set[str]:
            return {row[0] for row in conn.execute("SELECT event_id FROM events")}

        return set(self.index._recovering(query, create=False) or set())

    def events(self, **filters: Any) -> list[Event]:
        """As :meth:`.journal.Journal.events`, after fetching other kernels' events."""
        self.sync()
        return self.index.events(**filters)

    def checkpoint_ids(self) -> set[str]:
        self.sync()
        return self.index.checkpoint_ids()

    def last(self, session: str | None = None) -> Event | None:
        self.sync()
        return self.index.last(session)
