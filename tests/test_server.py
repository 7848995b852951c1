"""The read-only timeline handlers, in a real `jupyter server` process.

The store is made by a real kernel started in the notebook's folder, exactly
as JupyterLab starts one, so the server must find the same store the kernel used.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kernel_utils import Kernel

from ipy_resume.frontends.server import StorePathError, store_for

TOKEN = "ipy-resume-test-token"


@dataclass
class Server:
    url: str
    root: Path

    def get(self, endpoint: str, token: str | None = TOKEN, **query: Any) -> tuple[int, Any]:
        url = f"{self.url}ipy-resume/{endpoint}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"token {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            body = err.read()
            try:
                return err.code, json.loads(body)
            except ValueError:
                return err.code, body.decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("server")
    root = base / "root"
    (root / "exp").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "exp" / "analysis.ipynb").write_text("{}")
    env = dict(os.environ)
    env["JUPYTER_DATA_DIR"] = str(base / "jupyter-data")
    env.pop("IPY_RESUME_DIR", None)
    env.pop("PYTEST_CURRENT_TEST", None)

    # The kernel runs in the notebook's folder with no IPY_RESUME_DIR: .ipy_resume/ there.
    with Kernel(root / "exp", env) as kernel:
        for cell in (
            "%load_ext ipy_resume",
            "%%checkpoint first\nx = 10\n",
            "%%checkpoint second\nx = x + 5\ny = 'hello'\n",
            "%checkpoint wait",  # (a kernel's cell returns before its save is durable)
        ):
            assert kernel.run(cell).status == "ok"
    assert (root / "exp" / ".ipy_resume").is_dir()

    port = _free_port()
    log = (base / "server.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={TOKEN}",
            "--ServerApp.allow_root=True",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}api/status?token={TOKEN}", timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail((base / "server.log").read_text())
            time.sleep(0.2)
    try:
        yield Server(url, root)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_timeline_of_a_notebook_store(server: Server) -> None:
    status, data = server.get("timeline", path="exp/analysis.ipynb")
    assert status == 200, data
    assert data["exists"] is True
    assert Path(data["store"]) == (server.root / "exp" / ".ipy_resume").resolve()
    assert [e["cell_id"] for e in data["events"]] == ["first", "second"]
    assert all(e["outcome"] == "executed" for e in data["events"])
    assert data["summary"]["checkpoints"] == 2
    assert data["last_seq"] == data["events"][-1]["seq"]

    first_seq = data["events"][0]["seq"]
    status, page = server.get("timeline", path="exp/analysis.ipynb", after=first_seq, limit=5)
    assert status == 200 and [e["cell_id"] for e in page["events"]] == ["second"]
    # A folder path works as well as a notebook path.
    assert server.get("timeline", path="exp")[1]["events"] == data["events"]


def test_reading_changes_nothing(server: Server) -> None:
    store = server.root / "exp" / ".ipy_resume"
    before = sorted(p.relative_to(store) for p in store.rglob("*") if "journal" not in p.name)
    for _ in range(3):
        assert server.get("timeline", path="exp/analysis.ipynb")[0] == 200
        assert server.get("details", path="exp/analysis.ipynb", target="first")[0] == 200
    after = sorted(p.relative_to(store) for p in store.rglob("*") if "journal" not in p.name)
    assert before == after


def test_a_store_that_does_not_exist(server: Server) -> None:
    for path in ("other/new.ipynb", "not-a-folder/nb.ipynb", ""):
        status, data = server.get("timeline", path=path)
        assert status == 200, data
        assert data["exists"] is False and data["events"] == [] and data["last_seq"] is None
        assert data["summary"]["checkpoints"] == 0
    assert not (server.root / "other" / ".ipy_resume").exists()
    assert not (server.root / "not-a-folder").exists()
    status, data = server.get("details", path="other/new.ipynb", target="first")
    assert status == 404 and "no checkpoint store" in data["error"]


def test_details(server: Server) -> None:
    status, data = server.get("details", path="exp/analysis.ipynb", target="first")
    assert status == 200, data
    assert data["cell_id"] == "first" and "x" in data["names"]
    status, data = server.get("details", path="exp/analysis.ipynb", target="nope")
    assert status == 404 and "no checkpoint matches 'nope'" in data["error"]
    status, data = server.get("details", path="exp/analysis.ipynb")
    assert status == 400 and "'target' is required" in data["error"]


def test_bad_requests(server: Server) -> None:
    status, data = server.get("timeline", path="../../etc/passwd")
    assert status == 403 and "outside the server's root" in data["error"]
    status, data = server.get("timeline", path="exp/analysis.ipynb", after="abc")
    assert status == 400 and "'after' must be an integer" in data["error"]
    status, _ = server.get("timeline", token=None, path="exp/analysis.ipynb")
    assert status == 403


def test_store_for(tmp_path: Path) -> None:
    (tmp_path / "exp").mkdir()
    assert store_for(tmp_path, "exp/a.ipynb", env={}) == tmp_path.resolve() / "exp" / ".ipy_resume"
    assert store_for(tmp_path, "/exp/", env={}) == tmp_path.resolve() / "exp" / ".ipy_resume"
    relative = store_for(tmp_path, "exp/a.ipynb", env={"IPY_RESUME_DIR": "../shared"})
    assert relative == tmp_path.resolve() / "shared"
    absolute = store_for(tmp_path, "exp/a.ipynb", env={"IPY_RESUME_DIR": "/data/store"})
    assert absolute == Path("/data/store")
    with pytest.raises(StorePathError):
        store_for(tmp_path, "../x.ipynb", env={})
