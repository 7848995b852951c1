"""ipy_resume: resumable Jupyter/IPython experiments.

Load it with ``%load_ext ipy_resume`` and mark an expensive cell with
``%%checkpoint NAME``: the first run executes and stores what the cell produced;
later runs with the same code and inputs restore it instead.
"""

from __future__ import annotations

import importlib
from typing import Any

from .version import __version__

__all__ = [
    "__version__",
    "load_ipython_extension",
    "resumable",
    "timeline",
    "unload_ipython_extension",
]


def __getattr__(name: str) -> Any:
    # Lazy, so ``import ipy_resume`` stays cheap for jupyter's extension discovery.
    if name == "resumable":
        from .loop import resumable

        return resumable
    if name == "timeline":
        # The submodule is callable: ``timeline()`` returns the widget.
        return importlib.import_module("ipy_resume.timeline")
    raise AttributeError(f"module 'ipy_resume' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%checkpoint``; called by ``%load_ext ipy_resume`` (twice is harmless).

    >>> get_ipython().run_line_magic("load_ext", "ipy_resume")  # doctest: +SKIP
    """
    from .magics import CheckpointMagics

    if getattr(ipython, "_ipy_resume_magics", None) is None:
        magics = CheckpointMagics(ipython)
        ipython.register_magics(magics)
        ipython._ipy_resume_magics = magics
        from .ipython_settings import register as register_settings

        register_settings(ipython)
        _wake_on_saves(ipython)
    # The side panel's channel; a no-op outside a kernel, idempotent inside one.
    from .comm import register

    register(ipython)


def _wake_on_saves(ipython: Any) -> None:
    """Record each background save's timeline event, and tell the panel and any widget,
    after every cell and, in a kernel, as soon as the save is durable (between cells)."""
    from .comm import notify_changed
    from .store import background

    def settle(*_: Any) -> None:
        if background.drain():  # (already reported: nothing new to say)
            notify_changed(ipython)

    # Timeline events of saves the writer finished during the cell, after every cell (a
    # widget made by the cell, or the panel, is told of them then)...
    ipython.events.register("post_run_cell", settle)
    # ...and in a kernel, as soon as a save is durable, between cells.
    loop = getattr(getattr(ipython, "kernel", None), "io_loop", None)
    if loop is not None and hasattr(loop, "add_callback"):
        background.set_waker(lambda: loop.add_callback(settle))


def unload_ipython_extension(ipython: Any) -> None:
    """Forget the engine state; the magics stay registered (IPython cannot remove them)."""
    ipython._ipy_resume_magics = None


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where jupyter finds the prebuilt side-panel extension (shipped in the wheel)."""
    return [{"src": "labextension", "dest": "ipy-resume"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The read-only timeline handlers (``ipy_resume.server``)."""
    return [{"module": "ipy_resume.server"}]
