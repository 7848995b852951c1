"""A corpus of realistic notebooks restores exactly what their first run produced.

Each notebook in ``tests/corpus/`` (written by ``tests/corpus/make_corpus.py``) runs
three times through ``tests/corpus_runner.py``: as written, with every code cell
under ``%%checkpoint``, and once more in a fresh kernel over the same store. The
third run must execute nothing, show what the second showed, and leave the same
namespace, sharing, RNG state, library settings and files. A failure lists every
difference by cell, with the cell's source and what ipy_resume said.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from corpus_runner import (
    CORPUS,
    PREFIX,
    CellResult,
    corpus_notebooks,
    prepare,
    read_outputs,
    run_three_ways,
    split_product_lines,
)

NOTEBOOKS = corpus_notebooks()


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_restored_run_equals_the_first_run(notebook: Path, tmp_path: Path) -> None:
    result = run_three_ways(notebook, tmp_path)
    if result.findings:
        pytest.fail(result.report(), pytrace=False)


def test_the_corpus_has_ten_notebooks_of_at_least_twenty_code_cells() -> None:
    assert len(NOTEBOOKS) >= 10, [p.name for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert (nb.nbformat, nb.nbformat_minor) == (4, 5), path.name
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert len(code) >= 20, f"{path.name} has {len(code)} code cells"
        assert any(c.cell_type == "markdown" for c in nb.cells), path.name
        assert len({c.id for c in nb.cells}) == len(nb.cells), f"{path.name}: duplicate cell ids"
        for cell in code:
            assert not cell.outputs, f"{path.name} {cell.id}: committed with outputs"
            files = cell.metadata.get("ipy_resume", {}).get("files", [])
            assert all(isinstance(f, str) for f in files), f"{path.name} {cell.id}: {files!r}"


def test_make_corpus_regenerates_every_notebook_byte_for_byte(tmp_path: Path) -> None:
    # make_corpus.py is the source of truth: a hand edit of an .ipynb would be lost.
    subprocess.run(
        [sys.executable, str(CORPUS / "make_corpus.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    generated = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert generated == [p.name for p in NOTEBOOKS]
    for name in generated:
        assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes(), (
            f"{name} differs from what make_corpus.py writes: run python {CORPUS}/make_corpus.py"
        )


def test_wrapping_checkpoints_every_code_cell_with_its_files() -> None:
    nb = nbformat.read(CORPUS / "03_sales_cleaning.ipynb", as_version=4)
    wrapped = prepare(nb, "wrapped", explain=False, instrument=False)
    code = [c for c in wrapped.cells if c.cell_type == "code"]
    assert code[0].source == "%load_ext ipy_resume"
    assert code[-1].metadata["corpus"]["label"] == "probe"
    for cell in code[1:-1]:
        index = cell.metadata["corpus"]["index"]
        first = cell.source.splitlines()[0]
        files = nb.cells[index].metadata.get("ipy_resume", {}).get("files", [])
        expected = f"%%checkpoint c{index}" + (" --files " + " ".join(files) if files else "")
        assert first == expected
    assert any("--files sales_export.csv" in c.source for c in code)
    plain = prepare(nb, "plain", explain=False, instrument=False)
    assert [c.source for c in plain.cells] == [c.source for c in nb.cells]


def test_the_products_own_lines_are_removed_before_outputs_are_compared() -> None:
    text = (
        "epoch 0\n"
        f"\r{PREFIX}loop 10/60  3.1 it/s  not saved yet   \r{PREFIX}loop 60/60  3.0 it/s   \n"
        f"\n{PREFIX}executed 'c3' in 12 ms; saving checkpoint ab12cd34 (3 KB to write)\n"
        "epoch 20\n"
        f"{PREFIX}saved checkpoint ab12cd34 of 'c3' (3 KB written in 4 ms)\n"
    )
    cleaned, ours = split_product_lines(text)
    assert cleaned == "epoch 0\nepoch 20\n"
    assert len(ours) == 4 and all(line.startswith(PREFIX) for line in ours)
    untouched = "a warning\n\nwith a blank line\n"
    assert split_product_lines(untouched) == (untouched, [])


def test_the_writers_saved_line_is_a_status_not_a_message() -> None:
    # In a kernel a cell says "saving" and returns; the writer's "saved" line reaches the
    # cell's output only when it comes before the kernel is idle again.
    stderr = (
        f"{PREFIX}executed 'c4' in 5 ms; saving checkpoint cbe7493b (19.1 KB to write)\n"
        f"{PREFIX}saved checkpoint cbe7493b of 'c4' (19.1 KB written in 30 ms)\n"
    )
    cell = {"outputs": [{"output_type": "stream", "name": "stderr", "text": stderr}]}
    result = CellResult("c4", 4, "ok")
    read_outputs(cell, result)
    assert result.outcome == "executed" and result.durable and result.messages == []
    other = CellResult("c5", 5, "ok")
    read_outputs(cell, other)  # (another cell's line stays a message)
    assert len(other.messages) == 2 and not other.durable


def test_the_referee_compares_identity_except_of_tuples_of_atoms() -> None:
    """Two estimators sharing a default ``estimator_params`` tuple of strings may share it or
    hold equal copies (Python leaves that open); a shared list, or a tuple holding one, is
    identity the referee still compares."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe", CORPUS / "namespace_probe.py")
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)

    class Est:
        def __init__(self, params: object) -> None:
            self.params = params

    names = ("criterion", "max_depth")
    nested = (names, frozenset({1, 2.0}))
    items, other = [1], [2]
    holds = (other, "a")
    ns = {"a": Est(names), "b": Est(names), "c": [nested], "d": [nested]}
    ns.update(e=Est(items), f=Est(items), g=[holds], h=[holds])
    # a tuple of a library's classes (numpy.ScalarType) is such a tuple; one of the
    # notebook's own classes is not (they come back as new classes)
    classes = (int, np.ndarray, json.JSONDecoder)
    own = type("Own", (), {"__module__": "__main__"})  # as a notebook defines one
    ns.update(i=[classes], j=[classes], k=[(own,)])
    ns["m"] = [ns["k"][0]]
    aliases = probe.snapshot(ns)["aliases"]
    assert ["e.params", "f.params"] in aliases
    assert ["g[0]", "h[0]"] in aliases
    assert ["k[0]", "m[0]"] in aliases
    assert not any(p.startswith(("a", "b", "c", "d", "i", "j")) for group in aliases for p in group)
