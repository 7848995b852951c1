"""Driving the peers: joblib.Memory, ipycache ``%%cache``, dill sessions and Kishu.

Each is used the way its documentation (or, for Kishu, its own test-suite)
uses it, inside the same kind of real IPython shell ipy_resume runs in.
"""

from __future__ import annotations

import builtins
import importlib
import os
import pickle
import sys
import types
from pathlib import Path
from typing import Any

# ---- ipycache ---------------------------------------------------------------------------------

IPYCACHE_SHIM = (
    "ipycache 0.1.4 (2013) is the only release on PyPI and is Python 2 code: it imports "
    "cPickle, IPython.config, IPython.utils.traitlets and IPython.utils.io.capture_output and "
    "refers to an undefined six 'moves'. The benchmark maps those four names onto pickle, "
    "traitlets and IPython.utils.capture before importing it; its logic is unchanged "
    "(pickle of the named variables, default protocol, no fsync, no input hashing)."
)


def load_ipycache(shell: Any) -> None:
    """Import ipycache 0.1.4 through import aliases and ``%load_ext`` it into *shell*."""
    if "ipycache" not in sys.modules:
        import traitlets
        import traitlets.config
        import traitlets.config.configurable
        from IPython.utils import capture

        io_alias = types.ModuleType("IPython.utils.io")
        real_io = importlib.import_module("IPython.utils.io")
        io_alias.__dict__.update(real_io.__dict__)
        io_alias.capture_output = capture.capture_output  # type: ignore[attr-defined]
        io_alias.CapturedIO = capture.CapturedIO  # type: ignore[attr-defined]
        aliases = {
            "cPickle": pickle,
            "IPython.config": traitlets.config,
            "IPython.config.configurable": traitlets.config.configurable,
            "IPython.utils.traitlets": traitlets,
            "IPython.utils.io": io_alias,
        }
        saved = {name: sys.modules.get(name) for name in aliases}
        sys.modules.update(aliases)
        if not hasattr(builtins, "moves"):
            builtins.moves = types.SimpleNamespace(builtins=builtins)  # type: ignore[attr-defined]
        try:
            importlib.import_module("ipycache")
        finally:
            for name, module in saved.items():
                if module is None:
                    if name != "cPickle":
                        sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
    shell.run_line_magic("load_ext", "ipycache")


# ---- Kishu ------------------------------------------------------------------------------------

KISHU_HOW = (
    "Kishu 0.3.4 is driven in-process as its own tests do: a real IPython shell, "
    "KishuForJupyter(NotebookId(key, path, kernel_id), ip=shell) on a real .ipynb file, "
    "install_kishu_hooks() (auto-commit after every cell), ENV_KISHU_TEST_MODE set (which only "
    "skips asking a browser front-end to save the notebook), KISHU_PATH_ROOT in the bench folder."
)


def kishu_env(root: Path) -> None:
    """Environment Kishu reads at import time: set before importing it.

    Kishu fixes its config folder (``$KISHU_PATH_ROOT/.kishu``) at import, so a root set
    by the caller (the orchestrator's scratch folder) wins over *root*.
    """
    os.environ["ENV_KISHU_TEST_MODE"] = "1"
    os.environ.setdefault("KISHU_PATH_ROOT", str(root))


def kishu_attach(shell: Any, notebook: Path, cells: list[str] | None = None) -> Any:
    """Attach Kishu to *shell* for the notebook file *notebook* (created when missing)."""
    import nbformat

    kishu_env(notebook.parent)
    from kishu.jupyterint import KishuForJupyter
    from kishu.notebook_id import NotebookId

    if not notebook.exists():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for src in (cells or ["pass"])]
        nbformat.write(nb, notebook)
    kishu = KishuForJupyter(NotebookId("bench", notebook, "bench-kernel"), ip=shell)
    kishu.install_kishu_hooks()
    return kishu


def kishu_db(notebook: Path) -> Path:
    return notebook.with_suffix(".kishudb")


def kishu_head(kishu: Any) -> str:
    head = kishu._kishu_branch.get_head()
    return str(head.commit_id)


# ---- dill ---------------------------------------------------------------------------------------


def dill_dump_code(path: Path) -> str:
    return f"import dill as _dill\n_dill.dump_session({str(path)!r})"


def dill_load_code(path: Path) -> str:
    return f"import dill as _dill\n_dill.load_session({str(path)!r})"
