"""Drive a real IPython kernel through jupyter_client, as a notebook frontend does."""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager


@dataclass
class CellOutput:
    """What a frontend received for one executed cell."""

    status: str
    stdout: str = ""
    stderr: str = ""
    displays: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    comms: list[dict[str, Any]] = field(default_factory=list)  # comm_msg data sent meanwhile
    msg_id: str = ""  # of the execute request: what the cell's outputs name as their parent


class Kernel:
    """A real kernel process in *cwd* with its own environment.

    >>> with Kernel(tmp_path, env) as k:  # doctest: +SKIP
    ...     k.run("1 + 1").result["text/plain"]
    '2'
    """

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.manager = KernelManager(kernel_name="python3")
        self.cwd = cwd
        self.env = env

    def __enter__(self) -> Kernel:
        self.manager.start_kernel(cwd=str(self.cwd), env=self.env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)

    def restart(self) -> None:
        """Start the kernel process again (after it died) and wait until it answers."""
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=120)

    def kill(self, timeout: float = 30) -> None:
        """SIGKILL the kernel process (not its children: a forked writer lives on, as it
        would after a real crash) and wait until the manager sees it dead.

        >>> kernel.kill(); kernel.restart()  # doctest: +SKIP
        """
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while self.manager.is_alive():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the kernel did not die within {timeout} s of SIGKILL")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        provisioner = self.manager.provisioner
        assert provisioner is not None
        process = getattr(provisioner, "process", None)
        assert process is not None
        return int(process.pid)

    def run(
        self,
        code: str,
        timeout: float = 300,
        cell_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> CellOutput:
        """Execute *code* and collect everything the kernel sent back for it; *cell_id* is
        sent as JupyterLab sends it, in the request's metadata (with *metadata*)."""
        out = CellOutput(status="")
        session = self.client.session
        plain_msg = session.msg

        def with_cell_id(msg_type: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            msg: dict[str, Any] = plain_msg(msg_type, *args, **kwargs)
            if msg_type == "execute_request" and cell_id is not None:
                msg["metadata"]["cellId"] = cell_id
            if msg_type == "execute_request" and metadata:
                msg["metadata"].update(metadata)
            return msg

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    out.stdout += content["text"]
                else:
                    out.stderr += content["text"]
            elif kind == "display_data":
                out.displays.append(content["data"])
            elif kind == "execute_result":
                out.result = content["data"]
            elif kind == "error":
                out.error = content
            elif kind == "comm_msg":
                out.comms.append(content["data"])

        session.msg = with_cell_id  # type: ignore[method-assign]
        try:
            reply = self.client.execute_interactive(code, output_hook=hook, timeout=timeout)
        finally:
            session.msg = plain_msg  # type: ignore[method-assign]
        out.status = reply["content"]["status"]
        out.msg_id = reply["parent_header"]["msg_id"]
        return out

    def later_stderr(self, cell: CellOutput, until: str, timeout: float = 30) -> str:
        """The stderr the kernel sends under *cell* after it finished, up to a text holding
        *until* (what a frontend that keeps listening to a done cell shows in it)."""
        text = ""
        deadline = time.monotonic() + timeout
        while until not in text:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {until!r} under the cell within {timeout} s: {text!r}")
            try:
                msg = self.client.get_iopub_msg(timeout=left)
            except queue.Empty:
                continue
            parent = msg["parent_header"].get("msg_id")
            if msg["msg_type"] == "stream" and parent == cell.msg_id:
                text += msg["content"]["text"]
        return text


def kernel_env(tmp_path: Path) -> dict[str, str]:
    """The test's key directory and store, for a kernel process."""
    env = dict(os.environ)
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter-data")
    env["IPY_RESUME_DIR"] = str(tmp_path / "store")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env
