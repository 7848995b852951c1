"""A builtin's name bound in the notebook is an input; ``from m import *`` is an output.

Both escape a reading of the code: ``max`` may be the builtin or the notebook's list,
and ``from numpy import *`` binds names the code does not list.
"""

from __future__ import annotations

from pathlib import Path

from test_cross_process import run_process

from ipy_resume.analysis import analyze


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
