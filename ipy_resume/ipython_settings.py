"""Settings that live in IPython itself: ``%matplotlib`` and ``%config``.

Registered into :mod:`ipy_resume.settings` when the extension loads, so the engine
records and re-applies them like any library setting without importing IPython.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from . import settings

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


def register(shell: InteractiveShell) -> None:
    """Record ``%matplotlib`` backends and ``%config`` values of *shell* with checkpoints.

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
