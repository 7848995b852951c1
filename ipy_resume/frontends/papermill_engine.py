"""``papermill --engine ipy_resume``: papermill's own runs, every cell checkpointed.

Registered through papermill's ``papermill.engine`` entry point. The kernel loads
ipy_resume at start-up; cells run under ``%%checkpoint`` exactly as with
``ipy-resume run`` (see :mod:`ipy_resume.frontends.headless`), so running the same papermill
command after a run died restores the finished cells and continues from the first
unfinished one. Each cell's outcome is logged through papermill's logger.

    papermill in.ipynb out.ipynb --engine ipy_resume -p alpha 0.5
"""

from __future__ import annotations

import os

from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine
from papermill.log import logger
from papermill.utils import merge_kwargs, remove_args

from ..store import location
from .headless import (
    LOAD_EXTENSION,
    CheckpointingCells,
    cell_ids,
    file_has_cell_ids,
    first_line,
)


class _Client(CheckpointingCells, PapermillNotebookClient):
    pass


class ResumeEngine(NBClientEngine):
    """papermill's nbclient engine with every code cell checkpointed.

    >>> import papermill as pm
    >>> pm.execute_notebook("in.ipynb", "out.ipynb", engine_name="ipy_resume")  # doctest: +SKIP
    """

    @classmethod
    def execute_managed_notebook(  # type: ignore[no-untyped-def]
        cls,
        nb_man,
        kernel_name,
        log_output=False,
        stdout_file=None,
        stderr_file=None,
        start_timeout=60,
        execution_timeout=None,
        **kwargs,
    ):
        source = kwargs.get("input_path")
        trust = isinstance(source, (str, os.PathLike)) and file_has_cell_ids(source)
        # papermill runs the kernel in this process's working directory (its --cwd)
        store = location.store_location()
        kwargs = remove_args(["input_path"], **kwargs)
        safe = remove_args(["timeout", "startup_timeout"], **kwargs)
        extra = [*safe.pop("extra_arguments", []), LOAD_EXTENSION]
        final = merge_kwargs(
            safe,
            timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=logger,
            log_output=log_output,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
            extra_arguments=extra,
        )
        client = _Client(nb_man, **final)
        ids = cell_ids(nb_man.nb, trust_ids=trust)

        def report(index: int, outcome: str, seconds: float, saved: float) -> None:
            label = first_line(nb_man.nb.cells[index].source)
            extra_text = f", saved {saved:.1f} s" if outcome == "restored" else ""
            logger.info(
                f"ipy_resume: cell {index} {outcome} in {seconds:.2f} s{extra_text}: {label}"
            )

        client.setup_checkpoints(ids, store, report)
        return client.execute(env=location.kernel_env(store))
