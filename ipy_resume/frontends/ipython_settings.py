"""Settings that live in IPython itself: ``%matplotlib``, ``%config`` and the display
formatters' printers (``sympy.init_printing()``).

Registered into :mod:`ipy_resume.runtime.settings` when the extension loads, so the engine
records and re-applies them like any library setting without importing IPython.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from ..runtime import settings

__all__ = ["register"]


def _backend() -> str | None:
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return None
    value = dict.get(mpl.rcParams, "backend")  # raw: never resolves (imports) a backend
    return value if isinstance(value, str) else None


def _backend_diff(before: str | None, after: str | None) -> str | None:
    # From "not chosen yet" to the kernel's MPLBACKEND is pyplot resolving its default on
    # import, not a choice of the cell: re-applying it on a restore would only perturb it.
    if after is None or before == after:
        return None
    if before is None and after == os.environ.get("MPLBACKEND", after):
        return None
    return after


def _config_snapshot(shell: InteractiveShell) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, traits in shell.config.items():
        if not hasattr(traits, "items"):
            continue
        for trait, value in traits.items():
            if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict, set)):
                out[f"{section}.{trait}"] = value
    return out


# (the formatters' printer tables as last copied, and the snapshot made from them)
_printers_last: tuple[list[tuple[dict[Any, Any], dict[Any, Any]]], dict[str, Any]] | None = None


def _printers_snapshot(shell: InteractiveShell) -> dict[str, Any] | None:
    """The printers registered with IPython's display formatters, by MIME type and type.

    ``sympy.init_printing()``, ``pd.set_option("display.latex.repr", ...)`` and a
    notebook's own ``for_type`` calls register printers there: a cell restored instead
    of executed would leave every later output printed as before them.  Each entry is
    ``"MIME module.Type": (type, printer)`` (a printer registered by name: ``(module,
    name)``).  Twice per cell: while the tables are those of the last copy (compared in C,
    by identity first), the last snapshot stands and its diff with itself is nothing.
    """
    global _printers_last
    display = getattr(shell, "display_formatter", None)
    formatters = getattr(display, "formatters", None)
    if not formatters:
        return None
    tables = [(f.type_printers, f.deferred_printers) for f in formatters.values()]
    last = _printers_last
    if last is not None and len(last[0]) == len(tables):
        try:
            if all(
                dict.__eq__(a, b) is True and dict.__eq__(c, d) is True
                for (a, c), (b, d) in zip(last[0], tables, strict=True)
            ):
                return last[1]
        except Exception:
            pass
    state: dict[str, Any] = {}
    for mime, formatter in formatters.items():
        for typ, printer in formatter.type_printers.items():
            name = f"{getattr(typ, '__module__', '?')}.{getattr(typ, '__qualname__', typ)}"
            state[f"{mime} {name}"] = ("type", typ, printer)
        for (module, name), printer in formatter.deferred_printers.items():
            state[f"{mime} {module}.{name}"] = ("name", (module, name), printer)
    _printers_last = ([(dict(a), dict(b)) for a, b in tables], state)
    return state


def _printers_apply(shell: InteractiveShell, diff: Mapping[str, Any]) -> None:
    formatters = getattr(shell.display_formatter, "formatters", None) or {}
    for key, (how, target, printer) in diff.get("set", {}).items():
        formatter = formatters.get(key.partition(" ")[0])
        if formatter is None:
            continue
        if how == "type":
            formatter.for_type(target, printer)
        else:
            formatter.for_type_by_name(target[0], target[1], printer)
    gone = set(diff.get("unset", []))
    for mime, formatter in formatters.items():
        for typ in list(formatter.type_printers):
            name = f"{getattr(typ, '__module__', '?')}.{getattr(typ, '__qualname__', typ)}"
            if f"{mime} {name}" in gone:
                formatter.type_printers.pop(typ, None)
        for pair in list(formatter.deferred_printers):
            if f"{mime} {pair[0]}.{pair[1]}" in gone:
                formatter.deferred_printers.pop(pair, None)


def register(shell: InteractiveShell) -> None:
    """Record ``%matplotlib`` backends, ``%config`` values and display printers of *shell*
    with checkpoints.

    >>> register(get_ipython())  # doctest: +SKIP
    """

    def apply_backend(backend: str) -> None:
        if _backend() == backend:
            return
        # As the cell did: ``%matplotlib NAME`` switches through pyplot and sets up the
        # shell's hooks; ``matplotlib.use`` would also turn off rcParams' backend_fallback,
        # a difference every later cell's key would see.
        try:
            shell.run_line_magic("matplotlib", "inline" if "inline" in backend else backend)
        except Exception:  # a name the magic does not know: matplotlib's own switch
            import matplotlib

            fallback = dict.get(matplotlib.rcParams, "backend_fallback")
            matplotlib.use(backend)
            matplotlib.rcParams["backend_fallback"] = fallback

    def apply_config(diff: Mapping[str, Any]) -> None:
        for name, value in diff.get("set", {}).items():
            shell.run_line_magic("config", f"{name} = {value!r}")

    settings.register(
        settings.Setting("ipython.matplotlib", _backend, _backend_diff, apply_backend)
    )
    settings.register(
        settings.Setting(
            "ipython.config",
            lambda: _config_snapshot(shell),
            settings.dict_diff,
            apply_config,
        )
    )
    settings.register(
        settings.Setting(
            "ipython.printers",
            lambda: _printers_snapshot(shell),
            settings.dict_diff,
            lambda diff: _printers_apply(shell, diff),
        )
    )
