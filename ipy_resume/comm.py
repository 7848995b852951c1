"""Kernel side of the timeline panel's channel: a comm target named ``ipy_resume``.

``%load_ext ipy_resume`` registers the target. A frontend opens a comm on it;
the kernel answers the open with ``{"event": "hello"}`` (a kernel without the
extension closes the comm instead, which is how the panel tells "not loaded"
from "busy"). Requests are JSON objects::

    {"id": 7, "request": "snapshot", "after": 41, "limit": null}
    {"id": 8, "request": "details", "target": "train"}
    {"id": 9, "request": "restore", "target": "0190ab3f2a9c"}

and every answer repeats the ``id`` with either ``"data"`` or a one-line
``"error"``. After each ``%%checkpoint`` run the engine calls
:func:`notify_changed`, which pushes the new events to every open comm and
refreshes live timeline widgets — while the cell that ran it is still busy,
because comm messages from the kernel go out on IOPub at once.

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
REQUESTS = ("snapshot", "details", "restore")
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
) -> dict[str, Any]:
    """Answer one request; never raises (errors come back as ``{"error": ...}``).

    >>> handle_request({"id": 1, "request": "nope"}, {})["error"]
    "unknown request 'nope'; expected one of snapshot, details, restore"
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
            reply = handle_request(data, shell.user_ns)
            if reply.get("request") == "snapshot" and "data" in reply:
                _remember_seq(state, reply["data"].get("last_seq"))
            comm.send(reply)
            if reply.get("request") == "restore" and "data" in reply:
                _refresh_widgets(state)

        def on_close(msg: dict[str, Any]) -> None:
            if comm in state.comms:
                state.comms.remove(comm)

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
