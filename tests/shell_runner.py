"""Run notebook cells in a fresh IPython shell in this process and report as JSON.

Used by cross-process tests: ``python shell_runner.py job.json`` where the job
holds ``{"cells": [...], "eval": {"label": "expression", ...}}``. Prints one
JSON object: per cell its stdout, stderr, displays, result repr and error, and
the value of every ``eval`` expression as its repr.
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from ipy_resume.store import background


def main(path: str) -> None:
    job = json.loads(Path(path).read_text())
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "ipy_resume")
    # Saves are written in the background; these tests look at the store (files,
    # stderr) right after each cell, so each cell ends once its save is durable.
    shell.events.register("post_run_cell", lambda *_: background.flush())
    cells: list[dict[str, Any]] = []
    for source in job["cells"]:
        out, err = io.StringIO(), io.StringIO()
        with (
            capture_output(stdout=False, stderr=False, display=True) as captured,
            redirect_stdout(out),
            redirect_stderr(err),
        ):
            result = shell.run_cell(source, store_history=True)
        cells.append(
            {
                "stdout": out.getvalue(),
                "stderr": err.getvalue(),
                "displays": [o.data for o in captured.outputs],
                "result": None if result.result is None else repr(result.result),
                "error": None
                if result.success
                else repr(result.error_in_exec or result.error_before_exec),
            }
        )
    values = {label: repr(eval(expr, shell.user_ns)) for label, expr in job.get("eval", {}).items()}
    print(json.dumps({"cells": cells, "eval": values}))


if __name__ == "__main__":
    main(sys.argv[1])
