"""Timeline queries: what a store's journal and manifests say, and how to restore an event.

The journal says which checkpoint each event used and which event came before
it (its *parent*: the previous event of the same kernel session, or, for the
first event after ``%resume``, the event it resumed from). Following parents
from an event back to the start gives the *lineage* that built the kernel's
state at that point; restoring an event means giving every name the value of
the newest checkpoint in its lineage that stored it.

A :class:`Timeline` only reads.  The magics, the CLI, the comm, the widget and the
server all ask it; restoring (which changes a namespace and adds an event) is
:func:`ipy_resume.engine.restoring.restore` and :meth:`ipy_resume.engine.core.Engine.restore`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.units import format_size
from ..store import Manifest, Store
from ..store.journal import Event, Journal
from ..store.location import Location, open_store, resolve
from ..store.manifest import SHORT_ID, unique_prefixes
from . import reports

__all__ = ["RESTORING_OUTCOMES", "RestorePlan", "Timeline", "percentiles", "stats_text"]

RESTORING_OUTCOMES = ("executed", "restored", "incomplete", "resumed")


@dataclass
class RestorePlan:
    """Which checkpoint supplies each name, and which names must go."""

    target: Manifest
    event: Event | None
    sources: dict[str, Manifest] = field(default_factory=dict)  # name → newest manifest in lineage
    remove: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # deleted by the lineage, as of the target
    chain: list[Manifest] = field(default_factory=list)  # the lineage's checkpoints, oldest first


class Timeline:
    """The read-only view of one store's timeline: its events and its checkpoints.

    *store* is None for a local folder that holds no checkpoint (nothing is opened, so
    nothing is created); *journal* is the store's (given by whoever holds it open).

    >>> Timeline.open(Path("/nonexistent")).snapshot()["exists"]
    False
    """

    def __init__(self, location: Location, store: Store | None, journal: Journal) -> None:
        self.location = location
        self.store = store
        self.journal = journal

    @classmethod
    def of(cls, store: Store) -> Timeline:
        """The timeline of an open *store* (its own journal).

        >>> Timeline.of(Store("/tmp/doc-store")).stats()["sessions"]  # doctest: +SKIP
        0
        """
        # A kernel killed right after its last cell leaves that cell's save staged: it is
        # finished, with its event, before the timeline is read (%resume restores it).
        store.settle_pending()
        journal = store.journal()
        # ... and so is the event of one published by a kernel that ended before it
        # journaled it (see journal.stamp).
        reconcile = getattr(journal, "reconcile", None)
        if reconcile is not None:
            with contextlib.suppress(OSError, sqlite3.Error):
                reconcile()
        return cls(store.location, store, journal)

    @classmethod
    def open(cls, root: Location, store: Store | None = None) -> Timeline:
        """The timeline of the store at *root* (through *store* when the caller has it open).

        A local folder without checkpoints is read without opening a store; otherwise the
        journal is the store's, rebuilt from the manifests when it was lost.

        >>> Timeline.open(Path("/nonexistent")).summary()["checkpoints"]
        0
        """
        root = resolve(root)
        if store is None and isinstance(root, Path) and not Store.has_checkpoints_at(root):
            return cls(root, None, Journal(root))
        return cls.of(store or open_store(root))

    # ---- what is there ---------------------------------------------------------------------

    def exists(self) -> bool:
        """True once the store has been created.

        >>> Timeline.open(Path("/nonexistent")).exists()
        False
        """
        if self.store is not None:
            return self.store.exists()
        return isinstance(self.location, Path) and Store.created_at(self.location)

    def manifests(self) -> list[Manifest]:
        """Every verified checkpoint, oldest first (none when the folder holds none)."""
        return self.store.manifests() if self.store is not None else []

    def events(self, **filters: Any) -> list[Event]:
        """The journal's events (``after``, ``limit``, ``session`` as :meth:`Journal.events`)."""
        return self.journal.events(**filters)

    # ---- read-only views -------------------------------------------------------------------

    def snapshot(self, *, after: int | None = None, limit: int | None = None) -> dict[str, Any]:
        """The timeline as JSON-ready data, for the panel and the widget.

        >>> Timeline.open(Path("/nonexistent")).snapshot()["events"]
        []
        """
        exists = self.exists()
        events = self.events(after=after, limit=limit)
        manifests = self.manifests()
        live = {m.id for m in manifests}
        named = self.journal.checkpoint_ids()
        short = unique_prefixes(live | named)
        shown = {e.checkpoint_id for e in events if e.checkpoint_id}
        return {
            "store": str(self.location),
            "exists": exists,
            "events": [event.to_json() for event in events],
            "summary": self.summary(manifests=manifests),
            "last_seq": events[-1].seq if events else after,
            # checkpoints the journal names but the store no longer has (gc, deleted,
            # untrusted): their rows stay on the timeline, but they cannot be restored
            "unavailable": sorted(named - live),
            # the prefix to show for each id: those of this page's events, and every one
            # longer than 8 characters (a later checkpoint may have made an earlier one's
            # grow), so a front end that keeps earlier pages never slices an id itself
            "short_ids": {
                i: p for i, p in sorted(short.items()) if i in shown or len(p) > SHORT_ID
            },
        }

    def summary(
        self,
        events: Sequence[Event] | None = None,
        manifests: Sequence[Manifest] | None = None,
    ) -> dict[str, Any]:
        """Counts and totals: checkpoints, bytes, hit rate, time saved.

        *events* (the whole journal) and *manifests* (every verified one) when the caller
        has read them already.

        >>> Timeline.open(Path("/nonexistent")).summary()["hit_rate"]
        0.0
        """
        if manifests is None:
            manifests = self.manifests()
        if events is None:
            events = self.events()
        executed = sum(1 for e in events if e.outcome in ("executed", "incomplete", "failed"))
        restored = sum(1 for e in events if e.outcome == "restored")
        lookups = executed + restored
        return {
            "checkpoints": len(manifests),
            "bytes": _unique_bytes(manifests),
            "events": len(events),
            "executed": executed,
            "restored": restored,
            "hit_rate": restored / lookups if lookups else 0.0,
            "time_saved": sum(e.saved for e in events if e.outcome == "restored"),
        }

    def stats(self) -> dict[str, Any]:
        """:meth:`summary` plus save/load latency percentiles (seconds).

        >>> Timeline.open(Path("/nonexistent")).stats()["save_latency"]
        {}
        """
        events = self.events()
        result = self.summary(events)
        result["save_latency"] = percentiles(e.io for e in events if e.outcome == "executed")
        result["load_latency"] = percentiles(e.io for e in events if e.outcome == "restored")
        result["sessions"] = len({e.session for e in events})
        return result

    def details(self, target: str) -> dict[str, Any]:
        """Everything known about one checkpoint (id, unique prefix, CELL_ID or event id).

        >>> Timeline.open(Path(".ipy_resume")).details("train")["cell_id"]  # doctest: +SKIP
        'train'
        """
        manifests = self.manifests()
        event = _event(self.events(), target)
        manifest = reports.resolve(manifests, (event.checkpoint_id if event else None) or target)
        short = unique_prefixes([m.id for m in manifests])
        return reports.describe(manifest, short.get(manifest.id))

    def latest_session_event(self) -> Event | None:
        """The latest event that holds a checkpoint (of the most recent kernel session).

        >>> Timeline.open(Path("/nonexistent")).latest_session_event() is None
        True
        """
        events = [e for e in self.events() if e.checkpoint_id]
        if not events:
            return None
        # By time, not by row: a background save's event is written when the save is
        # durable, and a restore's a moment later, so rows may land out of order.
        return max(events, key=lambda e: (e.started, e.seq or 0))

    def session_span(self, session: str) -> str:
        """When a kernel session ran and how many events it had, in words.

        >>> Timeline.open(Path("/nonexistent")).session_span("abc")
        ''
        """
        events = self.events(session=session)
        if not events:
            return ""
        first, last = events[0].created, events[-1].created
        return (
            f"on {first[:10]} from {first[11:19]} to {last[11:19]} UTC "
            f"({len(events)} event{'s' if len(events) != 1 else ''})"
        )

    # ---- restore plans ---------------------------------------------------------------------

    def plan_restore(self, target: str, namespace_names: Iterable[str] = ()) -> RestorePlan:
        """Work out how to rebuild the state as of *target* without loading anything.

        >>> Timeline.open(Path(".ipy_resume")).plan_restore("train").target.cell_id  # doctest: +SKIP
        'train'
        """
        events = self.events()
        manifests = self.manifests()
        by_id = {m.id: m for m in manifests}
        target_event = _event(events, target)
        if target_event is not None and target_event.checkpoint_id in by_id:
            manifest = by_id[target_event.checkpoint_id]
        elif target_event is not None or (
            target not in by_id and any(e.checkpoint_id == target for e in events)
        ):
            gone = target_event.checkpoint_id if target_event else target
            raise reports.TargetError(
                f"checkpoint {gone} is on the timeline but no longer in the store "
                "(removed by 'ipy-resume gc' or deleted); pick a later one from "
                "'%checkpoint list'."
            )
        else:
            manifest = reports.resolve(manifests, target)
            target_event = _latest_event_for(events, manifest.id)

        lineage = _lineage(events, target_event) if target_event is not None else []
        chain = [by_id[e.checkpoint_id] for e in lineage if e.checkpoint_id in by_id]
        if not chain or chain[-1].id != manifest.id:
            chain.append(manifest)
        sources: dict[str, Manifest] = {}
        deleted: set[str] = set()
        for step in chain:  # oldest first: later checkpoints win
            for name in step.values:
                sources[name] = step
                deleted.discard(name)
            for name in step.info.get("deleted", []):
                sources.pop(name, None)
                deleted.add(name)

        later_names: set[str] = set()
        cutoff = target_event.seq if target_event is not None and target_event.seq else 0
        in_lineage = {e.event_id for e in lineage}
        for event in events:
            if (event.seq or 0) > cutoff and event.event_id not in in_lineage:
                later_names.update(event.names)
        present = set(namespace_names)
        remove = sorted((later_names - set(sources)) & present)
        return RestorePlan(
            manifest, target_event, sources, remove, sorted(deleted & present), chain
        )


