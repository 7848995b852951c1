"""Plan, then hit or miss: the heart of ``%%checkpoint``, free of IPython.

``Engine.run`` computes the cell's key from its normalised source and the values
it reads, restores a verified checkpoint when one exists, and otherwise runs
the cell through a :class:`Host` and commits what it produced. The host is the
only part that knows how to execute code and show output; the magic supplies
an IPython one, and :class:`ipy_resume.engine.execution.PlainHost` runs cells in a plain dict.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import gc
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ..fingerprint.key import cell_key, describe_differences, note_imports
from ..runtime import file_deps, settings
from ..runtime.analysis import AnalysisError, analyze
from ..runtime.capture import OutputRecord
from ..runtime.units import format_size
from ..store import Store, StoreError, background, location, prehash
from ..store.journal import STAMP, Event
from ..store.manifest import Manifest
from . import restoring, rng
from .cells import (
    CheckpointOptions,
    Content,
    Host,
    Outcome,
    Phases,
    Plan,
    Ran,
    RunResult,
    show_status,
)
from .content import content_of, reached_state
from .messages import save_failure, seconds, stored_as
from .sharing import shared_objects

if TYPE_CHECKING:
    from ..store.journal import Journal
    from ..store.results import SaveResult
    from .sharing import SharedObjects

SAVING_LINE_MIN = 32 << 20
"""A background save this large says "saving" when the cell returns, and "saved" once it is
durable.  A smaller one is waited for up to :data:`STATUS_WAIT` seconds, so its cell says
"saved" once, as a synchronous save would, where the host waits (a terminal; not a Jupyter
kernel, whose writer says "saved" under the cell a moment later).  A quiet cell's save (a
headless run), or one whose status goes to a cell badge, is never waited for.  Its bytes
are handed to the OS before the cell returns (staged), so a kernel that dies next loses
nothing."""
STATUS_WAIT = 2.0
_COMMITTED_MAX = 4096  # checkpoints an engine remembers committing (forgotten all at once)
PREFIX = "ipy_resume: "


@dataclass
class ActiveCell:
    """The ``%%checkpoint`` cell executing right now; ``resumable`` loops attach to it."""

    engine: Engine
    cell_id: str
    key: str
    namespace: MutableMapping[str, Any]
    host: Host
    loops: int = 0  # resumable loops started so far in this run
    reads: file_deps.Recorder | None = None  # the files read so far, for loop saves


_active: ActiveCell | None = None


def active_cell() -> ActiveCell | None:
    """The ``%%checkpoint`` cell being executed, or None outside one.

    >>> active_cell() is None
    True
    """
    return _active


class Engines:
    """The engines of one shell, one per store, each created on first use.

    A restore from the panel or the widget finds the shell's engine here, so it lands
    on the same timeline branch as one typed in the notebook.

    >>> engines = Engines()
    >>> engines.find("/nonexistent") is None
    True
    """

    def __init__(self) -> None:
        self._by_key: dict[str, Engine] = {}

    def get(self, root: str | os.PathLike[str] | None = None) -> Engine:
        """The engine of the store at *root* (default: :func:`default_store_dir`).

        *root* may be an object-store URL (``s3://bucket/prefix``).
        """
        where = location.store_location(root)
        name = location.key(where)
        if name not in self._by_key:
            store = location.open_store(where)
            self._by_key[name] = Engine(store, journal=store.journal())
        return self._by_key[name]

    def find(self, root: str | os.PathLike[str]) -> Engine | None:
        """The engine of the store at *root* if this shell has made one, else None."""
        return self._by_key.get(location.key(root))


class Engine:
    """Runs ``%%checkpoint`` cells against one store.

    >>> engine = Engine(Store("/tmp/doc-store"))  # doctest: +SKIP
    >>> engine.run(namespace, "y = x * 2", CheckpointOptions("double"), host)  # doctest: +SKIP
    """

    def __init__(
        self, store: Store, session: str | None = None, journal: Journal | None = None
    ) -> None:
        self.store = store
        self.session = session or uuid.uuid4().hex[:12]
        self.last_outcome: Outcome | None = None
        # seconds per step of the last run (Phases.spans): what the benchmarks' profile reads
        self.last_phases: dict[str, float] = {}
        self._phases = Phases()
        # the store's timeline (by default its own, rebuilt from the manifests if it was lost)
        self.journal = journal if journal is not None else store.journal()
        self.last_event: str | None = None  # parent of the next event
        self._journal_warned = False
        # saves are made durable by the background writer (store/background.py) when this
        # is True, or None and $IPY_RESUME_BACKGROUND is not 0, and the budget allows
        self.background: bool | None = None
        # (cell_id, key) -> the manifest file of the complete checkpoint this engine committed
        # for it (durable): see _own_checkpoint
        self._committed: dict[tuple[str, str], PurePath] = {}
        # events of durable background saves left for the main thread to journal (_later)
        self._events_waiting: set[str] = set()

    def record(
        self,
        outcome: Outcome,
        cell_id: str,
        host: Host | None = None,
        parent: str | None = None,
        later: bool = False,
        stamped: Mapping[str, Any] | None = None,
    ) -> Event | None:
        """Append *outcome* to the timeline as a child of the previous event.

        A journal failure costs the timeline one row, never the user's cell.  With *later*
        (a restore) the row is written by the journal's helper thread within moments
        (``Journal.append_later``): a crash right after may lose it, and nothing else.
        """
        self.last_outcome = outcome
        event = self._event(outcome, cell_id, parent, stamped)
        return self._append(event, host, later=later)

    def _event(
        self,
        outcome: Outcome,
        cell_id: str,
        parent: str | None = None,
        stamped: Mapping[str, Any] | None = None,
    ) -> Event:
        """The event of *outcome*; *stamped*: as its checkpoint's manifest names it (see
        ``journal.stamp``), so that it is the same whoever appends it."""
        if stamped is not None:
            return dataclasses.replace(
                self._event(outcome, cell_id, stamped["parent"]),
                event_id=stamped["id"],
                started=stamped["started"],
            )
        return Event(
            cell_id=cell_id,
            session=self.session,
            outcome=outcome.status,
            checkpoint_id=outcome.checkpoint_id,
            key=outcome.key,
            parent=parent or self.last_event,
            duration=outcome.duration,
            saved=outcome.saved,
            io=outcome.io,
            bytes=outcome.bytes,
            names=list(outcome.names),
            detail=outcome.detail,
        )

    def _append(
        self, event: Event, host: Host | None, advance: bool = True, later: bool = False
    ) -> Event | None:
        append_later = getattr(self.journal, "append_later", None) if later else None
        try:
            if append_later is not None:
                append_later(event)
            else:
                self.journal.append(event)
        except (OSError, sqlite3.Error) as exc:
            self._journal_failed(host, exc)
            return None
        earlier = getattr(self.journal, "deferred_error", None)
        if earlier is not None:  # events queued with append_later could not be written
            self.journal.deferred_error = None
            self._journal_failed(host, earlier)
        if advance:  # (a background save's event was made the parent when it was made)
            self.last_event = event.event_id
        return event

    def _journal_failed(self, host: Host | None, exc: BaseException) -> None:
        if host is not None and not self._journal_warned:
            host.message(f"{PREFIX}could not update the timeline in {self.journal.path} ({exc})")
        self._journal_warned = True

    def _later(
        self,
        job: background.Job,
        outcome: Outcome,
        opts: CheckpointOptions,
        host: Host,
        short: str,
        names: list[str],
        confirmed: bool,
    ) -> None:
        """Finish a save the background writer commits: say when it is durable, record it.

        *confirmed*: the cell's status line said "saved" already (the save was durable
        before the cell returned); otherwise it said "saving", and a second line follows.

        The timeline event is made now, so the next cell's event is its child, and
        appended once the checkpoint is durable (or as "failed" when the commit fails).
        """
        self.last_outcome = outcome
        event = self._event(outcome, opts.cell_id, stamped=job.snapshot.manifest.info.get(STAMP))
        self.last_event = event.event_id
        manifest = job.snapshot.manifest
        write = _stderr_writer()
        listed = ", ".join(names) or "no names"

        told: list[bool] = []
        journaled: list[bool] = []  # (the writer thread's append)
        detached = getattr(self.journal, "append_detached", None)
        prints = getattr(host, "prints_status", True)  # (with badges, no status line)

        def notify(job: background.Job) -> None:  # on the writer thread, at once
            if job.error is None:
                # Journaled as soon as it is durable, not when the main thread is next free:
                # the kernel may be killed in the middle of the next cell, and %resume must
                # find this one.
                event.io = job.seconds
                event.bytes = job.bytes_written
                # (one left to the main thread keeps the ones after it there, in order)
                if not self._events_waiting and detached is not None and detached(event):
                    journaled.append(True)
            if not journaled:
                self._events_waiting.add(event.event_id)
            if job.error is not None:
                write(PREFIX + save_failure(opts, job.error, listed))
                told.append(True)
            elif opts.quiet or not prints or outcome.status != "executed":
                pass
            elif not confirmed:  # the second line, after "saving checkpoint"
                write(
                    f"{PREFIX}saved checkpoint {short} of {opts.shown} "
                    f"({format_size(job.bytes_written)} written in {seconds(job.seconds)})"
                )

        def done(job: background.Job) -> None:  # on the main thread, when next drained
            event.io = job.seconds
            if job.error is None:
                event.bytes = outcome.bytes = job.bytes_written
                outcome.io = job.seconds
                if outcome.status == "executed":
                    self._note_committed(opts.cell_id, manifest)
            else:
                shared_objects(self.store.root).forget(outcome.checkpoint_id or "")
                event.outcome = outcome.status = "failed"
                event.checkpoint_id = outcome.checkpoint_id = None
                event.detail = outcome.detail = str(job.error)
                event.bytes = outcome.bytes = 0
                if not told:  # the line above could not be shown: say it here
                    host.message(
                        f"{PREFIX}the checkpoint of {opts.shown} ({short}) was not saved: "
                        f"{job.error} It will execute again next time."
                    )
            if not journaled:
                self._append(event, host, advance=False)
                self._events_waiting.discard(event.event_id)

        background.attach(job, done, notify)

    def _note_committed(self, cell_id: str, m: Manifest) -> None:
        """Remember where *m*, a complete checkpoint this engine committed (durable now), is."""
        if m.path is None or not self.store.backend.local_files:
            return  # (a bucket lists every time: see Reader._key_files)
        if len(self._committed) >= _COMMITTED_MAX:
            self._committed.clear()
        self._committed[(cell_id, m.key)] = m.path

    def _own_checkpoint(
        self, cell_id: str, key: str, accept: Callable[[Manifest], bool]
    ) -> Manifest | None:
        """The checkpoint of (cell_id, key) this engine committed itself, read from the
        manifest file it published: a hit in the process that saved it lists no folder.

        The file is read and verified as any manifest lookup reads it (the store's cache
        of verified manifests, see docs/guarantees.md); None, and :meth:`Store.find`
        decides, when it is gone, damaged or no longer that checkpoint, while a save of
        this key is pending (a newer one may be on its way), for a key whose last load
        failed, and when the files the cell read have changed.
        """
        path = self._committed.get((cell_id, key))
        if path is None:
            return None
        if self.store.healing(cell_id, key) or any(
            job.key == (cell_id, key) for job in self.store.writer.pending()
        ):
            return None  # (a save of this key on its way: find waits for it)
        try:
            m = self.store.read_manifest(path, quick=True)
        except (OSError, StoreError):
            m = None
        if m is None or m.cell_id != cell_id or m.key != key or not m.complete:
            del self._committed[(cell_id, key)]
            return None
        return m if accept(m) else None

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every save of this engine's store is durable (``%checkpoint wait``).

        >>> engine.flush()  # doctest: +SKIP
        True
        """
        return self.store.writer.barrier(timeout=timeout)

    def restore(
        self,
        namespace: MutableMapping[str, Any],
        target: str,
        how: str = "restore",
        store: Store | None = None,
    ) -> dict[str, Any]:
        """Rebuild the state as of *target* (see :func:`restoring.restore`) on this timeline.

        The restore is a ``resumed`` event whose parent is the target, so later cells
        continue that branch.  *store* is this engine's, opened again by the caller (by
        default the engine's own).  Returns the report (``restored``, ``removed``,
        ``message``).

        >>> engine.restore(get_ipython().user_ns, "train")["restored"]  # doctest: +SKIP
        ['model', 'history']
        """
        store = store or self.store
        done = restoring.restore(namespace, store, target)
        report = done.report(store)
        plan = done.plan
        names = sorted(done.values)
        outcome = Outcome("resumed", plan.target.id, names, detail=f"{how} to {plan.target.id}")
        self.record(
            outcome, plan.target.cell_id, parent=plan.event.event_id if plan.event else None
        )
        return report

    # ---- planning -------------------------------------------------------------------------

    def plan(
        self,
        namespace: MutableMapping[str, Any],
        source: str,
        opts: CheckpointOptions,
        known: Mapping[str, bytes] | None = None,
    ) -> Plan:
        """Analyse the cell and digest every part of its key.

        *known* gives digests of inputs that are not in *namespace* yet (a Run All plan:
        the outputs an earlier cell would restore, as its checkpoint recorded them).

        >>> plan = engine.plan({"x": 1}, "y = x + 1", CheckpointOptions("c"))  # doctest: +SKIP
        """
        try:
            analysis = analyze(source)
        except AnalysisError:
            # Executing raises the SyntaxError with IPython's usual display.
            return Plan(None, None, {}, {}, None)
        seed = None if opts.no_seed else opts.seed
        if seed is None and not opts.no_seed:
            seed = rng.derive_seed(self.store.seed_base, opts.cell_id)
        made = cell_key(
            analysis,
            namespace,
            seed=seed,
            salt=opts.salt,
            inputs=opts.inputs,
            ignore=opts.ignore,
            deps=opts.deps,
            known=known,
        )
        return Plan(analysis, made.key, made.parts, made.digests, seed, problem=made.problem)

    # ---- the two paths --------------------------------------------------------------------

    def run(
        self,
        namespace: MutableMapping[str, Any],
        source: str,
        opts: CheckpointOptions,
        host: Host,
    ) -> Any:
        """Restore the cell from a checkpoint, or execute it and commit one.

        Returns the cell's result value (None when it has none).
        """
        __tracebackhide__ = True
        outer, self._phases = self._phases, Phases()  # (a cell may run inside a cell)
        phases = self._phases
        try:
            return self._run(namespace, source, opts, host)
        finally:
            phases.mark("report")
            self.last_phases = phases.spans
            self._phases = outer

    def _run(
        self,
        namespace: MutableMapping[str, Any],
        source: str,
        opts: CheckpointOptions,
        host: Host,
    ) -> Any:
        __tracebackhide__ = True
        phases = self._phases
        self.store.writer.drain()  # timeline events of saves finished meanwhile
        phases.mark("drain")
        try:
            with _collection_paused():
                plan = self.plan(namespace, source, opts)
        except (StoreError, OSError) as exc:
            problem = f"the store {self.store.location} cannot be used ({exc})"
            plan = Plan(None, None, {}, {}, opts.seed, problem=problem)
        phases.mark("plan")
        if plan.key is None:
            if plan.problem:
                host.message(f"{PREFIX}{opts.shown} will always execute: {plan.problem}")
            self._seed(plan)
            started = time.perf_counter()
            result = host.run()
            if plan.analysis is not None or plan.problem:
                duration = time.perf_counter() - started
                outcome = Outcome(
                    "uncached",
                    duration=duration,
                    detail=plan.problem or "",
                    reason=plan.problem or "",
                )
                self.record(outcome, opts.cell_id, host)
            return result.value if result.has_value else None

        if not opts.force:
            restored = self._try_restore(namespace, plan, opts, host)
            if restored is not None:
                phases.mark("restore")
                return restored[0]
            phases.mark("lookup")
            reason = ""
            if plan.stale:
                reason = f"{opts.shown} executes: {plan.stale}"
                if not opts.quiet:
                    show_status(host, PREFIX + reason)
            elif plan.unusable:  # (its message was shown: the reason, for the badge and show)
                reason = f"{opts.shown} executes: {plan.unusable}"
            elif opts.explain or getattr(host, "wants_reason", False):
                reason = self.explain(opts.cell_id, plan)
                if opts.explain:
                    show_status(host, PREFIX + reason)
            return self._execute_and_save(namespace, plan, opts, host, reason)
        return self._execute_and_save(namespace, plan, opts, host, "--force was given")

    def _try_restore(
        self,
        namespace: MutableMapping[str, Any],
        plan: Plan,
        opts: CheckpointOptions,
        host: Host,
    ) -> tuple[Any] | None:
        assert plan.key is not None
        started = time.perf_counter()
        manifest = None
        fresh = FreshCheckpoint()
        try:
            manifest = self._own_checkpoint(opts.cell_id, plan.key, fresh)
            if manifest is None:
                manifest = self.store.find(
                    opts.cell_id,
                    plan.key,
                    accept=fresh,
                    waiting=lambda text: host.message(f"{PREFIX}{opts.shown}: {text}"),
                )
            self._say_abandoned(host)
            if manifest is None:
                plan.stale = fresh.first
                return None
            # Unpickling a checkpoint allocates its whole object graph at once: with the
            # collector on, that set off a full collection of the kernel's heap every few
            # loads (six of a notebook's 24 hits), each walking objects none of this frees.
            with _collection_paused():
                loaded = restoring.load(self.store, manifest)
        except StoreError as exc:
            self._committed.pop((opts.cell_id, plan.key), None)
            if manifest is not None:
                shared_objects(self.store.location).forget(manifest.id)
            text = str(exc)
            host.message(f"{PREFIX}{text}")
            if "execute again" not in text:  # (most store errors say so themselves)
                host.message(f"{PREFIX}{opts.shown} will be executed instead.")
            plan.unusable = "its checkpoint could not be restored (see the message above)"
            if manifest is not None:
                plan.unusable = (
                    f"its checkpoint {self.store.short_id(manifest.id)} could not be restored "
                    "(see the message above)"
                )
            return None
        except Exception as exc:  # a loader bug must cost a re-run, never the user's cell
            host.message(
                f"{PREFIX}could not restore {opts.shown} ({type(exc).__name__}: {exc}); "
                "executing it instead."
            )
            return None

        # Everything is loaded and verified before the namespace is touched, so a failure
        # above never leaves a half-restored kernel.
        try:
            with _collection_paused():  # (its fingerprints and walks of the values, as above)
                problems = restoring.apply(
                    namespace, self.store, loaded, manifest.info.get("deleted", []), files=True
                )
        except OSError as exc:
            host.message(
                f"{PREFIX}could not restore file '{exc.filename}' of {opts.shown} ({exc}); "
                "executing the cell instead."
            )
            return None
        values, extras = loaded.values, loaded.extras
        for problem in problems:
            host.message(f"{PREFIX}{opts.shown}: {problem}")
        for paths, done, undone, hint in (
            (
                file_deps.missing_outputs(manifest.info.get("files_written", [])),
                "wrote",
                "write {} back",
                "name files with --files to store them, or --force to execute the cell",
            ),
            (
                file_deps.present_again(manifest.info.get("files_removed", [])),
                "removed",
                "remove {} again",
                "--force executes the cell",
            ),
        ):
            if paths:
                listed = ", ".join(f"'{p}'" for p in paths[:5]) + (" ..." if len(paths) > 5 else "")
                pronoun = "it" if len(paths) == 1 else "them"
                host.message(
                    f"{PREFIX}{opts.shown} {done} {listed} when it executed; a restore does not "
                    f"{undone.format(pronoun)} ({hint})"
                )
        record = extras.get("outputs")
        if isinstance(record, OutputRecord):
            host.replay(record)
        elapsed = time.perf_counter() - started
        duration = float(manifest.info.get("duration", 0.0))
        if not opts.quiet:
            show_status(
                host,
                f"{PREFIX}restored {opts.shown} from checkpoint "
                f"{self.store.short_id(manifest.id)} "
                f"in {seconds(elapsed)} (the run took {seconds(duration)}, "
                f"saved {seconds(max(duration - elapsed, 0.0))})"
                + (
                    "; it was not executed (auto checkpoints)"
                    if opts.min_seconds is not None
                    else ""
                ),
            )
        outcome = Outcome(
            "restored",
            manifest.id,
            sorted(values),
            key=plan.key,
            duration=elapsed,
            saved=max(duration - elapsed, 0.0),
            io=elapsed,
            bytes=0,
            detail=loaded.how_text(),
        )
        self.record(outcome, opts.cell_id, host, later=True)
        has_result = bool(manifest.info.get("has_result"))
        value = extras.get("result") if has_result else None
        shown = extras.get("shown")
        if has_result and isinstance(shown, tuple) and _show(host, value, shown):
            return (None,)  # shown already: the front end must not show it again
        return (value,)

    def _execute_and_save(
        self,
        namespace: MutableMapping[str, Any],
        plan: Plan,
        opts: CheckpointOptions,
        host: Host,
        reason: str = "",
    ) -> Any:
        __tracebackhide__ = True
        assert plan.key is not None and plan.analysis is not None
        ran = self._execute(namespace, plan, opts, host)
        result, duration = ran.result, ran.duration
        if opts.min_seconds is not None and duration < opts.min_seconds:
            # too quick to be worth a checkpoint: nothing stored, nothing on the timeline
            self.last_outcome = Outcome("fast", key=plan.key, duration=duration)
            return _value(result)
        phases = self._phases
        phases.mark("capture")  # (what _execute read after the cell: RNG, files, imports)
        staged = self._stages(opts, plan)
        if not staged:
            # The blobs of large outputs are hashed on a helper thread while their
            # fingerprints are taken here: two passes over the same bytes, one core each.
            # (A staged save leaves both to its writer: see store.late.)
            prehash.start(namespace[n] for n in plan.analysis.outputs if n in namespace)
        try:
            return self._keep(namespace, plan, opts, host, ran, reason, staged)
        finally:
            prehash.clear()

    def _stages(self, opts: CheckpointOptions, plan: Plan) -> bool:
        """Whether this save goes to the background writer (see :meth:`_save`)."""
        assert plan.key is not None
        use = background.enabled() if self.background is None else self.background
        return bool(
            use and self.store.stages_saves and not self.store.healing(opts.cell_id, plan.key)
        )

    def _keep(
        self,
        namespace: MutableMapping[str, Any],
        plan: Plan,
        opts: CheckpointOptions,
        host: Host,
        ran: Ran,
        reason: str,
        staged: bool = False,
    ) -> Any:
        """Store what a run produced and say so; returns the cell's value."""
        __tracebackhide__ = True
        result, duration = ran.result, ran.duration
        phases = self._phases
        with _collection_paused():
            content = content_of(
                namespace,
                plan,
                opts,
                ran,
                session=self.session,
                last_event=self.last_event,
                staged=staged,
            )
        phases.mark("outputs")
        values = content.values
        save_started = time.perf_counter()
        shared = shared_objects(self.store.location)
        shared.forget_checks()
        # (only the save runs from here: what the values hold now is what was digested)
        shared.current(
            ((namespace[n], d) for n, d in content.current.items() if n in namespace),
            content.fingerprinter,
        )
        phases.mark("sharing")
        try:
            with _collection_paused():
                saved, job, to_write = self._save(plan, opts, content, shared, staged)
        except Exception as exc:  # SaveError is a StoreError; anything else is a bug of ours
            shared.forget_checks()  # (what it read of the objects is not kept alive)
            listed = ", ".join(sorted(values)) or "no names"
            host.message(PREFIX + save_failure(opts, exc, listed))
            outcome = Outcome(
                "failed",
                None,
                sorted(values),
                key=plan.key,
                duration=duration,
                detail=str(exc),
                reason=reason,
            )
            self.record(outcome, opts.cell_id, host, stamped=content.info.get(STAMP))
            return _value(result)
        names = content.names
        if saved.added:  # names of earlier cells that hold objects this cell changed
            names = sorted({*names, *saved.added})
            values.update((name, namespace[name]) for name in saved.added if name in namespace)
        shared.note(saved.manifest, values, namespace, saved.members)
        failed = {**saved.failed, **content.missing_files}
        if failed:
            what = "; ".join(
                f"{stored_as(name)} ({reason})" for name, reason in sorted(failed.items())
            )
            host.message(
                f"{PREFIX}checkpoint {opts.shown} is incomplete: could not store {what}. "
                "The values are still in the kernel; this cell will execute again next time."
            )
            status = "incomplete"
        else:
            status = "executed"
        short = self.store.short_id(saved.manifest.id)
        # A small background save is confirmed in its own cell's output: in a terminal it is
        # waited for (briefly); a large one, a quiet cell's (a headless run) or a kernel's
        # is not, and the writer's own line says when it is durable.
        confirmed = job is None or (
            status == "executed"
            and not opts.quiet
            and getattr(host, "prints_status", True)  # (a badge is updated, not a line)
            and getattr(host, "waits_for_save", True)  # (a kernel's writer says "saved")
            and to_write < SAVING_LINE_MIN
            and job.event.wait(STATUS_WAIT)
        )
        if status == "executed" and not opts.quiet:
            self._say_executed(
                host, opts, duration, short, saved, job, confirmed, to_write, save_started
            )
        outcome = Outcome(
            status,
            saved.manifest.id,
            sorted(names),
            failed,
            key=plan.key,
            duration=duration,
            io=time.perf_counter() - save_started,
            bytes=saved.bytes_written,
            detail="; ".join(f"{n}: {r}" for n, r in sorted(failed.items())),
            reason=reason,
        )
        if job is None:
            self.record(outcome, opts.cell_id, host, stamped=content.info.get(STAMP))
            if status == "executed":
                self._note_committed(opts.cell_id, saved.manifest)
        else:
            self._later(job, outcome, opts, host, short, sorted(values), confirmed)
        # Shown from the recorded data, so a later restore shows exactly this (a repr may
        # count, like scikit-learn's HTML ids, or hold a memory address).
        if (
            result.has_value
            and result.shown is not None
            and _show(host, result.value, result.shown)
        ):
            return None
        return _value(result)

    def _execute(
        self,
        namespace: MutableMapping[str, Any],
        plan: Plan,
        opts: CheckpointOptions,
        host: Host,
    ) -> Ran:
        """Run the cell, recording what it reads and writes; the state before it, for the
        comparison after."""
        __tracebackhide__ = True
        assert plan.key is not None
        assert plan.analysis is not None
        # (only whether an output was bound before matters: it is deleted if gone after;
        # a set of the whole namespace, with IPython's entry per cell run, cost more)
        before = {name for name in plan.analysis.outputs if name in namespace}
        starred = None
        if plan.analysis.star_import or plan.analysis.rebinds:
            starred = dict(namespace)  # (holding the values: no address is reused meanwhile)
        settings_before = settings.snapshot()
        reached = reached_state(namespace, plan)
        self._seed(plan)
        started = time.perf_counter()
        global _active
        reads = (
            contextlib.nullcontext()
            if opts.no_file_deps
            else file_deps.recording(ignore=[str(self.store.location)])
        )
        outer = _active
        try:
            with reads as recorder:
                _active = ActiveCell(self, opts.cell_id, plan.key, namespace, host, reads=recorder)
                self._phases.mark("prepare")
                result = host.run()  # the cell's own exception propagates: nothing is stored
                self._phases.mark("cell")
        finally:
            _active = outer
            rng.stop_seeding_on_import()
        duration = time.perf_counter() - started
        note_imports(plan.analysis)
        return Ran(
            result=result,
            duration=duration,
            before=before,
            settings_before=settings_before,
            reached=reached,
            rng_state=rng.snapshot(plan.seed),
            files_read=recorder.identities() if recorder is not None else {},
            files_written=[
                path for path in (recorder.outputs() if recorder else []) if path not in opts.files
            ],
            files_removed=recorder.gone() if recorder is not None else [],
            starred=starred,
        )

    def _save(
        self,
        plan: Plan,
        opts: CheckpointOptions,
        content: Content,
        shared: SharedObjects,
        staged: bool,
    ) -> tuple[SaveResult, background.Job | None, int]:
        """Commit *content*: staged for the background writer where it may be, else now.

        Returns what was saved, the writer's job (None: durable already) and the bytes
        the writer still has to write.
        """
        assert plan.key is not None
        what: dict[str, Any] = {
            "extras": content.extras,
            "info": content.info,
            "complete": not content.missing_files,
            "linker": shared,
            "late_digests": content.late,
        }
        if not staged:
            saved = self.store.save(opts.cell_id, plan.key, content.values, **what)
            self._phases.mark("save")
            return saved, None, 0
        snap = self.store.snapshot(opts.cell_id, plan.key, content.values, **what)
        self._phases.mark("snapshot")
        to_write = snap.size
        job = self.store.writer.submit(snap)
        self._phases.mark("stage")
        if job is None:  # over the snapshot budget: written now, after earlier ones
            self.store.writer.barrier()
            return snap.commit(), None, to_write
        return snap.result(), job, to_write

    def _say_abandoned(self, host: Host) -> None:
        """Say, once each, the saves of dead kernels the store could not finish."""
        while self.store.abandoned:
            checkpoint_id, why = self.store.abandoned.popitem()
            host.message(
                f"{PREFIX}checkpoint {checkpoint_id[:8]}, staged by a kernel that died before "
                f"it was durable, could not be finished: {why}; its cell executes again when it is next run."
            )

    def _say_executed(
        self,
        host: Host,
        opts: CheckpointOptions,
        duration: float,
        short: str,
        saved: SaveResult,
        job: background.Job | None,
        confirmed: bool,
        to_write: int,
        save_started: float,
    ) -> None:
        """The status line of an executed cell: saved (durable), or saving (not yet)."""
        ran = f"{PREFIX}executed {opts.shown} in {seconds(duration)}"
        if job is None:
            written = saved.bytes_written
        elif not confirmed:
            show_status(
                host, f"{ran}; saving checkpoint {short} ({format_size(to_write)} to write)"
            )
            return
        elif job.error is None:  # (a failure is said by the writer's callback)
            written = job.bytes_written
        else:
            return
        show_status(
            host,
            f"{ran}; saved checkpoint {short} ({format_size(written)} written in "
            f"{seconds(time.perf_counter() - save_started)})",
        )

    # ---- helpers --------------------------------------------------------------------------

    def _seed(self, plan: Plan) -> None:
        if plan.seed is not None:
            rng.seed_all(plan.seed)

    def explain(self, cell_id: str, plan: Plan) -> str:
        """Say which part of the key differs from the nearest earlier checkpoint of *cell_id*.

        >>> engine.explain("train", plan)  # doctest: +SKIP
        "'train' executes: input 'lr' changed"
        """
        try:
            history = self.store.history(cell_id)
        except StoreError as exc:
            return f"'{cell_id}' executes: its history cannot be read ({exc})"
        if not history:
            return f"'{cell_id}' executes: it has no earlier checkpoint in {self.store.location}"
        best: list[str] | None = None
        for manifest in history:
            old = manifest.info.get("key_parts", {})
            diff = describe_differences(old, plan.parts)
            if best is None or len(diff) < len(best):
                best = diff
        if not best:
            return f"'{cell_id}' executes: its key matches an earlier checkpoint that is incomplete"
        return f"'{cell_id}' executes: " + "; ".join(best)


