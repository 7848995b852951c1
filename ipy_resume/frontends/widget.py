"""The in-notebook timeline: ``from ipy_resume import timeline; timeline()``.

An anywidget, so it needs no extension of its own: the front end is a static
ES module (``_frontend/widget.js``) bundled from the same TypeScript renderer
the JupyterLab side panel uses, and it renders wherever ipywidgets do
(JupyterLab 4, Notebook 7, VS Code). The widget runs inside the kernel, so it
answers ``details`` and ``restore`` itself through :mod:`ipy_resume.frontends.protocol`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..engine.queries import Timeline
from ..store import location
from . import comm, protocol

_FRONTEND = Path(__file__).parent.parent / "_frontend"


class TimelineWidget(anywidget.AnyWidget):
    """The checkpoint timeline of one store, with restore buttons.

    >>> TimelineWidget(store=Path(".ipy_resume")).snapshot["exists"]  # doctest: +SKIP
    True
    """

    _esm = _FRONTEND / "widget.js"
    _css = _FRONTEND / "widget.css"

    snapshot = traitlets.Dict().tag(sync=True)
    store = traitlets.Unicode().tag(sync=True)

    def __init__(self, store: Path | str | None = None, shell: Any = None, **kwargs: Any) -> None:
        self._shell = shell
        self._root = location.resolve(store) if store is not None else None
        super().__init__(**kwargs)
        self.on_msg(self._on_custom)
        self.refresh()

    @property
    def root(self) -> Path | str:
        """The store shown: the one given, else the kernel's current store."""
        if self._root is not None:
            return self._root
        return location.default_root()

    def refresh(self) -> None:
        """Re-read the store; the front end redraws from the new snapshot."""
        snap = Timeline.open(self.root).snapshot()
        self.store = snap["store"]
        self.snapshot = protocol.json_safe(snap)

    def _namespace(self) -> Any:
        shell = self._shell or comm.current_shell()
        if shell is not None:
            return shell.user_ns
        import __main__

        return __main__.__dict__

    def _on_custom(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("request") == "refresh":
            self.refresh()
            self.send({"id": content.get("id"), "request": "refresh", "data": {}})
            return
        reply = protocol.handle(content, comm.context(self._namespace(), self.root))
        self.send(reply)
        if reply.get("request") == "restore" and "data" in reply:
            self.refresh()


def timeline_widget(store: str | Path | None = None) -> TimelineWidget:
    """The timeline widget of *store* (default: the store the kernel uses now).

    It updates after each ``%%checkpoint`` run and restores the kernel to any
    checkpoint from its buttons.

    >>> from ipy_resume import timeline
    >>> timeline()  # doctest: +SKIP
    TimelineWidget(...)
    """
    shell = comm.current_shell()
    widget = TimelineWidget(store=Path(store) if store is not None else None, shell=shell)
    if shell is not None:
        comm.add_widget(shell, widget)
    return widget
