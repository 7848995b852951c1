"""Timeline queries and restore plans, shared by the magics, the CLI, the comm and the panel.

The journal says which checkpoint each event used and which event came before
it (its *parent*: the previous event of the same kernel session, or, for the
first event after ``%resume``, the event it resumed from). Following parents
from an event back to the start gives the *lineage* that built the kernel's
state at that point; restoring an event means giving every name the value of
the newest checkpoint in its lineage that stored it.
"""

from __future__ import annotations

import statistics
import sys
import types
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import reports, restoring
from .engine import Outcome, default_store_dir, engine_for
from .store import Manifest, Store
from .store.journal import Event, Journal
from .store.location import Location, open_store, resolve
from .store.manifest import SHORT_ID, unique_prefixes
from .units import format_size

RESTORING_OUTCOMES = ("executed", "restored", "incomplete", "resumed")


def default_root() -> Location:
    """The store the kernel uses now (``$IPY_RESUME_DIR`` or ``./.ipy_resume``).

    >>> default_root().name  # doctest: +SKIP
    '.ipy_resume'
    """
    return resolve(default_store_dir())


# ---- read-only views ----------------------------------------------------------------------


def snapshot(
    root: Location,
    *,
    after: int | None = None,
    limit: int | None = None,
    store: Store | None = None,
) -> dict[str, Any]:
    """The timeline of a store as JSON-ready data, for the panel and the widget.

    >>> snapshot(Path("/nonexistent"))["exists"]
    False
    """
    root = resolve(root)
    exists = _exists(root, store)
    journal = _journal(root, store)
    events = journal.events(after=after, limit=limit)
    manifests = _manifests(root, store)
    live = {m.id for m in manifests}
    named = journal.checkpoint_ids()
    short = unique_prefixes(live | named)
    shown = {e.checkpoint_id for e in events if e.checkpoint_id}
    return {
        "store": str(root),
        "exists": exists,
        "events": [event.to_json() for event in events],
        "summary": summary(root, store, manifests=manifests),
        "last_seq": events[-1].seq if events else after,
        # checkpoints the journal names but the store no longer has (gc, deleted, untrusted):
        # their rows stay on the timeline, but they cannot be restored
        "unavailable": sorted(named - live),
        # the prefix to show for each id: those of this page's events, and every one longer
        # than 8 characters (a later checkpoint may have made an earlier one's grow), so a
        # front end that keeps earlier pages never slices an id itself
        "short_ids": {i: p for i, p in sorted(short.items()) if i in shown or len(p) > SHORT_ID},
    }


def summary(
    root: Location,
    store: Store | None = None,
    events: Sequence[Event] | None = None,
    manifests: Sequence[Manifest] | None = None,
) -> dict[str, Any]:
    """Counts and totals of a store: checkpoints, bytes, hit rate, time saved.

    *events* (the whole journal) and *manifests* (every verified one) when the caller has
    read them already.

    >>> summary(Path("/nonexistent"))["checkpoints"]
    0
    """
    root = resolve(root)
    if manifests is None:
        manifests = _manifests(root, store)
    if events is None:
        events = _journal(root, store).events()
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


def stats(root: Location, store: Store | None = None) -> dict[str, Any]:
    """``summary`` plus save/load latency percentiles (seconds).

    >>> stats(Path("/nonexistent"))["save_latency"]
    {}
    """
    root = resolve(root)
    events = _journal(root, store).events()
    result = summary(root, store, events)
    result["save_latency"] = percentiles(e.io for e in events if e.outcome == "executed")
    result["load_latency"] = percentiles(e.io for e in events if e.outcome == "restored")
    result["sessions"] = len({e.session for e in events})
    return result


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
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "n": len(data)}


def details(root: Location, target: str, store: Store | None = None) -> dict[str, Any]:
    """Everything known about one checkpoint (id, unique prefix or CELL_ID).

    >>> details(Path(".ipy_resume"), "train")["cell_id"]  # doctest: +SKIP
    'train'
    """
    manifests = _manifests(resolve(root), store)
    manifest = reports.resolve(manifests, _checkpoint_of(root, target, store) or target)
    short = unique_prefixes([m.id for m in manifests])
    return reports.describe(manifest, short.get(manifest.id))


