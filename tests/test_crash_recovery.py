"""A kernel SIGKILLed mid-cell comes back: ``%resume``, re-runs that skip, loops that continue."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from kernel_utils import Kernel, kernel_env

pytestmark = pytest.mark.slow


def cell(cell_id: str, body: str) -> str:
    # Each execution leaves a mark, so a test can tell an execution from a restore.
    return f"%%checkpoint {cell_id}\nopen('ran-{cell_id}', 'a').write('x')\n{body}\n"


CELLS = [
    cell("prepare", "import numpy as np\nbase = np.arange(10.0)\nlabel = 'v1'"),
    cell("scale", "scaled = base * 3\nrng_draw = np.random.rand()"),
    cell("summarise", "total = float(scaled.sum()) + rng_draw\nparts = {'n': len(scaled)}"),
]
LONG = cell("long", "import time\nopen('long-started', 'w').close()\ntime.sleep(120)\nfinal = 1")


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.05)


def kill_during(kernel: Kernel, code: str, marker: Path) -> None:
    """Start *code*, wait until it writes *marker*, then SIGKILL the kernel process."""
    kernel.client.execute(code)
    wait_for(marker)
    os.kill(kernel.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while kernel.manager.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not kernel.manager.is_alive()


def marks(tmp_path: Path, cell_id: str) -> int:
    path = tmp_path / f"ran-{cell_id}"
    return len(path.read_text()) if path.exists() else 0


PROBE = "import json; print(json.dumps({n: repr(globals().get(n)) for n in %s}))"
NAMES = ["base", "label", "scaled", "rng_draw", "total", "parts", "final"]


def probe(kernel: Kernel) -> dict[str, str]:
    out = kernel.run(PROBE % NAMES)
    assert out.status == "ok", out.error
    return json.loads(out.stdout)


def test_resume_after_sigkill_then_rerun_skips_the_finished_cells(tmp_path: Path) -> None:
    env = kernel_env(tmp_path)
    with Kernel(tmp_path, env) as kernel:
        assert kernel.run("%load_ext ipy_resume").status == "ok"
        for source in CELLS:
            assert kernel.run(source).status == "ok"
        before = probe(kernel)
        draw_before = kernel.run("print(np.random.rand())").stdout
        kill_during(kernel, LONG, tmp_path / "long-started")
        kernel.manager.restart_kernel(now=True)
        kernel.client.wait_for_ready(timeout=120)
        assert kernel.run("%load_ext ipy_resume").status == "ok"
        resumed = kernel.run("%resume")
        assert resumed.status == "ok", resumed.error
        assert "restored" in resumed.stdout and "summarise" in resumed.stdout
        after = probe(kernel)
        for name in ("base", "label", "scaled", "rng_draw", "total", "parts"):
            assert after[name] == before[name], name
        assert after["final"] == "None"  # the killed cell left nothing
        # The generators are where the last checkpoint left them.
        assert kernel.run("print(np.random.rand())").stdout == draw_before
        for source in [*CELLS, LONG.replace("time.sleep(120)", "time.sleep(0)")]:
            assert kernel.run(source).status == "ok"
    assert [marks(tmp_path, c) for c in ("prepare", "scale", "summarise")] == [1, 1, 1]
    assert marks(tmp_path, "long") == 2  # started, killed, then executed in full


LOOP = """%%checkpoint loop --seed 42
import json, os, time
import numpy as np
from ipy_resume import resumable
history = []
total = 0.0
for i in resumable(range(10), state=["history", "total"], every=1):
    with open(f"iter-{i}.json", "w") as fh:
        json.dump({"len": len(history), "total": total}, fh)
    if i == 7 and os.path.exists("hang-at-7"):
        time.sleep(120)
    x = float(np.random.rand())
    history.append(x)
    total += x
"""


def loop_run(tmp_path: Path, kill_at_7: bool) -> tuple[dict[int, dict[str, float]], str]:
    """Run LOOP in a kernel of its own; return per-iteration start states and final values."""
    hang = tmp_path / "hang-at-7"
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        kernel.run("%load_ext ipy_resume")
        if kill_at_7:
            hang.touch()
            kill_during(kernel, LOOP, tmp_path / "iter-7.json")
            hang.unlink()
            for stale in tmp_path.glob("iter-*.json"):
                stale.unlink()
            kernel.manager.restart_kernel(now=True)
            kernel.client.wait_for_ready(timeout=120)
            kernel.run("%load_ext ipy_resume")
        out = kernel.run(LOOP)
        assert out.status == "ok", out.error
        if kill_at_7:
            assert "resuming loop 0 of 'loop' at iteration 7 of 10" in out.stderr
        # The progress line: position, rate and the last save.
        assert re.search(r"loop 10/10 +[0-9.]+ it/s +last save at 10", out.stderr), out.stderr
        final = kernel.run("print(repr((history, total)))").stdout
    starts = {
        int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in tmp_path.glob("iter-*.json")
    }
    return starts, final


def test_loop_killed_in_iteration_7_resumes_at_7(tmp_path: Path) -> None:
    (tmp_path / "crashed").mkdir()
    (tmp_path / "clean").mkdir()
    crashed_starts, crashed_final = loop_run(tmp_path / "crashed", kill_at_7=True)
    clean_starts, clean_final = loop_run(tmp_path / "clean", kill_at_7=False)
    # After the restart only iterations 7, 8, 9 ran, and they began from the same state.
    assert sorted(crashed_starts) == [7, 8, 9]
    for i in (7, 8, 9):
        assert crashed_starts[i] == clean_starts[i]
    assert crashed_starts[7]["len"] == 7
    assert crashed_final == clean_final and crashed_final.strip()