@dataclass
class FreshCheckpoint(file_deps.FreshFiles):
    """The engine's ``Store.find`` acceptor: the files the checkpoint's cell read are
    unchanged (:class:`file_deps.FreshFiles`), and so are the settings what it showed
    depends on (numpy's print options, pandas' display options, matplotlib's rcParams;
    see :func:`settings.shown_under`); ``reasons`` says why others were turned down.

    >>> FreshCheckpoint()(type("M", (), {"info": {}, "id": "x"})())
    True
    """

    def __call__(self, manifest: Any) -> bool:
        if not super().__call__(manifest):
            return False
        changed = settings.changed_since(manifest.info.get("shown_under") or {})
        if changed:
            self.reasons.append(
                f"{' and '.join(changed)} changed since checkpoint {manifest.id}, and what "
                "the cell showed depends on them"
            )
        return not changed


def _stderr_writer() -> Callable[[str], None]:
    """A function printing a line where this cell's stderr goes, callable from any thread.

    The context is captured too: in a Jupyter kernel it carries the cell's message
    header, so a line printed later by the writer thread lands under this cell.
    """
    stream = sys.stderr
    context = contextvars.copy_context()

    def write(text: str) -> None:
        context.copy().run(print, text, file=stream, flush=True)

    return write


def _show(host: Host, value: Any, shown: tuple[dict[str, Any], dict[str, Any]]) -> bool:
    """Show a result from its recorded data where the host can; False when it cannot."""
    show = getattr(host, "show_result", None)
    if show is None:
        return False
    show(value, shown)
    return True


class _collection_paused:
    """No cyclic garbage collection while a key is digested, a save serialised or a load runs.

    Both allocate a tuple or a set entry per object they visit, and every few hundred
    allocations the collector walks the objects of the whole kernel: a notebook's large
    heap made those walks a third of a save's time (a pickle's memo copy, the walk of what
    the values hold).  Nothing is freed later than the end of the save; the collector
    stays off when it was off.  (A class, not a generator: a hit enters it three times.)

    >>> with _collection_paused():
    ...     gc.isenabled()
    False
    """

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        if self._was:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def _value(result: RunResult) -> Any:
    return result.value if result.has_value else None
