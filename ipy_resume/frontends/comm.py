"""Kernel side of the timeline panel's channel: a comm target named ``ipy_resume``.

``%load_ext ipy_resume`` registers the target. A frontend opens a comm on it;
the kernel answers the open with ``{"event": "hello"}`` (a kernel without the
extension closes the comm instead, which is how the panel tells "not loaded"
from "busy"). Requests and answers are those of :mod:`ipy_resume.frontends.protocol`, plus
``{"id": 10, "request": "badges", "on": true}``, which concerns the comm itself.
After each cell that may have touched the timeline, :func:`notify_changed` pushes
the new events to every open comm and refreshes live timeline widgets.

A frontend that draws cell badges says so with ``badges``; from then on (while
that comm stays open) the routine status lines of ``%%checkpoint`` cells —
restored, executed — are not written to stderr, and each run is pushed as
``{"event": "outcome", "cell": <the notebook cell id>, "outcome": ...}`` instead.
The notebook cell id is the ``cellId`` JupyterLab puts in the metadata of every
``execute_request``. The panel extension also adds ``"ipy_resume_badges": true``
to that metadata, so an execution queued before the comm opens (Run All right
after ``%load_ext``) writes no status line either; its outcome is kept and sent
in the answer to ``badges``. Warnings and errors still go to the output area.

This module is only a transport: the requests are answered by :mod:`ipy_resume.frontends.protocol`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.core import Engine
from ..store.location import Location
from ..version import __version__
from . import protocol
from .protocol import REQUESTS, RequestError, json_safe

__all__ = [
    "BADGES_FLAG",
    "REQUESTS",
    "TARGET",
    "RequestError",
    "add_widget",
    "context",
    "current_cell_id",
    "current_shell",
    "engine_of",
    "handle_request",
    "notify_changed",
    "outcome_message",
    "push_outcome",
    "register",
    "shows_badges",
]

TARGET = "ipy_resume"
# A push carries at most this many events; a frontend that falls further behind
# asks for a fresh snapshot (it does so after each execution anyway).
_PUSH_LIMIT = 2000

log = logging.getLogger(__name__)


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


def current_shell() -> Any:
    """The running IPython shell, or None outside one.

    >>> current_shell() is None
    True
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None
    return get_ipython()


def engine_of(shell: Any, root: Location) -> Engine | None:
    """The engine *shell*'s ``%checkpoint`` magics run on the store at *root*, if any.

    >>> engine_of(get_ipython(), default_root())  # doctest: +SKIP
    <ipy_resume.engine.core.Engine object at ...>
    """
    registry = getattr(getattr(shell, "magics_manager", None), "registry", {})
    magics = registry.get("CheckpointMagics") if isinstance(registry, dict) else None
    engines = getattr(magics, "engines", None)
    return engines.find(root) if engines is not None else None


def context(
    namespace: MutableMapping[str, Any], root: Path | str | None = None, shell: Any = None
) -> protocol.Context:
    """What a request from a front end of *shell*'s kernel may use (see :mod:`.protocol`).

    *shell* defaults to the running one: a restore joins the timeline of its engine.
    """
    kernel_shell = shell if shell is not None else current_shell()
    return protocol.Context(root, namespace, shell, lambda where: engine_of(kernel_shell, where))


def handle_request(
    data: Any,
    namespace: MutableMapping[str, Any],
    root: Path | str | None = None,
    shell: Any = None,
) -> dict[str, Any]:
    """Answer one request (see :func:`protocol.handle`); never raises.

    ``plan`` needs *shell* (the magics parse the cells); ``badges`` is answered by
    the comm itself, which is what it concerns.

    >>> handle_request({"id": 1, "request": "nope"}, {})["error"]
    "unknown request 'nope'; expected one of snapshot, details, restore, badges, plan"
    """
    return protocol.handle(data, context(namespace, root, shell))


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
        comm.send({"event": "hello", "target": TARGET, "version": __version__})

    manager.register_target(TARGET, on_open)
    return True


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
        shell = current_shell()
    state = _channels(shell)
    if state is None or (not state.comms and not len(state.widgets)):
        return 0
    sent = 0
    try:
        if state.comms:
            request = {"request": "snapshot", "after": state.last_seq, "limit": _PUSH_LIMIT}
            snap = protocol.answer(request, context({}, root, shell))
            _remember_seq(state, snap.get("last_seq"))
            message = json_safe(
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
    return json_safe(
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
