"""Kernel side of the timeline panel's channel: a comm target named ``ipy_resume``.

``%load_ext ipy_resume`` registers the target. A frontend opens a comm on it;
the kernel answers the open with ``{"event": "hello"}`` (a kernel without the
extension closes the comm instead, which is how the panel tells "not loaded"
from "busy"). Requests are JSON objects::

    {"id": 7, "request": "snapshot", "after": 41, "limit": null}
    {"id": 8, "request": "details", "target": "train"}
    {"id": 9, "request": "restore", "target": "0190ab3f2a9c"}
    {"id": 10, "request": "badges", "on": true}
    {"id": 11, "request": "plan", "cells": [{"source": "%%checkpoint a\\n...", "id": "…"}]}

and every answer repeats the ``id`` with either ``"data"`` or a one-line
``"error"``. After each ``%%checkpoint`` run the engine calls
:func:`notify_changed`, which pushes the new events to every open comm and
refreshes live timeline widgets — while the cell that ran it is still busy,
because comm messages from the kernel go out on IOPub at once.

A frontend that draws cell badges says so with ``badges``; from then on (while
that comm stays open) the routine status lines of ``%%checkpoint`` cells —
restored, executed — are not written to stderr, and each run is pushed as
``{"event": "outcome", "cell": <the notebook cell id>, "outcome": ...}`` instead.
The notebook cell id is the ``cellId`` JupyterLab puts in the metadata of every
``execute_request``. The panel extension also adds ``"ipy_resume_badges": true``
to that metadata, so an execution queued before the comm opens (Run All right
after ``%load_ext``) writes no status line either; its outcome is kept and sent
in the answer to ``badges``. Warnings and errors still go to the output area. ``plan``
answers what Run All of the given code cells would restore and execute.

This module is a thin adapter: the queries themselves live in ``timeline.py``.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGET = "ipy_resume"
REQUESTS = ("snapshot", "details", "restore", "badges", "plan")
# A push carries at most this many events; a frontend that falls further behind
# asks for a fresh snapshot (it does so after each execution anyway).
_PUSH_LIMIT = 2000

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """A request the kernel cannot serve as asked (bad name, missing field)."""


@dataclass
class _Channels:
    """The open comms of one shell, and what they have already been sent."""

    comms: list[Any] = field(default_factory=list)
    last_seq: int | None = None
    widgets: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    hooked: bool = False
    badges: list[Any] = field(default_factory=list)  # open comms whose frontend shows badges
    # the latest outcome of each notebook cell run by a badge frontend, for a comm that
    # announces badges later (Run All after a restart queues cells before the comm opens)
    recent: dict[str, dict[str, Any]] = field(default_factory=dict)


# Cells that can add timeline events: checkpoint runs, line commands, %resume.
_TIMELINE_MAGICS = ("%%checkpoint", "%checkpoint", "%resume")


def _hook(shell: Any, state: _Channels) -> None:
    """After any cell that may have touched the timeline, tell the attached frontends.

    The engine may call :func:`notify_changed` itself; a second call finds
    nothing new to send, so the two never conflict.
    """
    events = getattr(shell, "events", None)
    if state.hooked or events is None:
        return

    def after_cell(result: Any) -> None:
        source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
        if any(magic in source for magic in _TIMELINE_MAGICS):
            notify_changed(shell)

    events.register("post_run_cell", after_cell)
    state.hooked = True


def _channels(shell: Any, create: bool = False) -> _Channels | None:
    state = getattr(shell, "_ipy_resume_channels", None)
    if state is None and create:
        state = _Channels()
        shell._ipy_resume_channels = state
    return state


def _api() -> Any:
    # ``ipy_resume.timeline`` is also the public widget factory, so the query
    # module is imported by its full name rather than through the package.
    import importlib

    return importlib.import_module("ipy_resume.timeline")


def one_line(exc: BaseException) -> str:
    """The message of *exc* on one line, the way the panel shows errors.

    >>> one_line(ValueError("bad\\nthing"))
    'bad thing'
    """
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _json_safe(value: Any) -> Any:
    # Manifests hold tuples, paths and numpy scalars; JSON must not choke on them.
    return json.loads(json.dumps(value, default=str))


def _optional_int(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"'{name}' must be an integer or null, not {value!r}")
    return value


def _target(data: dict[str, Any]) -> str:
    target = data.get("target")
    if not isinstance(target, str) or not target.strip():
        raise RequestError("this request needs a 'target': a checkpoint id, a prefix or a CELL_ID")
    return target.strip()


def handle_request(
    data: Any,
    namespace: MutableMapping[str, Any],
    root: Path | str | None = None,
    shell: Any = None,
) -> dict[str, Any]:
    """Answer one request; never raises (errors come back as ``{"error": ...}``).

    ``plan`` needs *shell* (the magics parse the cells); ``badges`` is answered by
    the comm itself, which is what it concerns.

    >>> handle_request({"id": 1, "request": "nope"}, {})["error"]
    "unknown request 'nope'; expected one of snapshot, details, restore, badges, plan"
    """
    if not isinstance(data, dict):
        return {"id": None, "error": "a request must be a JSON object"}
    request_id = data.get("id")
    request = data.get("request")
    reply: dict[str, Any] = {"id": request_id, "request": request}
    try:
        api = _api()
        store = root if root is not None else api.default_root()
        if request == "snapshot":
            result = api.snapshot(
                store, after=_optional_int(data, "after"), limit=_optional_int(data, "limit")
            )
        elif request == "details":
            result = api.details(store, _target(data))
        elif request == "restore":
            result = api.restore(namespace, store, _target(data))
        elif request == "plan":
            result = plan_request(shell, data)
        else:
            raise RequestError(
                f"unknown request {request!r}; expected one of {', '.join(REQUESTS)}"
            )
        reply["data"] = _json_safe(result)
    except Exception as exc:  # the channel must survive any failure and say why
        reply["error"] = one_line(exc)
    return reply


def register(shell: Any) -> bool:
    """Register the ``ipy_resume`` comm target in *shell*'s kernel (idempotent).

    Returns False outside a kernel (a terminal IPython has no frontend to talk to).

    >>> register(get_ipython())  # doctest: +SKIP
    True
    """
    kernel = getattr(shell, "kernel", None)
    manager = getattr(kernel, "comm_manager", None)
    if manager is None:
        return False
    state = _channels(shell, create=True)
    assert state is not None
    _hook(shell, state)

    def on_open(comm: Any, open_msg: dict[str, Any]) -> None:
        state.comms.append(comm)

        def on_msg(msg: dict[str, Any]) -> None:
            data = msg.get("content", {}).get("data", {})
            if isinstance(data, dict) and data.get("request") == "badges":
                comm.send(_badges(state, comm, data))
                return
            reply = handle_request(data, shell.user_ns, shell=shell)
            if reply.get("request") == "snapshot" and "data" in reply:
                _remember_seq(state, reply["data"].get("last_seq"))
            comm.send(reply)
            if reply.get("request") == "restore" and "data" in reply:
                _refresh_widgets(state)

        def on_close(msg: dict[str, Any]) -> None:
            if comm in state.comms:
                state.comms.remove(comm)
            if comm in state.badges:
                state.badges.remove(comm)

        comm.on_msg(on_msg)
        comm.on_close(on_close)
        comm.send({"event": "hello", "target": TARGET, "version": _version()})

    manager.register_target(TARGET, on_open)
    return True


def _version() -> str:
    from . import __version__

    return __version__


def _remember_seq(state: _Channels, seq: Any) -> None:
    if isinstance(seq, int) and (state.last_seq is None or seq > state.last_seq):
        state.last_seq = seq


def add_widget(shell: Any, widget: Any) -> None:
    """Keep *widget* (anything with ``refresh()``) updated by :func:`notify_changed`.

    >>> add_widget(get_ipython(), timeline_widget())  # doctest: +SKIP
    """
    state = _channels(shell, create=True)
    assert state is not None
    state.widgets.add(widget)
    _hook(shell, state)


def _refresh_widgets(state: _Channels) -> None:
    for widget in list(state.widgets):
        try:
            widget.refresh()
        except Exception:  # a closed widget must not break the cell that ran
            log.debug("ipy_resume: could not refresh a timeline widget", exc_info=True)


def notify_changed(shell: Any = None, root: Path | str | None = None) -> int:
    """Push new timeline events to attached frontends; a no-op when none is attached.

    The engine calls it after each ``%%checkpoint`` run. It never raises: a
    panel that cannot be told must not fail the user's cell. Returns how many
    comms were sent a message.

    >>> notify_changed(get_ipython())  # doctest: +SKIP
    1
    """
    if shell is None:
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:
            return 0
    state = _channels(shell)
    if state is None or (not state.comms and not len(state.widgets)):
        return 0
    sent = 0
    try:
        if state.comms:
            api = _api()
            store = root if root is not None else api.default_root()
            snap = api.snapshot(store, after=state.last_seq, limit=_PUSH_LIMIT)
            _remember_seq(state, snap.get("last_seq"))
            message = _json_safe(
                {
                    "event": "changed",
                    "events": snap["events"],
                    "summary": snap["summary"],
                    "last_seq": snap["last_seq"],
                    "store": snap["store"],
                    "unavailable": snap["unavailable"],
                    "short_ids": snap["short_ids"],
                }
            )
            for comm in list(state.comms):
                sent += _send(comm, message, state.comms.remove)
        _refresh_widgets(state)
    except Exception:
        log.debug("ipy_resume: could not notify the timeline", exc_info=True)
    return sent


def _send(comm: Any, message: dict[str, Any], forget: Callable[[Any], None]) -> int:
    try:
        comm.send(message)
        return 1
    except Exception:
        # A comm whose frontend went away raises on send; drop it.
        forget(comm)
        return 0


# ---- cell badges -------------------------------------------------------------------------------


def _badges(state: _Channels, comm: Any, data: dict[str, Any]) -> dict[str, Any]:
    on = data.get("on", True)
    reply: dict[str, Any] = {"id": data.get("id"), "request": "badges"}
    if not isinstance(on, bool):
        reply["error"] = f"'on' must be true or false, not {on!r}"
        return reply
    if on and comm not in state.badges:
        state.badges.append(comm)
    elif not on and comm in state.badges:
        state.badges.remove(comm)
    reply["data"] = {"badges": on, "outcomes": list(state.recent.values()) if on else []}
    return reply


BADGES_FLAG = "ipy_resume_badges"
_RECENT_LIMIT = 1000


def _request_metadata(shell: Any) -> dict[str, Any]:
    kernel = getattr(shell, "kernel", None)
    try:
        parent = kernel.get_parent("shell") if kernel is not None else None
    except Exception:  # an older ipykernel: the shell keeps the parent
        parent = None
    if not isinstance(parent, dict):
        parent = getattr(shell, "parent_header", None)
    metadata = parent.get("metadata") if isinstance(parent, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def shows_badges(shell: Any) -> bool:
    """True while a frontend attached to *shell*'s kernel draws cell badges.

    Then the routine status lines of ``%%checkpoint`` cells are left out of the output.

    >>> shows_badges(None)
    False
    """
    state = _channels(shell) if shell is not None else None
    if state is not None and state.badges:
        return True
    return shell is not None and _request_metadata(shell).get(BADGES_FLAG) is True


def current_cell_id(shell: Any) -> str | None:
    """The notebook cell id of the running execution (``cellId`` in its request's metadata).

    JupyterLab, Notebook 7 and VS Code send it; a terminal has none.

    >>> current_cell_id(None) is None
    True
    """
    cell = _request_metadata(shell).get("cellId") if shell is not None else None
    return cell if isinstance(cell, str) and cell else None


def outcome_message(engine: Any, opts: Any, outcome: Any, cell: str | None) -> dict[str, Any]:
    """What a badge shows about one ``%%checkpoint`` run."""
    checkpoint = outcome.checkpoint_id
    short = None
    if checkpoint:
        try:
            short = engine.store.short_id(checkpoint)
        except Exception:  # a store that cannot list its ids still has the full id
            short = checkpoint[:8]
    return _json_safe(
        {
            "event": "outcome",
            "cell": cell,
            "cell_id": opts.cell_id,
            "label": opts.label,
            "outcome": outcome.status,
            "duration": outcome.duration,
            "saved": outcome.saved,
            "checkpoint_id": checkpoint,
            "short_id": short,
            "names": list(outcome.names),
            "reason": outcome.reason,
            "detail": outcome.detail,
        }
    )


def push_outcome(shell: Any, engine: Any, opts: Any, outcome: Any, cell: str | None) -> int:
    """Send one run's outcome to the frontends that draw badges; never raises."""
    state = _channels(shell)
    if state is None or not shows_badges(shell):
        return 0
    sent = 0
    try:
        message = outcome_message(engine, opts, outcome, cell)
        if cell is not None:
            state.recent.pop(cell, None)
            state.recent[cell] = message
            while len(state.recent) > _RECENT_LIMIT:
                state.recent.pop(next(iter(state.recent)))
        for comm in list(state.badges):
            sent += _send(comm, message, state.badges.remove)
    except Exception:
        log.debug("ipy_resume: could not send a cell outcome", exc_info=True)
    return sent


# ---- plan for Run All ---------------------------------------------------------------------------


def plan_request(shell: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Answer ``plan``: each code cell's verdict, in the order the cells were given.

    *data* ``cells`` lists the notebook's code cells as ``{"source": ..., "id": ...}``;
    each planned cell comes back with the ``id`` it was sent with (as ``cell``).
    """
    cells = data.get("cells")
    if not isinstance(cells, list) or not all(
        isinstance(c, dict) and isinstance(c.get("source"), str) for c in cells
    ):
        raise RequestError("a plan needs 'cells': the code cells, each as {source, id}")
    registry = getattr(getattr(shell, "magics_manager", None), "registry", {})
    magics = registry.get("CheckpointMagics")
    if magics is None:
        raise RequestError("a plan needs the kernel's %checkpoint magics (%load_ext ipy_resume)")
    engine = magics.engine()
    plan = magics.plan_cells([c["source"] for c in cells], engine)
    rows = []
    for planned in plan.cells:
        sent = cells[planned.position - 1]
        short = engine.store.short_id(planned.checkpoint_id) if planned.checkpoint_id else None
        rows.append(
            {
                "position": planned.position,
                "cell": sent.get("id"),
                "cell_id": planned.cell_id,
                "label": planned.label,
                "verdict": planned.verdict,
                "reason": planned.reason,
                "saves": planned.saves,
                "checkpoint_id": planned.checkpoint_id,
                "short_id": short,
            }
        )
    return {"cells": rows, "saved": plan.saved, "text": plan.text(engine)}
