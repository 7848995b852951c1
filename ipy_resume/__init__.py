"""ipy_resume: resumable Jupyter/IPython experiments.

Load it with ``%load_ext ipy_resume`` and mark an expensive cell with
``%%checkpoint NAME``: the first run executes and stores what the cell produced;
later runs with the same code and inputs restore it instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

from .version import __version__

__all__ = [
    "__version__",
    "load_ipython_extension",
    "resumable",
    "timeline",
    "unload_ipython_extension",
]


# Where the modules that once stood at the top level live now: the old paths keep working
# (the same module object under both names), for code and for pickles that name them.
_MOVED = {
    **{
        name: f"runtime.{name}"
        for name in (
            "analysis",
            "capture",
            "settings",
            "file_deps",
            "modrefs",
            "pages",
            "torch_support",
            "units",
        )
    },
    **{
        name: f"engine.{name}"
        for name in (
            "execution",
            "loop",
            "planning",
            "restoring",
            "sharing",
            "reports",
            "queries",
            "rng",
        )
    },
    **{
        name: f"frontends.{name}"
        for name in (
            "magics",
            "comm",
            "widget",
            "server",
            "cli",
            "headless",
            "papermill_engine",
            "auto",
            "ipython_settings",
            "demo",
            "protocol",
        )
    },
}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``ipy_resume.<old name>`` as the module that now lives in a layer folder.

    >>> import ipy_resume.settings, ipy_resume.runtime.settings
    >>> ipy_resume.settings is ipy_resume.runtime.settings
    True
    """

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        if package != __name__ or name not in _MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(f"{__name__}.{_MOVED[spec.name.partition('.')[2]]}")
        # The import system stamps the alias's spec on the module; keep the real one.
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._real_spec


if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
    sys.meta_path.append(_OldPaths())


def __getattr__(name: str) -> Any:
    # Lazy, so ``import ipy_resume`` stays cheap for jupyter's extension discovery.
    if name == "resumable":
        from .engine.loop import resumable

        return resumable
    if name == "timeline":
        # The submodule is callable: ``timeline()`` returns the widget.
        return importlib.import_module("ipy_resume.timeline")
    raise AttributeError(f"module 'ipy_resume' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%checkpoint``; called by ``%load_ext ipy_resume`` (twice is harmless).

    >>> get_ipython().run_line_magic("load_ext", "ipy_resume")  # doctest: +SKIP
    """
    from .frontends.magics import CheckpointMagics

    if getattr(ipython, "_ipy_resume_magics", None) is None:
        magics = CheckpointMagics(ipython)
        ipython.register_magics(magics)
        ipython._ipy_resume_magics = magics
        from .frontends.ipython_settings import register as register_settings

        register_settings(ipython)
        _wake_on_saves(ipython)
        _index_modules_between_cells(ipython)
        magics.warm_up()
    # The side panel's channel; a no-op outside a kernel, idempotent inside one.
    from .frontends.comm import register

    register(ipython)


def _wake_on_saves(ipython: Any) -> None:
    """Record each background save's timeline event, and tell the panel and any widget,
    after every cell and, in a kernel, as soon as the save is durable (between cells)."""
    from .frontends.comm import notify_changed
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


def _index_modules_between_cells(ipython: Any) -> None:
    """After each cell that imported modules, index their objects on a helper thread (see
    ``runtime.modrefs.index_soon``) until the next cell starts: the next save that asks
    finds the index made."""
    from .runtime import modrefs

    ipython.events.register("pre_run_cell", lambda *_: modrefs.hold_off())
    ipython.events.register("post_run_cell", lambda *_: modrefs.index_soon())
    modrefs.index_soon()


def unload_ipython_extension(ipython: Any) -> None:
    """Forget the engine state; the magics stay registered (IPython cannot remove them)."""
    ipython._ipy_resume_magics = None


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where jupyter finds the prebuilt side-panel extension (shipped in the wheel)."""
    return [{"src": "labextension", "dest": "ipy-resume"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The read-only timeline handlers (``ipy_resume.frontends.server``)."""
    return [{"module": "ipy_resume.frontends.server"}]
