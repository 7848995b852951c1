"""The headless crash-and-resume story behind ``ipy-resume demo`` and ``make demo``.

A real kernel runs an expensive ``%%checkpoint`` cell, starts a second one and
is killed with SIGKILL half-way; a fresh kernel then runs the same cells and
gets the first one back in a fraction of the time. Every step is printed with
its timing, so a terminal user sees the point in one command.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

SLOW_CELL = textwrap.dedent(
    """\
    %%checkpoint train
    import time
    import numpy as np
    weights = np.zeros(2_000_000)
    for epoch in range(5):
        time.sleep(0.6)                      # stands in for real work
        weights += np.random.normal(size=weights.shape) / (epoch + 1)
        print(f"epoch {epoch}: loss {np.abs(weights).mean():.4f}")
    loss = float(np.abs(weights).mean())
    """
)
DOOMED_CELL = "%%checkpoint evaluate\nimport time\ntime.sleep(60)\nscore = loss * 2\n"
DRAW_CELL = "print('next draw', np.random.rand())"


def _say(step: str, text: str) -> None:
    print(f"[{step:>8}] {text}", flush=True)


def run_demo(workdir: Path | None = None) -> int:
    """Run the story; return a process exit code (0 when it went as it should).

    >>> run_demo()  # doctest: +SKIP
    0
    """
    try:
        from jupyter_client.manager import KernelManager
    except ImportError:
        print(
            "ipy-resume demo needs jupyter_client and ipykernel: pip install jupyter_client ipykernel",
            file=sys.stderr,
        )
        return 2
    workdir = workdir or Path(tempfile.mkdtemp(prefix="ipy-resume-demo-"))
    env = dict(os.environ)
    env["IPY_RESUME_DIR"] = str(workdir / ".ipy_resume")
    _say("setup", f"working in {workdir}")

    def start() -> tuple[Any, Any]:
        manager = KernelManager(kernel_name="python3")
        manager.start_kernel(cwd=str(workdir), env=env)
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        return manager, client

    def run(client: Any, code: str, timeout: float = 120) -> tuple[str, float]:
        chunks: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                chunks.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                chunks.append("\n".join(msg["content"]["traceback"]))

        started = time.perf_counter()
        client.execute_interactive(code, output_hook=hook, timeout=timeout)
        return "".join(chunks), time.perf_counter() - started

    manager, client = start()
    run(client, "%load_ext ipy_resume")
    _say("execute", "running the expensive cell 'train' for the first time …")
    text, executed = run(client, SLOW_CELL)
    print(textwrap.indent(text.rstrip(), " " * 11))
    loss_before, _ = run(client, "print(loss)")
    draw_before, _ = run(client, DRAW_CELL)
    _say("execute", f"'train' took {executed:.2f} s")

    _say("crash", "starting 'evaluate' and killing the kernel with SIGKILL after 1 s")
    client.execute(DOOMED_CELL)
    time.sleep(1.0)
    provisioner = manager.provisioner
    pid = provisioner.process.pid if provisioner is not None and provisioner.process else None
    if pid is None:
        print("could not find the kernel process", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    _say("crash", f"kernel {pid} killed; everything in its memory is gone")
    client.stop_channels()
    manager.shutdown_kernel(now=True)

    manager, client = start()
    try:
        _say("restart", "fresh kernel; running the same cells again")
        run(client, "%load_ext ipy_resume")
        text, restored = run(client, SLOW_CELL)
        print(textwrap.indent(text.rstrip(), " " * 11))
        loss_after, _ = run(client, "print(loss)")
        draw_after, _ = run(client, DRAW_CELL)
        same = loss_before == loss_after
        same_draw = draw_before == draw_after
        _say(
            "restored",
            f"'train' came back in {restored:.2f} s instead of {executed:.2f} s "
            f"({executed / max(restored, 1e-9):.0f}x faster)",
        )
        _say("check", f"loss identical: {same}; next random draw identical: {same_draw}")
        return 0 if same and same_draw and restored < executed else 1
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
