"""Names a plain reading of the code misses: builtins, star imports, timed magics, handlers.

A builtin's name bound in the notebook is an input (``max`` may be the builtin or the
notebook's list); ``from numpy import *`` binds names the code does not list; ``%time
x = f()`` binds ``x`` from inside a string; ``except E as e`` deletes ``e``.
"""

from __future__ import annotations

from pathlib import Path

from test_cross_process import run_process

from ipy_resume.runtime.analysis import analyze


def _statuses(report: dict[str, object]) -> list[str]:
    cells = report["cells"]
    assert isinstance(cells, list)
    return [c["stderr"] for c in cells]


def test_a_builtin_read_is_an_input_only_where_the_namespace_shadows_it() -> None:
    a = analyze("y = max(x)\nz = len(y)")
    assert a.inputs == {"x"} and a.builtins == {"max", "len"}
    assert a.reads({"x"}) == {"x"}
    assert a.reads({"x", "max"}) == {"x", "max"}
    assert analyze("max = 3\ny = max").builtins == set()  # bound first: not read
    assert analyze("def f():\n    return sum(v)").builtins == {"sum"}
    assert not analyze("import math").star_import
    assert analyze("from math import *").star_import


def test_a_shadowed_builtin_that_changes_makes_the_cell_execute(tmp_path: Path) -> None:
    cells = [
        "max = [1, 2, 3]",
        "%%checkpoint first\nx = max[0]",
        "max = [9, 2, 3]",
        "%%checkpoint first\nx = max[0]",
    ]
    report = run_process(tmp_path, cells, {"x": "x"})
    statuses = _statuses(report)
    assert "executed" in statuses[1] and "executed" in statuses[3], statuses
    assert report["eval"]["x"] == "9"
    # the builtin itself, unshadowed, is no input: a fresh kernel still hits
    plain = ["%%checkpoint plain\nm = max([4, 5])"]
    run_process(tmp_path, plain, {})
    again = run_process(tmp_path, plain, {"m": "m"})
    assert "restored" in _statuses(again)[0] and again["eval"]["m"] == "5"


STAR = "%%checkpoint star\nfrom math import *\nfrom numpy import arange"
STAR_CHECKS = {
    "cos": "cos(pi)",
    "module": "sqrt.__module__",
    "arange": "arange(3).tolist()",
}


def test_names_a_star_import_binds_come_back_with_its_checkpoint(tmp_path: Path) -> None:
    first = run_process(tmp_path, [STAR], STAR_CHECKS)
    assert first["eval"] == {"cos": "-1.0", "module": "'math'", "arange": "[0, 1, 2]"}
    second = run_process(tmp_path, [STAR], STAR_CHECKS)
    assert "restored" in _statuses(second)[0], _statuses(second)
    assert second["eval"] == first["eval"]


def test_a_name_bound_under_time_comes_back_and_one_read_under_timeit_is_an_input(
    tmp_path: Path,
) -> None:
    cells = [
        "import numpy as np\ncounts = np.zeros(3)",
        "%%checkpoint timed\n%time total = int(counts.sum()) + 45",
        # %timeit runs its statement again and again: the in-place tally it leaves in
        # ``counts`` is part of what the cell did
        "%%checkpoint tally\n%timeit -n2 -r1 np.add.at(counts, [0], 1)",
    ]
    checks = {"total": "total", "counts": "counts.tolist()"}
    first = run_process(tmp_path, cells, checks)
    assert first["eval"] == {"total": "45", "counts": "[2.0, 0.0, 0.0]"}
    second = run_process(tmp_path, cells, checks)
    statuses = _statuses(second)
    assert "restored" in statuses[1] and "restored" in statuses[2], statuses
    assert second["eval"] == first["eval"]
    # ``counts`` is an input of both cells: another one makes them execute
    cells[0] = "import numpy as np\ncounts = np.ones(3)"
    third = run_process(tmp_path, cells, checks)
    statuses = _statuses(third)
    assert "executed" in statuses[1] and "executed" in statuses[2], statuses
    assert third["eval"] == {"total": "48", "counts": "[3.0, 1.0, 1.0]"}


CATCH = "%%checkpoint catch\ntry:\n    1 / 0\nexcept ZeroDivisionError as e:\n    msg = str(e)"


def test_a_name_an_except_clause_deleted_stays_deleted_after_a_restore(tmp_path: Path) -> None:
    # ``e`` from an earlier cell (``from math import *`` binds one) is deleted by the
    # handler's implicit ``del e``
    cells = ["e = 2.5", CATCH]
    checks = {"e": "'e' in globals()", "msg": "msg"}
    first = run_process(tmp_path, cells, checks)
    assert first["eval"] == {"e": "False", "msg": "'division by zero'"}
    second = run_process(tmp_path, cells, checks)
    assert "restored" in _statuses(second)[1], _statuses(second)
    assert second["eval"] == first["eval"]


def test_display_bound_by_a_star_import_is_stored_and_restored(tmp_path: Path) -> None:
    # IPython puts display among the builtins; a notebook's own binding of it (a preamble's
    # ``from IPython.display import display``, through ``import *``) is a name like any other
    (tmp_path / "preamblemod.py").write_text(
        "from IPython.display import display\nimport math\n__all__ = ['display', 'math']\n"
    )
    cell = "%%checkpoint pre\nimport sys\nsys.path.insert(0, '.')\nfrom preamblemod import *"
    check = {"bound": "'display' in globals() and 'math' in globals()"}
    first = run_process(tmp_path, [cell], check)
    second = run_process(tmp_path, [cell], check)
    assert "restored 'pre'" in second["cells"][0]["stderr"], second["cells"][0]
    assert first["eval"] == second["eval"] == {"bound": "True"}