def percentiles(values: Iterable[float]) -> dict[str, float]:
    """p50/p95/p99 of *values* (empty dict when there are none).

    >>> percentiles([1.0, 2.0, 3.0])["p50"]
    2.0
    """
    data = sorted(values)
    if not data:
        return {}
    if len(data) == 1:
        return {"p50": data[0], "p95": data[0], "p99": data[0], "n": 1}
    import statistics

    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "n": len(data)}


def stats_text(data: dict[str, Any]) -> str:
    """:meth:`Timeline.stats` as a few readable lines.

    >>> print(stats_text(Timeline.open(Path("/nonexistent")).stats()).splitlines()[0])
    checkpoints   0 (0 B)
    """

    def latency(part: dict[str, float]) -> str:
        if not part:
            return "-"
        return "  ".join(f"{k} {part[k] * 1000:.1f} ms" for k in ("p50", "p95", "p99"))

    return "\n".join(
        [
            f"checkpoints   {data['checkpoints']} ({format_size(data['bytes'])})",
            f"runs          {data['executed']} executed, {data['restored']} restored "
            f"(hit rate {data['hit_rate'] * 100:.0f}%)",
            f"time saved    {data['time_saved']:.1f} s",
            f"save latency  {latency(data['save_latency'])}",
            f"load latency  {latency(data['load_latency'])}",
        ]
    )


# ---- helpers ------------------------------------------------------------------------------


def _unique_bytes(manifests: Sequence[Manifest]) -> int:
    sizes: dict[str, int] = {}
    for manifest in manifests:
        for ref in list(manifest.values.values()) + list(manifest.extras.values()):
            sizes[ref.blob] = ref.size
            for buffer in ref.buffers:
                sizes[buffer.blob] = buffer.size
    return sum(sizes.values())


def _event(events: Sequence[Event], event_id: str) -> Event | None:
    for event in events:
        if event.event_id == event_id:
            return event
    return None


def _latest_event_for(events: Sequence[Event], checkpoint_id: str) -> Event | None:
    matching = [e for e in events if e.checkpoint_id == checkpoint_id]
    return matching[-1] if matching else None


def _lineage(events: Sequence[Event], last: Event) -> list[Event]:
    """The chain of parents ending at *last*, oldest first."""
    by_id = {e.event_id: e for e in events}
    chain: list[Event] = []
    seen: set[str] = set()
    current: Event | None = last
    while current is not None and current.event_id not in seen:
        if current.outcome in RESTORING_OUTCOMES:
            chain.append(current)
        seen.add(current.event_id)
        current = by_id.get(current.parent) if current.parent else None
    chain.reverse()
    return chain
