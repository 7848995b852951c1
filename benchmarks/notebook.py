"""Workload 6: "Run all" of a 10-cell notebook with ~3 GB of state, after a restart.

Every run is a fresh Python process (a restarted kernel)::

    python -m benchmarks.notebook --system ipy_resume --phase first --dir D --scale 1
    python -m benchmarks.notebook --system ipy_resume --phase again --dir D --scale 1

``first`` runs the notebook the first time (saving whatever the system saves);
``again`` is the run after the restart: re-executing (``plain``), hitting every
checkpoint (ipy_resume), loading the caches (ipycache, joblib), loading the
session (dill) or checking out the last commit (Kishu). The process prints one
JSON line: seconds for the run, bytes written, and a few values of the final
state so the parent can check every system got the same state back.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import peers
from benchmarks.harness import BenchError, Sizes, io_written, new_shell, run, tree_bytes

# (outputs, function of benchmarks.cells, arguments): cell k is "outputs = bc.function(args)"
CELLS: list[tuple[str, str, str]] = [
    ("raw", "nb_raw", "n"),
    ("smooth", "nb_smooth", "raw"),
    ("feat", "nb_sorted", "raw"),
    ("df", "make_frame", "rows, 1"),
    ("hist, edges", "nb_hist", "raw"),
    ("resid", "nb_resid", "raw, smooth"),
    ("coef", "nb_fit", "smooth"),
    ("table", "nb_table", "df"),
    ("summary", "nb_report", "hist, coef, table"),
]
SYSTEMS = ["plain", "ipy_resume", "ipycache", "joblib", "dill", "kishu"]
CHECK = {
    "raw": "float(raw[:100000].sum())",
    "smooth": "float(smooth[-1])",
    "feat": "float(feat[:1000].sum())",
    "df": "int(len(df)) + float(df['value'].iloc[:1000].sum())",
    "resid": "float(resid[-1000:].sum())",
    "summary": "summary",
}
STATE = "sum(v.nbytes for v in (raw, smooth, feat, resid)) + int(df.memory_usage(deep=True).sum())"


def setup_code(system: str, sizes: Sizes, folder: Path) -> str:
    rows = max(10_000, sizes.frame_rows // 4)
    code = (
        "import numpy as np\nfrom benchmarks import cells as bc\n"
        f"n = {sizes.elems(1.0)}\nrows = {rows}"
    )
    if system == "joblib":
        code += f"\nimport joblib\nmem = joblib.Memory({str(folder / 'joblib')!r}, verbose=0)"
    return code


def cell_code(system: str, k: int, folder: Path) -> str:
    outputs, function, args = CELLS[k]
    if system == "joblib":
        return f"{outputs} = mem.cache(bc.{function})({args})"
    body = f"{outputs} = bc.{function}({args})"
    if system == "ipy_resume":
        return f"%%checkpoint nb{k} --quiet\n{body}"
    if system == "ipycache":
        names = outputs.replace(",", " ")
        return f"%%cache {folder / 'ipycache' / f'cell{k}.pkl'} {names}\n{body}"
    return body


def notebook_cells(system: str, sizes: Sizes, folder: Path) -> list[str]:
    cells = [cell_code(system, k, folder) for k in range(len(CELLS))]
    return [setup_code(system, sizes, folder), *cells]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=SYSTEMS, required=True)
    parser.add_argument("--phase", choices=["first", "again"], required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    sizes, folder, system = Sizes(args.scale), args.dir, args.system
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ipycache").mkdir(exist_ok=True)
    import os

    os.environ["IPY_RESUME_DIR"] = str(folder / "store")
    cells = notebook_cells(system, sizes, folder)
    written0 = io_written()
    report: dict[str, Any] = {"system": system, "phase": args.phase}

    started = time.perf_counter()
    shell = new_shell()
    kishu = None
    if system == "ipy_resume":
        run(shell, "%load_ext ipy_resume")
    elif system == "ipycache":
        peers.load_ipycache(shell)
    elif system == "kishu":
        kishu = peers.kishu_attach(shell, folder / "notebook.ipynb", cells)

    if system == "dill" and args.phase == "again":
        run(shell, peers.dill_load_code(folder / "session.pkl"), "dill load_session")
    elif system == "kishu" and args.phase == "again":
        assert kishu is not None
        commit = (folder / "kishu-head.txt").read_text().strip()
        kishu.checkout(commit)
    else:
        report["cell_s"] = []
        outcomes = []
        for k, code in enumerate(cells):
            report["cell_s"].append(run(shell, code, f"{system} cell {k}"))
            if system == "ipy_resume" and k > 0:
                outcome = shell._ipy_resume_magics.engine().last_outcome
                outcomes.append(getattr(outcome, "status", "?"))
        if outcomes:
            report["outcomes"] = outcomes
    report["seconds"] = time.perf_counter() - started

    if system == "dill" and args.phase == "first":
        before = time.perf_counter()
        run(shell, peers.dill_dump_code(folder / "session.pkl"), "dill dump_session")
        report["dump_s"] = time.perf_counter() - before
    if system == "kishu" and args.phase == "first":
        assert kishu is not None
        (folder / "kishu-head.txt").write_text(peers.kishu_head(kishu))
    report["written_bytes"] = io_written() - written0
    report["store_bytes"] = tree_bytes(folder)
    report["check"] = {name: eval(expr, shell.user_ns) for name, expr in CHECK.items()}
    report["state_bytes"] = eval(STATE, shell.user_ns)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        print(json.dumps({"error": str(exc)[:4000]}), flush=True)
        sys.exit(1)
