"""One checkpointed cell from plan to commit: the key (planning), execution or
restore, the values it shares with other cells, RNG states, resumable loops and the
queries and reports the front ends show.  Imports ``runtime``, ``fingerprint`` and
``store``; never IPython.
"""

import importlib
import importlib.util


def __getattr__(name: str) -> object:
    # ``from ipy_resume.engine import Engine`` as before the engine became a folder.
    if name.startswith("__") or name == "core":
        raise AttributeError(f"module 'ipy_resume.engine' has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # ``from . import reports`` inside the folder, before core is loaded: that module
        return importlib.import_module(f"{__name__}.{name}")
    core = importlib.import_module("ipy_resume.engine.core")
    try:
        return getattr(core, name)
    except AttributeError:
        raise AttributeError(f"module 'ipy_resume.engine' has no attribute {name!r}") from None
