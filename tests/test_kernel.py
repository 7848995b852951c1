"""A checkpoint made in one real kernel is restored by a fresh kernel, as a user sees it."""

from __future__ import annotations

import queue
from pathlib import Path

from deadlines import wait_until
from kernel_utils import CellOutput, Kernel, kernel_env

CELLS = [
    "%load_ext ipy_resume",
    (
        "%%checkpoint fit\n"
        "import numpy as np\n"
        "from IPython.display import Markdown, display\n"
        "open('executions.log', 'a').write('fit\\n')\n"
        "coef = np.random.normal(size=(64, 64))\n"
        "print('fitting done')\n"
        "display(Markdown('**converged**'))\n"
        "coef.shape\n"
    ),
    "draw = np.random.rand(4).tolist(); draw",
]


def test_fresh_kernel_restores_values_output_and_rng(tmp_path: Path) -> None:
    runs = []
    for _ in range(2):
        with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
            outputs = [kernel.run(cell) for cell in CELLS]
            checksum = kernel.run("float(coef.sum())").result
        assert all(o.status == "ok" for o in outputs), [o.error for o in outputs]
        runs.append((outputs, checksum))
    (first, sum1), (second, sum2) = runs
    assert (tmp_path / "executions.log").read_text() == "fit\n"
    assert sum1 == sum2
    assert first[1].stdout == second[1].stdout == "fitting done\n"
    assert first[1].displays == second[1].displays
    assert "text/markdown" in second[1].displays[0]
    assert first[1].result == second[1].result and second[1].result["text/plain"] == "(64, 64)"
    assert first[2].result == second[2].result
    assert "restored 'fit'" in second[1].stderr


FD_CELL = (
    "%%checkpoint native\n"
    "import os, subprocess\n"
    "print('from python')\n"
    "os.write(1, b'from the descriptor\\n')\n"
    "subprocess.run(['echo', 'from a child'], check=True)\n"
    "os.write(2, b'warning from C\\n')\n"
    "done = True\n"
)


def stdout_under(kernel: Kernel, cell: CellOutput, text: str) -> str:
    """The stdout a frontend shows under *cell*, up to *text* if that comes after the reply:
    ipykernel's thread reading descriptor 1 forwards what it reads in its own time."""
    shown = [cell.stdout]

    def arrived() -> bool:
        try:
            msg = kernel.client.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            return False
        content = msg["content"]
        if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == cell.msg_id:
            shown.append(content["text"] if content["name"] == "stdout" else "")
        return text in "".join(shown)

    if text not in cell.stdout:
        wait_until(arrived, what=f"{text!r} under the cell")
    return "".join(shown)


def test_output_written_below_python_is_shown_live_and_replayed(tmp_path: Path) -> None:
    # What C code and child processes write to descriptors 1 and 2 reaches the notebook
    # through the kernel's own pipe; ipy_resume records it on the way and replays it.
    runs = []
    for _ in range(2):
        with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
            kernel.run("%load_ext ipy_resume")
            runs.append(kernel.run(FD_CELL))
            after = kernel.run("import os; os.write(1, b'after the cell\\n'); done")
            assert after.result == {"text/plain": "True"}
            # the kernel's own pipe is back in place
            assert "after the cell" in stdout_under(kernel, after, "after the cell")
    first, second = runs
    assert first.status == second.status == "ok", (first.error, second.error)
    for text in ("from python", "from the descriptor", "from a child"):
        assert text in first.stdout and text in second.stdout, (first.stdout, second.stdout)
    assert "warning from C" in first.stderr and "warning from C" in second.stderr
    assert "restored 'native'" in second.stderr
    assert second.stdout.count("from the descriptor") == 1  # replayed once, not twice


def test_a_small_save_says_saving_then_saved_under_its_own_cell(tmp_path: Path) -> None:
    # A kernel's cell is not held for the writer's fsyncs: it returns saying "saving",
    # and the "saved" line, printed by the writer once the checkpoint is durable, carries
    # the cell's own parent header (not the next cell's), so a frontend shows it there.
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        assert kernel.run("%load_ext ipy_resume").status == "ok"
        cell = kernel.run("%%checkpoint small\nx = list(range(10))")
        assert cell.status == "ok"
        assert "executed 'small'" in cell.stderr and "saving checkpoint" in cell.stderr
        assert "saved checkpoint" not in cell.stderr, cell.stderr
        short = cell.stderr.split("saving checkpoint ")[1].split()[0]
        later = kernel.later_stderr(cell, "saved checkpoint")
        assert f"saved checkpoint {short} of 'small'" in later, later
        listed = kernel.run("%checkpoint list")
        assert "small" in listed.stdout and short in listed.stdout, listed.stdout
