"""The headless crash-and-resume story behind ``ipy-resume demo`` and ``make demo``.

A real kernel prepares data in a ``%%checkpoint`` cell and starts a training
loop wrapped in ``resumable``; the kernel is killed with SIGKILL half-way. A
fresh kernel runs ``%resume`` (the data is back without executing anything),
then the same training cell, which continues from the last saved epoch. The
final numbers are compared with an uninterrupted run, and a last "run all"
shows every cell restoring in a fraction of its run time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from ..store import location

PREPARE = textwrap.dedent(
    """\
    %%checkpoint prepare --seed 1
    import time
    import numpy as np
    time.sleep(1.5)                         # stands in for loading and cleaning data
    X = np.random.normal(size=(20_000, 50))
    y = X @ np.linspace(-1, 1, 50) + np.random.normal(scale=0.1, size=20_000)
    print(f"prepared {X.shape[0]} rows")
    """
)
TRAIN = textwrap.dedent(
    """\
    %%checkpoint train --seed 7
    import time
    import numpy as np
    from ipy_resume import resumable
    weights, losses = np.zeros(X.shape[1]), []
    for epoch in resumable(range(8), state=["weights", "losses"], every=1):
        time.sleep(0.5)                     # stands in for a slow epoch
        batch = np.random.choice(len(X), 512, replace=False)
        error = X[batch] @ weights - y[batch]
        weights -= 0.05 * X[batch].T @ error / len(batch)
        losses.append(float(np.mean(error ** 2)))
        print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)
    """
)
REFERENCE = textwrap.dedent(
    """\
    np.random.seed(7)
    w, ref = np.zeros(X.shape[1]), []
    for epoch in range(8):
        batch = np.random.choice(len(X), 512, replace=False)
        error = X[batch] @ w - y[batch]
        w -= 0.05 * X[batch].T @ error / len(batch)
        ref.append(float(np.mean(error ** 2)))
    print(np.array_equal(w, weights) and ref == losses)
    """
)
KILL_AFTER_EPOCH = 4


def _say(step: str, text: str) -> None:
    print(f"[{step:>8}] {text}", flush=True)


def _indent(text: str) -> str:
    # The loop's live progress line is for people watching; the story shows the rest.
    lines = [re.sub(r"ipy_resume: loop \d+/\d+ .*?ago\s*", "", line) for line in text.splitlines()]
    return textwrap.indent("\n".join(line for line in lines if line.strip()), " " * 11)


class _Kernel:
    """A real kernel through jupyter_client, quiet about its own log lines."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(workdir), env=env, stderr=subprocess.DEVNULL)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 300) -> tuple[str, float]:
        chunks: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                chunks.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                chunks.append("\n".join(msg["content"]["traceback"]))

        started = time.perf_counter()
        self.client.execute_interactive(code, output_hook=hook, timeout=timeout)
        return "".join(chunks), time.perf_counter() - started

    @property
    def pid(self) -> int:
        provisioner = self.manager.provisioner
        process = getattr(provisioner, "process", None)
        if process is None:
            raise RuntimeError("could not find the kernel process")
        return int(process.pid)

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def run_demo(workdir: Path | None = None) -> int:
    """Run the story; return a process exit code (0 when everything checked out).

    >>> run_demo()  # doctest: +SKIP
    0
    """
    try:
        import jupyter_client  # noqa: F401
    except ImportError:
        print(
            "ipy-resume demo needs jupyter_client and ipykernel: pip install jupyter_client ipykernel",
            file=sys.stderr,
        )
        return 2
    workdir = workdir or Path(tempfile.mkdtemp(prefix="ipy-resume-demo-"))
    env = location.kernel_env(workdir / ".ipy_resume", sync=False)
    _say("setup", f"working in {workdir} (store: .ipy_resume/)")

    kernel = _Kernel(workdir, env)
    kernel.run("%load_ext ipy_resume")
    _say("execute", "cell 'prepare' (slow data preparation) runs for the first time")
    text, prepare_time = kernel.run(PREPARE)
    print(_indent(text))
    _say(
        "execute",
        f"training loop 'train' starts; the kernel will be killed after epoch {KILL_AFTER_EPOCH}",
    )
    kernel.client.execute(TRAIN)
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            msg = kernel.client.get_iopub_msg(timeout=1)
        except Exception:
            continue
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            seen.append(msg["content"]["text"])
            if f"epoch {KILL_AFTER_EPOCH}:" in "".join(seen):
                break
    print(_indent("".join(seen)))
    time.sleep(0.25)  # inside the next epoch's work: its predecessor is saved by now
    pid = kernel.pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    _say("crash", f"kernel {pid} killed with SIGKILL in the middle of epoch {KILL_AFTER_EPOCH + 1}")
    kernel.close()

    kernel = _Kernel(workdir, env)
    ok = True
    try:
        _say("restart", "fresh kernel: %load_ext ipy_resume, then %resume")
        kernel.run("%load_ext ipy_resume")
        text, resume_time = kernel.run("%resume")
        print(_indent(text))
        _say(
            "resumed", f"data back in {resume_time:.2f} s (preparing it took {prepare_time:.2f} s)"
        )
        _say("continue", "running the same training cell again")
        text, _ = kernel.run(TRAIN)
        print(_indent(text))
        continued = f"at iteration {KILL_AFTER_EPOCH + 1} of 8" in text
        same, _ = kernel.run(REFERENCE)
        identical = same.strip() == "True"
        _say("check", f"loop continued after epoch {KILL_AFTER_EPOCH}: {continued}")
        _say("check", f"weights and losses identical to an uninterrupted run: {identical}")
        _say("run all", "running both cells once more: both restore instead of executing")
        _, again_prepare = kernel.run(PREPARE)
        _, again_train = kernel.run(TRAIN)
        _say(
            "restored",
            f"'prepare' in {again_prepare:.2f} s (ran {prepare_time:.2f} s), "
            f"'train' in {again_train:.2f} s (an epoch alone takes 0.5 s)",
        )
        ok = continued and identical and again_prepare < prepare_time
    finally:
        kernel.close()
    _say("done", "all checks passed" if ok else "SOMETHING DID NOT CHECK OUT")
    return 0 if ok else 1
