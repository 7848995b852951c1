"""The panel's channel, driven as JupyterLab drives it: comm messages to a real kernel."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from kernel_utils import Kernel, kernel_env

from ipy_resume.frontends import comm

FIRST = "%%checkpoint first\nx = 10\nprint('first ran')\n"
SECOND = "%%checkpoint second\nx = x + 5\ny = [1, 2, 3]\n"


class CommProbe:
    """A frontend's end of one comm: open it, send requests, read what comes back."""

    def __init__(self, kernel: Kernel) -> None:
        self.client = kernel.client
        self.comm_id = uuid.uuid4().hex
        self.pushes: list[dict[str, Any]] = []

    def _roundtrip(self, msg_type: str, content: dict[str, Any]) -> list[dict[str, Any]]:
        """Send one shell message; every IOPub message for this comm until the kernel is idle."""
        msg = self.client.session.msg(msg_type, content)
        self.client.shell_channel.send(msg)
        seen: list[dict[str, Any]] = []
        while True:
            reply = self.client.get_iopub_msg(timeout=60)
            parent = reply["parent_header"].get("msg_id")
            if reply["msg_type"] in ("comm_msg", "comm_close"):
                if reply["content"].get("comm_id") == self.comm_id:
                    seen.append(reply)
            elif (
                reply["msg_type"] == "status"
                and parent == msg["header"]["msg_id"]
                and reply["content"]["execution_state"] == "idle"
            ):
                return seen

    def open(self, target: str = comm.TARGET) -> list[dict[str, Any]]:
        return self._roundtrip(
            "comm_open", {"comm_id": self.comm_id, "target_name": target, "data": {}}
        )

    def request(self, **data: Any) -> dict[str, Any]:
        data.setdefault("id", 1)
        seen = self._roundtrip("comm_msg", {"comm_id": self.comm_id, "data": data})
        replies = [m["content"]["data"] for m in seen if m["msg_type"] == "comm_msg"]
        answers = [r for r in replies if r.get("id") == data["id"]]
        self.pushes += [r for r in replies if r.get("event") == "changed"]
        assert len(answers) == 1, replies
        return answers[0]


def _run_ok(kernel: Kernel, code: str) -> Any:
    out = kernel.run(code)
    assert out.status == "ok", out.error
    return out


