"""``%checkpoint auto``: slow cells checkpointed and restored without editing the notebook."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_utils import Kernel, kernel_env

from ipy_resume.frontends.auto import reason_to_skip

SLOW = "time.sleep(0.4)\nopen('side.log', 'a').write('slow\\n')\nslow = sum(range(10))\nslow"
FAST = "open('side.log', 'a').write('fast\\n')\nfast = slow + 1\nfast"
LOCKED = "import threading\ntime.sleep(0.3)\nlock = threading.Lock()\nopen('side.log', 'a').write('lock\\n')"


def notebook(kernel: Kernel, ids: bool) -> list[str]:
    """Run the notebook's cells the way a front end does; return their stderr."""
    cells = ["import time", SLOW, FAST, LOCKED]
    errs = []
    for number, source in enumerate(cells):
        out = kernel.run(source, cell_id=f"cell-{number}" if ids else None)
        assert out.status == "ok", out.error
        errs.append(out.stderr)
    return errs


def log(tmp_path: Path) -> list[str]:
    return (tmp_path / "side.log").read_text().split()


@pytest.mark.parametrize("ids", [True, False], ids=["cell ids", "no cell ids"])
def test_auto_mode_restores_slow_cells_after_a_restart(tmp_path: Path, ids: bool) -> None:
    env = kernel_env(tmp_path)
    with Kernel(tmp_path, env) as kernel:
        kernel.run("%load_ext ipy_resume")
        on = kernel.run("%checkpoint auto on --min-seconds 0.2")
        assert "auto checkpoints are on" in on.stdout
        first = notebook(kernel, ids)
        assert "executed cell 'time.sleep(0.4)'" in first[1]
        assert first[2] == ""  # a fast cell runs as usual, nothing stored, nothing said
        assert "is incomplete" in first[3]  # a lock cannot be stored: said once
        again = notebook(kernel, ids)  # the same kernel: the lock cell is not retried
        assert "restored cell 'time.sleep(0.4)'" in again[1] and again[3] == ""
    assert log(tmp_path) == ["slow", "fast", "lock", "fast", "lock"]

    with Kernel(tmp_path, env) as kernel:  # a restart: Run All again
        kernel.run("%load_ext ipy_resume")
        kernel.run("%checkpoint auto on --min-seconds 0.2")
        after = notebook(kernel, ids)
        status = after[1]
        assert "restored cell 'time.sleep(0.4)'" in status
        assert "it was not executed (auto checkpoints)" in status
        assert kernel.run("print(slow, fast)").stdout == "45 46\n"
        assert "auto checkpoints are on" in kernel.run("%checkpoint auto").stdout
        kernel.run("%checkpoint auto off")
        notebook(kernel, ids)  # off: every cell executes as written
    assert log(tmp_path) == [
        "slow",
        "fast",
        "lock",
        "fast",
        "lock",
        "fast",
        "lock",
        "slow",
        "fast",
        "lock",
    ]


def test_auto_mode_leaves_cells_it_cannot_see_through_alone(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        kernel.run("%load_ext ipy_resume")
        kernel.run("%checkpoint auto on --min-seconds 0")
        for source in ["%time x = 1", "y = eval('1 + 1')", "def g():\n    return 1", "!true"]:
            out = kernel.run(source)
            assert out.status == "ok" and "ipy_resume" not in out.stderr, (source, out.stderr)
        out = kernel.run("z = 2")  # an ordinary cell is checkpointed
        assert "executed cell 'z = 2'" in out.stderr


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("%%time\nx = 1", "cell magic"),
        ("x = !ls", "line magic"),
        ("import os\ndef f():\n    pass\nclass A:\n    pass", "only imports and defines"),
        ("x = eval('1')", "eval()"),
        ("global q\nq = 1", "global"),
        ("await asyncio.sleep(0)", "awaits"),
        ("   \n", "empty"),
    ],
)
def test_reasons_to_skip(source: str, why: str) -> None:
    from IPython.core.inputtransformer2 import TransformerManager

    reason = reason_to_skip(source, TransformerManager().transform_cell(source))
    assert reason is not None and why in reason


def test_ordinary_cells_are_taken() -> None:
    for source in ["x = 1", "async def f():\n    await g()\ny = 2", "df = load()\ndf.head()"]:
        assert reason_to_skip(source, source) is None, source
