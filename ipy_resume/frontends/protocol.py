"""The timeline's requests, answered once for every transport.

The side panel asks through a comm (``comm.py``), the in-notebook widget through its
own channel (``widget.py``) and a panel without a kernel through the server's HTTP
handlers (``server.py``). They carry the same requests, JSON objects such as::

    {"id": 7, "request": "snapshot", "after": 41, "limit": null}
    {"id": 8, "request": "details", "target": "train"}
    {"id": 9, "request": "restore", "target": "0190ab3f2a9c"}
    {"id": 11, "request": "plan", "cells": [{"source": "%%checkpoint a\\n...", "id": "…"}]}

and each is answered here by the handler of its name in :data:`HANDLERS`. A transport
only moves requests and answers: :func:`handle` wraps an answer the comm way (the
request's ``id`` with either ``"data"`` or a one-line ``"error"``), and the server maps
the errors of :func:`answer` to HTTP statuses. ``badges`` concerns the comm itself, which
answers it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.core import Engine
from ..engine.queries import Timeline
from ..engine.restoring import restore
from ..store.fsio import one_line
from ..store.location import Location, default_root, open_store

__all__ = [
    "HANDLERS",
    "REQUESTS",
    "Context",
    "RequestError",
    "answer",
    "error_line",
    "handle",
    "json_safe",
]

REQUESTS = ("snapshot", "details", "restore", "badges", "plan")
"""Every request a front end may send (``badges`` is answered by the comm, not here)."""


class RequestError(ValueError):
    """A request the kernel cannot serve as asked (bad name, missing field)."""


@dataclass
class Context:
    """What a request may use: the store it is about, and the kernel where there is one.

    *engine* finds the engine of a store in this kernel (a restore joins its timeline);
    *shell* is the kernel's shell (``plan`` needs its ``%checkpoint`` magics).

    >>> Context(Path("/nonexistent")).timeline().exists()  # doctest: +SKIP
    False
    """

    root: Location | None = None  # None: the store the kernel uses now
    namespace: MutableMapping[str, Any] = field(default_factory=dict)
    shell: Any = None
    engine: Callable[[Location], Engine | None] = lambda _root: None

    @property
    def store_root(self) -> Location:
        """The store the request is about."""
        return self.root if self.root is not None else default_root()

    def timeline(self) -> Timeline:
        """The queries of that store: through the kernel's engine when it has one there, so
        its open store and journal are reused."""
        engine = self.engine(self.store_root)
        return Timeline.open(self.store_root, engine.store if engine is not None else None)


Handler = Callable[[Context, dict[str, Any]], Any]


def error_line(exc: BaseException) -> str:
    """The message of *exc* on one line, the way the panel shows errors.

    >>> error_line(ValueError("bad\\nthing"))
    'bad thing'
    """
    return one_line(str(exc)) or type(exc).__name__


def json_safe(value: Any) -> Any:
    """*value* as plain JSON data (manifests hold tuples, paths and numpy scalars).

    >>> json_safe({"shape": (2, 3)})
    {'shape': [2, 3]}
    """
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


# ---- the handlers --------------------------------------------------------------------------


def _snapshot(context: Context, data: dict[str, Any]) -> dict[str, Any]:
    after, limit = _optional_int(data, "after"), _optional_int(data, "limit")
    return context.timeline().snapshot(after=after, limit=limit)


def _details(context: Context, data: dict[str, Any]) -> dict[str, Any]:
    return context.timeline().details(_target(data))


def _restore(context: Context, data: dict[str, Any]) -> dict[str, Any]:
    target = _target(data)
    engine = context.engine(context.store_root)
    if engine is not None:  # the kernel's timeline goes on from the restored event
        return engine.restore(context.namespace, target)
    store = open_store(context.store_root)
    return restore(context.namespace, store, target).report(store)


def _plan(context: Context, data: dict[str, Any]) -> dict[str, Any]:
    """Each code cell's verdict for Run All, in the order the cells were given.

    *data* ``cells`` lists the notebook's code cells as ``{"source": ..., "id": ...}``;
    each planned cell comes back with the ``id`` it was sent with (as ``cell``).
    """
    cells = data.get("cells")
    if not isinstance(cells, list) or not all(
        isinstance(c, dict) and isinstance(c.get("source"), str) for c in cells
    ):
        raise RequestError("a plan needs 'cells': the code cells, each as {source, id}")
    registry = getattr(getattr(context.shell, "magics_manager", None), "registry", {})
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


HANDLERS: dict[str, Handler] = {
    "snapshot": _snapshot,
    "details": _details,
    "restore": _restore,
    "plan": _plan,
}
"""Each request's handler: ``handler(context, request) -> JSON-ready data``."""


def answer(data: dict[str, Any], context: Context) -> Any:
    """The data that answers request *data*; raises on a request that cannot be served.

    :class:`RequestError` for a malformed request, ``LookupError`` when the target is not
    found, the store's errors otherwise.

    >>> answer({"request": "snapshot"}, Context(Path("/nonexistent")))["exists"]  # doctest: +SKIP
    False
    """
    handler = HANDLERS.get(data.get("request"))  # type: ignore[arg-type]
    if handler is None:
        raise RequestError(
            f"unknown request {data.get('request')!r}; expected one of {', '.join(REQUESTS)}"
        )
    return json_safe(handler(context, data))


def handle(data: Any, context: Context) -> dict[str, Any]:
    """Answer one request as a reply; never raises (errors come back as ``{"error": ...}``).

    >>> handle({"id": 1, "request": "nope"}, Context())["error"]
    "unknown request 'nope'; expected one of snapshot, details, restore, badges, plan"
    """
    if not isinstance(data, dict):
        return {"id": None, "error": "a request must be a JSON object"}
    reply: dict[str, Any] = {"id": data.get("id"), "request": data.get("request")}
    try:
        reply["data"] = answer(data, context)
    except Exception as exc:  # the channel must survive any failure and say why
        reply["error"] = error_line(exc)
    return reply