def stats_text(data: dict[str, Any]) -> str:
    """``stats`` as a few readable lines.

    >>> print(stats_text(stats(Path("/nonexistent"))).splitlines()[0])
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


# ---- restoring ----------------------------------------------------------------------------


@dataclass
class RestorePlan:
    """Which checkpoint supplies each name, and which names must go."""

    target: Manifest
    event: Event | None
    sources: dict[str, Manifest] = field(default_factory=dict)  # name → newest manifest in lineage
    remove: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # deleted by the lineage, as of the target
    chain: list[Manifest] = field(default_factory=list)  # the lineage's checkpoints, oldest first


def plan_restore(
    store: Store,
    target: str,
    namespace_names: Iterable[str] = (),
) -> RestorePlan:
    """Work out how to rebuild the state as of *target* without loading anything.

    >>> plan_restore(Store(".ipy_resume"), "train").target.cell_id  # doctest: +SKIP
    'train'
    """
    events = store.journal().events()
    manifests = store.manifests()
    by_id = {m.id: m for m in manifests}
    target_event = _target_event(events, target)
    if target_event is not None and target_event.checkpoint_id in by_id:
        manifest = by_id[target_event.checkpoint_id]
    elif target_event is not None or (
        target not in by_id and any(e.checkpoint_id == target for e in events)
    ):
        gone = target_event.checkpoint_id if target_event else target
        raise reports.TargetError(
            f"checkpoint {gone} is on the timeline but no longer in the store "
            "(removed by 'ipy-resume gc' or deleted); pick a later one from '%checkpoint list'."
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
    return RestorePlan(manifest, target_event, sources, remove, sorted(deleted & present), chain)


def restore(
    namespace: MutableMapping[str, Any],
    root: Location,
    target: str,
    store: Store | None = None,
    how: str = "restore",
) -> dict[str, Any]:
    """Rebuild the kernel state as of checkpoint *target* (id, unique prefix, CELL_ID or event id).

    Names recorded up to it take their values at that point, names first created
    by checkpointed cells after it are removed, other names are untouched, and the
    RNG state is set. Every value is loaded and verified before the namespace changes.
    When this process has an engine on the store, the restore joins its timeline as a
    ``resumed`` event whose parent is the target, so later cells continue that branch.

    >>> restore(get_ipython().user_ns, default_root(), "train")["restored"]  # doctest: +SKIP
    ['model', 'history']
    """
    store = store or open_store(root)
    plan = plan_restore(store, target, namespace.keys())
    loaded = restoring.load(store, plan.target, plan.sources, plan.chain)
    problems = restoring.apply(namespace, store, loaded, plan.remove + plan.deleted)
    values = loaded.values
    when = plan.target.created.replace("T", " ")[:19]
    removed = plan.remove + plan.deleted
    message = (
        f"restored {len(values)} name(s) as of checkpoint {store.short_id(plan.target.id)} "
        f"('{plan.target.cell_id}', {when} UTC): {', '.join(sorted(values)) or 'none'}"
    )
    if removed:
        message += f"; removed {', '.join(removed)}"
    if problems:
        message += "; " + "; ".join(problems)
    engine = engine_for(store.location)
    if engine is not None:
        outcome = Outcome(
            "resumed", plan.target.id, sorted(values), detail=f"{how} to {plan.target.id}"
        )
        parent = plan.event.event_id if plan.event else None
        engine.record(outcome, plan.target.cell_id, parent=parent)
    return {
        "checkpoint_id": plan.target.id,
        "cell_id": plan.target.cell_id,
        "event_id": plan.event.event_id if plan.event else None,
        "created": plan.target.created,
        "restored": sorted(values),
        "removed": removed,
        "message": message,
    }


def latest_session_event(root: Location) -> Event | None:
    """The last event that holds a checkpoint, in the most recent kernel session.

    >>> latest_session_event(Path("/nonexistent")) is None
    True
    """
    events = [e for e in _journal(resolve(root), None).events() if e.checkpoint_id]
    if not events:
        return None
    last_session = events[-1].session
    return [e for e in events if e.session == last_session][-1]


def session_span(root: Location, session: str) -> str:
    """When a kernel session ran and how many events it had, in words.

    >>> session_span(Path("/nonexistent"), "abc")
    ''
    """
    events = _journal(resolve(root), None).events(session=session)
    if not events:
        return ""
    first, last = events[0].created, events[-1].created
    day = first[:10]
    return (
        f"on {day} from {first[11:19]} to {last[11:19]} UTC "
        f"({len(events)} event{'s' if len(events) != 1 else ''})"
    )


# ---- helpers ------------------------------------------------------------------------------


def _exists(root: Location, store: Store | None) -> bool:
    if store is not None or isinstance(root, str):
        return (store or open_store(root)).exists()
    return (root / "store.json").exists() or (root / "manifests").is_dir()


def _journal(root: Location, store: Store | None) -> Journal:
    """The store's journal; through a Store when it has checkpoints, so a lost one is rebuilt."""
    if store is None and isinstance(root, Path) and not (root / "manifests").is_dir():
        return Journal(root)
    journal: Journal = (store or open_store(root)).journal()
    return journal


def _manifests(root: Location, store: Store | None) -> list[Manifest]:
    if store is None and isinstance(root, Path) and not (root / "manifests").is_dir():
        return []
    return (store or open_store(root)).manifests()


def _unique_bytes(manifests: Sequence[Manifest]) -> int:
    sizes: dict[str, int] = {}
    for manifest in manifests:
        for ref in list(manifest.values.values()) + list(manifest.extras.values()):
            sizes[ref.blob] = ref.size
            for buffer in ref.buffers:
                sizes[buffer.blob] = buffer.size
    return sum(sizes.values())


def _target_event(events: Sequence[Event], target: str) -> Event | None:
    for event in events:
        if event.event_id == target:
            return event
    return None


def _latest_event_for(events: Sequence[Event], checkpoint_id: str) -> Event | None:
    matching = [e for e in events if e.checkpoint_id == checkpoint_id]
    return matching[-1] if matching else None


def _checkpoint_of(root: Location, target: str, store: Store | None = None) -> str | None:
    event = _target_event(_journal(resolve(root), store).events(), target)
    return event.checkpoint_id if event else None


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


class _CallableModule(types.ModuleType):
    """Lets ``from ipy_resume import timeline; timeline()`` show the widget.

    The contract names both a module of timeline queries (``ipy_resume.timeline``)
    and a function ``timeline()``; Python binds the submodule over any attribute of
    the same name in the package, so the module itself is made callable.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .widget import timeline_widget

        return timeline_widget(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
