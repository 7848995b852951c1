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

A restore's event (:meth:`RemoteJournal.append_later`) goes into the local index at once
and up to the bucket from a helper thread, so a hit does not wait for a PUT (except the
kernel's first, which finds out whether the bucket takes its writes).  Queued
uploads are written before the process exits (waiting at most :data:`EXIT_WAIT` seconds
for a slow server); a kernel killed before then loses those events from other machines'
view of the timeline, and nothing else.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import queue
import sqlite3
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipy_resume.store.blobcache import default_cache_dir
from ipy_resume.store.journal import OUTCOMES, SYNC_ENV, Event, Journal, insert_event

if TYPE_CHECKING:
    from ipy_resume.store.context import StoreContext

__all__ = ["EVENTS", "RemoteJournal", "event_from_json"]

EVENTS = "events"
_REFRESH_SECONDS = 1.0  # the panel asks several questions in a row: one listing serves them
EXIT_WAIT = 10.0
"""The longest the process waits at exit for restore events still going up to the bucket."""


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

    >>> RemoteJournal(RemoteStore("s3://bucket/team").ctx).events()  # doctest: +SKIP
    [Event(cell_id='train', ...)]
    """

    def __init__(self, store: StoreContext, cache_dir: Path | None = None) -> None:
        self.backend = store.backend
        url = str(store.location)
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        folder = (cache_dir or default_cache_dir().parent / "journals") / digest
        self.index = Journal(folder)  # a cache: rebuilt from the bucket when lost
        self.path = f"{url}/{EVENTS}/"
        self.rebuilt = 0
        self.quarantined: list[str] = []
        self._synced = 0.0
        self._lock = threading.Lock()
        # why events given to append_later did not reach the bucket (None: all did)
        self.deferred_error: BaseException | None = None
        self._uploads: queue.Queue[Event] = queue.Queue()
        self._wrote_once = False
        self._uploader: threading.Thread | None = None

    def close(self) -> None:
        self.flush()
        self.index.close()

    def append(self, event: Event) -> Event:
        """Write *event* to the bucket (the record), then to the local index."""
        self._put(event)
        return self.index.append(event)

    def _put(self, event: Event) -> None:
        doc = event.to_json()
        doc.pop("seq", None)
        data = json.dumps(doc, sort_keys=True).encode("utf-8")
        self.backend.put(_key(event), [data])

    def append_later(self, event: Event) -> Event:
        """Record *event* in the local index now and upload it from a helper thread.

        For a restore's event: the hit does not wait for a round trip to the server.
        A failed upload is kept in ``deferred_error`` (the engine says so once).

        >>> journal.append_later(Event(cell_id="c", session="s", outcome="restored"))  # doctest: +SKIP
        """
        if os.environ.get(SYNC_ENV) == "1" or not self._wrote_once:
            # the first is written at once: whether the bucket takes this kernel's writes
            # (a read-only teammate's do not) is then said with the first hit, not later
            self._wrote_once = True
            return self.append(event)
        event = self.index.append_later(event)
        self._uploads.put(event)
        if self._uploader is None or not self._uploader.is_alive():
            self._uploader = threading.Thread(
                target=_upload, args=(weakref.ref(self),), name="ipy_resume-events", daemon=True
            )
            self._uploader.start()
            _pending.add(self)
            _flush_before_exit()
        return event

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the events given to :meth:`append_later` are in the bucket.

        True when none is left (also when some failed: see ``deferred_error``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._uploads.unfinished_tasks:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if self._uploader is None or not self._uploader.is_alive():
                return False  # (a forked child: the parent uploads its own events)
            time.sleep(0.005)
        return True

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

            return int(self.index.recovering(insert, create=True) or 0)

    def _fetch(self, key: str) -> Event | None:
        try:
            return event_from_json(json.loads(self.backend.get(key)))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None  # gone meanwhile, or not an event: nothing to show

    def _known(self) -> set[str]:
        def query(conn: sqlite3.Connection) -> set[str]:
            return {row[0] for row in conn.execute("SELECT event_id FROM events")}

        return set(self.index.recovering(query, create=False) or set())

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


_pending: weakref.WeakSet[RemoteJournal] = weakref.WeakSet()


def _upload(ref: weakref.ref[RemoteJournal]) -> None:
    journal = ref()
    if journal is None:
        return
    uploads = journal._uploads
    del journal  # hold the journal only while there is work
    while True:
        event = uploads.get()
        journal = ref()
        try:
            if journal is not None:
                journal._put(event)
        except OSError as exc:
            if journal is not None:
                journal.deferred_error = exc
        finally:
            uploads.task_done()
            del journal


_exit_hook = False


def _flush_before_exit() -> None:
    """Have :func:`_flush_at_exit` run while the interpreter can still make requests.

    Plain ``atexit`` handlers run after ``concurrent.futures`` has stopped its thread
    pools, and the client's event loop resolves hosts on one ("cannot schedule new
    futures after interpreter shutdown"). ``threading``'s own exit hooks run before
    that, last registered first, so this one (registered after the client's modules
    were imported) runs ahead of the pools' shutdown. Where that hook is missing the
    plain ``atexit`` one is used.
    """
    global _exit_hook
    if _exit_hook:
        return
    _exit_hook = True
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(_flush_at_exit)
            return
    except RuntimeError:  # already shutting down
        return
    atexit.register(_flush_at_exit)


def _flush_at_exit() -> None:
    deadline = time.monotonic() + EXIT_WAIT
    for journal in list(_pending):
        journal.flush(timeout=max(0.0, deadline - time.monotonic()))
