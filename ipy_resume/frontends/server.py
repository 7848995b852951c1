"""Read-only jupyter_server handlers: the timeline of a notebook's store, from disk.

The side panel talks to the kernel through a comm, but a dead, restarting or
busy kernel cannot answer — which is exactly when a user wants to see what was
saved. These handlers read the store next to the notebook directly:

    GET {base_url}ipy-resume/timeline?path=NOTEBOOK[&after=SEQ&limit=N]  → "snapshot"
    GET {base_url}ipy-resume/details?path=NOTEBOOK&target=TARGET         → "details"

Each is the request of that name of :mod:`ipy_resume.frontends.protocol`, answered there; the
handlers only turn query arguments into the request and errors into HTTP statuses.

The store is the one the notebook's kernel would use: ``$IPY_RESUME_DIR`` when
the server has it (kernels inherit the server's environment; a relative value
is taken from the notebook's folder, the kernel's working directory), else
``.ipy_resume/`` in the notebook's folder. Nothing is ever written; a store
that does not exist answers ``{"exists": false, ...}``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..store import StoreError, location
from ..store.fsio import one_line
from . import protocol


class StorePathError(ValueError):
    """A notebook path outside the server's root, or not a path at all."""


def store_for(
    server_root: Path, notebook_path: str, env: dict[str, str] | None = None
) -> Path | str:
    """The store a kernel started for *notebook_path* would use.

    >>> str(store_for(Path("/srv"), "exp/run.ipynb", env={}))
    '/srv/exp/.ipy_resume'
    """
    root = Path(server_root).resolve()
    relative = notebook_path.strip().strip("/")
    candidate = (root / relative).resolve() if relative else root
    if candidate != root and root not in candidate.parents:
        raise StorePathError(f"'{notebook_path}' is outside the server's root folder")
    folder = candidate if candidate.is_dir() else candidate.parent
    # (the rule every front end follows; a bucket is the same for every notebook)
    return location.store_location(folder=folder, env=env)


def _int_argument(handler: web.RequestHandler, name: str) -> int | None:
    raw = handler.get_query_argument(name, None)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPError(400, f"'{name}' must be an integer, not {raw!r}") from None


class _StoreHandler(APIHandler):
    def _store(self) -> Path | str:
        path = self.get_query_argument("path", "")
        try:
            return store_for(Path(self.settings["server_root_dir"]), path)
        except StorePathError as exc:
            raise web.HTTPError(403, str(exc)) from None
        except StoreError as exc:
            raise web.HTTPError(500, str(exc)) from None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # One line, the same shape the comm uses: {"error": "..."}.
        reason = self._reason
        exc_info = kwargs.get("exc_info")
        if exc_info is not None and isinstance(exc_info[1], web.HTTPError):
            reason = exc_info[1].log_message or reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": one_line(str(reason))}))

    async def _answer(self, store: Path | str, request: dict[str, Any]) -> None:
        # SQLite and manifest reads block; keep them off the server's event loop.
        try:
            result = await asyncio.to_thread(protocol.answer, request, protocol.Context(store))
        except LookupError as exc:
            raise web.HTTPError(404, protocol.error_line(exc)) from None
        except Exception as exc:
            raise web.HTTPError(500, f"cannot read the store: {protocol.error_line(exc)}") from None
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(result, default=str))


class TimelineHandler(_StoreHandler):
    """``GET ipy-resume/timeline?path=NOTEBOOK`` → the store's snapshot."""

    @web.authenticated
    async def get(self) -> None:
        store = self._store()
        after = _int_argument(self, "after")
        limit = _int_argument(self, "limit")
        await self._answer(store, {"request": "snapshot", "after": after, "limit": limit})


class DetailsHandler(_StoreHandler):
    """``GET ipy-resume/details?path=NOTEBOOK&target=ID`` → one checkpoint."""

    @web.authenticated
    async def get(self) -> None:
        store = self._store()
        target = self.get_query_argument("target", "").strip()
        if not target:
            raise web.HTTPError(400, "'target' is required: a checkpoint id, a prefix or a CELL_ID")
        if isinstance(store, Path) and not store.is_dir():
            raise web.HTTPError(404, f"no checkpoint store at {store}")
        await self._answer(store, {"request": "details", "target": target})


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Called by jupyter_server when the extension is enabled."""
    web_app = serverapp.web_app
    base = url_path_join(web_app.settings["base_url"], "ipy-resume")
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "timeline"), TimelineHandler),
            (url_path_join(base, "details"), DetailsHandler),
        ],
    )
    serverapp.log.info("ipy_resume: timeline handlers at %s", base)


# Older jupyter_server and notebook_shim look for this name.
load_jupyter_server_extension = _load_jupyter_server_extension