def test_kernel_without_the_extension_closes_the_comm(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        seen = CommProbe(kernel).open()
    kinds = [m["msg_type"] for m in seen]
    assert kinds == ["comm_close"], kinds


def test_open_snapshot_details_restore(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        _run_ok(kernel, "%load_ext ipy_resume")
        _run_ok(kernel, "%load_ext ipy_resume")  # twice is harmless for the target too
        assert "first ran" in _run_ok(kernel, FIRST).stdout
        _run_ok(kernel, SECOND)
        _run_ok(kernel, "%checkpoint wait")  # (a kernel's cell returns before its save is durable)
        probe = CommProbe(kernel)
        hello = probe.open()
        assert [m["msg_type"] for m in hello] == ["comm_msg"]
        assert hello[0]["content"]["data"]["event"] == "hello"

        snap = probe.request(id=1, request="snapshot")
        assert snap["id"] == 1 and "error" not in snap, snap
        data = snap["data"]
        assert data["exists"] is True
        assert Path(data["store"]) == (tmp_path / "store").resolve()
        events = data["events"]
        assert [e["cell_id"] for e in events] == ["first", "second"]
        assert [e["outcome"] for e in events] == ["executed", "executed"]
        assert data["last_seq"] == events[-1]["seq"]
        assert data["summary"]["checkpoints"] == 2
        json.dumps(data)  # what the frontend parses

        after = probe.request(id=2, request="snapshot", after=events[0]["seq"])["data"]
        assert [e["cell_id"] for e in after["events"]] == ["second"]

        first_id = events[0]["checkpoint_id"]
        details = probe.request(id=3, request="details", target="first")["data"]
        assert details["id"] == first_id and details["cell_id"] == "first"
        assert "x" in details["names"]

        restored = probe.request(id=4, request="restore", target=first_id)
        assert "error" not in restored, restored
        assert "x" in restored["data"]["restored"]
        assert "y" in restored["data"]["removed"]
        assert _run_ok(kernel, "x").result == {"text/plain": "10"}
        assert _run_ok(kernel, "'y' in globals()").result == {"text/plain": "False"}


def test_errors_come_back_as_one_line(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        _run_ok(kernel, "%load_ext ipy_resume")
        _run_ok(kernel, FIRST)
        probe = CommProbe(kernel)
        probe.open()
        cases = {
            "unknown": ({"request": "explode"}, "unknown request 'explode'"),
            "no target": ({"request": "details"}, "needs a 'target'"),
            "bad target": (
                {"request": "restore", "target": "nope"},
                "no checkpoint matches 'nope'",
            ),
            "bad after": ({"request": "snapshot", "after": "3"}, "'after' must be an integer"),
        }
        for i, (data, expected) in enumerate(cases.values(), start=10):
            reply = probe.request(id=i, **data)
            assert reply["id"] == i
            assert expected in reply.get("error", ""), reply
            assert "\n" not in reply["error"]
            assert "data" not in reply
        # After all those errors the channel still answers, and x was never touched.
        assert probe.request(id=99, request="snapshot")["data"]["summary"]["checkpoints"] == 1
        assert _run_ok(kernel, "x").result == {"text/plain": "10"}


def test_a_store_that_does_not_exist(tmp_path: Path) -> None:
    env = kernel_env(tmp_path)
    env["IPY_RESUME_DIR"] = str(tmp_path / "never-made")
    with Kernel(tmp_path, env) as kernel:
        _run_ok(kernel, "%load_ext ipy_resume")
        probe = CommProbe(kernel)
        probe.open()
        data = probe.request(id=1, request="snapshot")["data"]
        assert data["exists"] is False
        assert data["events"] == [] and data["last_seq"] is None
        assert data["summary"]["checkpoints"] == 0
        error = probe.request(id=2, request="details", target="train")["error"]
        assert "train" in error
    assert not (tmp_path / "never-made").exists()  # reading never creates a store


def test_notify_changed_pushes_new_events(tmp_path: Path) -> None:
    with Kernel(tmp_path, kernel_env(tmp_path)) as kernel:
        _run_ok(kernel, "%load_ext ipy_resume")
        # No frontend yet: nothing to tell, and nothing breaks.
        out = _run_ok(kernel, "import ipy_resume.frontends.comm as c; c.notify_changed()")
        assert out.result == {"text/plain": "0"} and out.stdout == out.stderr == ""
        _run_ok(kernel, FIRST)
        _run_ok(kernel, "%checkpoint wait")  # (its event is written once it is durable)
        probe = CommProbe(kernel)
        probe.open()
        seq = probe.request(id=1, request="snapshot")["data"]["last_seq"]
        _run_ok(kernel, SECOND)
        # (a kernel's cell returns before its save is durable: the engine tells the panel
        # when it is, at the latest when the next cell drains the writer's news)
        _run_ok(kernel, "%checkpoint wait")
        # Whether or not the engine already pushed, an explicit call must push only what is new.
        probe.pushes.clear()
        msg = probe.client.session.msg(
            "execute_request",
            {"code": "sent = c.notify_changed()", "silent": False, "store_history": False},
        )
        probe.client.shell_channel.send(msg)
        pushes: list[dict[str, Any]] = []
        while True:
            reply = probe.client.get_iopub_msg(timeout=60)
            if reply["msg_type"] == "comm_msg" and reply["content"]["comm_id"] == probe.comm_id:
                pushes.append(reply["content"]["data"])
            if (
                reply["msg_type"] == "status"
                and reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]
                and reply["content"]["execution_state"] == "idle"
            ):
                break
        assert _run_ok(kernel, "sent").result == {"text/plain": "1"}
        assert len(pushes) == 1 and pushes[0]["event"] == "changed"
        new = pushes[0]["events"]
        # Either the engine pushed 'second' already (then nothing is new) or we push it now.
        assert all(e["seq"] > seq for e in new)
        assert pushes[0]["last_seq"] >= seq + 1
        assert pushes[0]["summary"]["checkpoints"] == 2
        assert pushes[0]["unavailable"] == []  # nothing collected yet


def test_handle_request_in_process(tmp_path: Path, shell: InteractiveShell) -> None:
    """The same dispatcher the widget uses, without a kernel."""
    shell.run_cell(FIRST)
    reply = comm.handle_request({"id": "a", "request": "snapshot"}, shell.user_ns)
    assert reply["id"] == "a" and [e["cell_id"] for e in reply["data"]["events"]] == ["first"]
    assert comm.handle_request(["not", "a", "dict"], shell.user_ns)["error"]
    # A plain terminal shell has no kernel: no target, and notify is a no-op.
    assert comm.register(shell) is False
    assert comm.notify_changed(shell) == 0


@pytest.mark.parametrize("bad", [True, 1.5, "7"])
def test_after_must_be_an_integer(bad: Any, shell: InteractiveShell) -> None:
    reply = comm.handle_request({"id": 1, "request": "snapshot", "after": bad}, shell.user_ns)
    assert "'after' must be an integer" in reply["error"]
