"""Every demo notebook runs top to bottom through nbclient, and its outputs are checked.

Cells tagged ``restart-kernel-before`` get a fresh kernel first (what the reader
does from the Kernel menu); a cell tagged ``expect-crash`` must kill its kernel.
A cell's ``expect_output`` metadata lists text its output must contain.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import NoSuchKernel
from kernel_utils import kernel_env
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError
from nbclient.util import run_sync

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
pytestmark = pytest.mark.slow


def output_text(cell: Any) -> str:
    parts: list[str] = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            parts.append(str(output.get("data", {}).get("text/plain", "")))
        elif output.get("output_type") == "error":
            parts.append("\n".join(output.get("traceback", [])))
    return "".join(parts)


def run_notebook(name: str, workdir: Path) -> Any:
    shutil.copy(NOTEBOOKS / name, workdir / name)
    nb = nbformat.read(workdir / name, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    env = kernel_env(workdir)
    with client.setup_kernel(env=env, cwd=str(workdir)):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            tags = cell.metadata.get("tags", [])
            if "restart-kernel-before" in tags:
                run_sync(client.km.restart_kernel)(now=True)
                run_sync(client.kc.wait_for_ready)(timeout=120)
            if "expect-crash" in tags:
                with pytest.raises((DeadKernelError, CellExecutionError, RuntimeError)):
                    client.execute_cell(cell, index)
                assert not run_sync(client.km.is_alive)(), (
                    f"cell {index} should have killed its kernel"
                )
                continue
            client.execute_cell(cell, index)
            text = output_text(cell)
            for expected in cell.metadata.get("expect_output", []):
                assert expected in text, f"{name} cell {index}: {expected!r} not in output:\n{text}"
    return nb


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs_and_shows_what_it_promises(name: str, tmp_path: Path) -> None:
    if name == "digits_training.ipynb":
        pytest.importorskip(
            "sklearn", reason="the digits demo needs scikit-learn (the 'demo' extra)"
        )
    try:
        nb = run_notebook(name, tmp_path)
    except NoSuchKernel:  # pragma: no cover - the test extra installs ipykernel
        pytest.fail("no python3 kernel: install ipykernel")
    errors = [
        output_text(c)
        for c in nb.cells
        if any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert not errors, errors


def test_every_notebook_is_generated_from_its_source() -> None:
    # make_notebooks.py is the source of truth; a hand edit of an .ipynb would be lost.
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOKS / "make_notebooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, cells in module.NOTEBOOKS.items():
        on_disk = nbformat.read(NOTEBOOKS / name, as_version=4)
        assert [c.source for c in on_disk.cells] == [c.source for c in cells], name
