"""Cell badges and Plan Run All through the comm, against a real kernel.

A frontend that announces badges gets each ``%%checkpoint`` run pushed as an
``outcome`` (with the notebook cell id from the request's metadata) and the kernel
writes no routine status line; warnings still reach the output area.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernel_utils import CellOutput, Kernel, kernel_env
from test_comm import FIRST, SECOND, CommProbe

LOCKED = "%%checkpoint locked\nimport threading\nlock = threading.Lock()\nprint('lock made')\n"


def _outcomes(out: CellOutput) -> list[dict[str, Any]]:
    return [m for m in out.comms if m.get("event") == "outcome"]


def _run(kernel: Kernel, code: str, cell: str | None = None) -> CellOutput:
    out = kernel.run(code, cell_id=cell)
    assert out.status == "ok", out.error
    return out


def test_badges_replace_the_status_line(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        _run(kernel, "%load_ext ipy_resume")
        probe = CommProbe(kernel)
        probe.open()
        assert probe.request(id=1, request="badges", on=True)["data"] == {
            "badges": True,
            "outcomes": [],
        }

        out = _run(kernel, FIRST, cell="nb-cell-1")
        assert out.stdout == "first ran\n"
        assert "ipy_resume" not in out.stderr  # no status line: the badge shows it
        [executed] = _outcomes(out)
        assert executed["cell"] == "nb-cell-1" and executed["cell_id"] == "first"
        assert executed["outcome"] == "executed" and executed["checkpoint_id"]
        assert executed["checkpoint_id"].startswith(executed["short_id"])
        # the hover text: what --explain would have said, without --explain
        assert executed["reason"].startswith("'first' executes: it has no earlier checkpoint")

        out = _run(kernel, FIRST, cell="nb-cell-1")
        assert out.stdout == "first ran\n"  # the replayed output, and nothing else
        assert out.stderr == ""
        [restored] = _outcomes(out)
        assert restored["outcome"] == "restored" and restored["cell"] == "nb-cell-1"
        assert restored["checkpoint_id"] == executed["checkpoint_id"]
        assert restored["saved"] >= 0 and restored["reason"] == ""

        # A value that cannot be stored is a warning: it stays in the output area.
        out = _run(kernel, LOCKED, cell="nb-cell-2")
        assert "lock made" in out.stdout
        assert "checkpoint 'locked' is incomplete" in out.stderr
        assert [o["outcome"] for o in _outcomes(out)] == ["incomplete"]

        # Badges off again: the plain status line is back.
        assert probe.request(id=2, request="badges", on=False)["data"]["badges"] is False
        out = _run(kernel, FIRST, cell="nb-cell-1")
        assert "ipy_resume: restored 'first'" in out.stderr and not _outcomes(out)
        assert (
            "'on' must be true or false" in probe.request(id=3, request="badges", on="yes")["error"]
        )


def test_cells_queued_before_the_comm_opens(tmp_path: Path) -> None:
    """Run All right after %load_ext: the cells are queued before the panel's comm opens."""
    flag = {"ipy_resume_badges": True}
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        _run(kernel, "%load_ext ipy_resume")
        out = kernel.run(FIRST, cell_id="nb-cell-1", metadata=flag)
        assert out.stdout == "first ran\n" and out.stderr == ""
        out = kernel.run(LOCKED, cell_id="nb-cell-2", metadata=flag)
        assert "checkpoint 'locked' is incomplete" in out.stderr  # warnings stay
        probe = CommProbe(kernel)
        probe.open()
        answer = probe.request(id=1, request="badges", on=True)["data"]
        kept = {o["cell"]: o["outcome"] for o in answer["outcomes"]}
        assert kept == {"nb-cell-1": "executed", "nb-cell-2": "incomplete"}


def test_no_badges_without_the_announcement(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        _run(kernel, "%load_ext ipy_resume")
        CommProbe(kernel).open()  # the panel alone does not hide anything
        out = _run(kernel, FIRST, cell="nb-cell-1")
        assert "ipy_resume: executed 'first'" in out.stderr and not _outcomes(out)


def test_plan_request(tmp_path: Path) -> None:
    cells = [
        {"source": FIRST, "id": "c1"},
        {"source": "print('plain')", "id": "c2"},
        {"source": SECOND, "id": "c3"},
        {"source": "%%checkpoint third\nz = y + [4]\n", "id": "c4"},
    ]
    env = kernel_env(tmp_path)
    with Kernel(tmp_path, env) as kernel:
        _run(kernel, "%load_ext ipy_resume")
        _run(kernel, FIRST)
        _run(kernel, SECOND)
    # A fresh kernel, as after a restart: the plan chains through what would restore.
    with Kernel(tmp_path, env) as kernel:
        _run(kernel, "%load_ext ipy_resume")
        probe = CommProbe(kernel)
        probe.open()
        answer = probe.request(id=1, request="plan", cells=cells)["data"]
        rows = {row["cell"]: row for row in answer["cells"]}
        assert [r["cell"] for r in answer["cells"]] == ["c1", "c2", "c3", "c4"]
        assert rows["c1"]["verdict"] == "restore" and rows["c1"]["cell_id"] == "first"
        assert rows["c1"]["checkpoint_id"].startswith(rows["c1"]["short_id"])
        assert rows["c2"]["verdict"] == "runs" and rows["c2"]["cell_id"] is None
        assert rows["c3"]["verdict"] == "restore"
        assert rows["c4"]["verdict"] == "execute" and rows["c4"]["reason"]
        assert answer["saved"] >= 0 and "would restore" in answer["text"]
        # Nothing ran: the plan loads and executes nothing.
        assert _run(kernel, "'x' in dir()").result == {"text/plain": "False"}

        error = probe.request(id=2, request="plan", cells="nope")["error"]
        assert "a plan needs 'cells'" in error
        bad = [{"source": "%%checkpoint a --seed 1 --no-seed\nx = 1\n", "id": "c1"}]
        assert "--seed N or --no-seed" in probe.request(id=3, request="plan", cells=bad)["error"]
