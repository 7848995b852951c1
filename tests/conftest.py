"""Shared fixtures: a fresh IPython shell, store and signing key per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from ipy_resume.store import background

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private key directory and store, with the working directory in tmp_path."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("IPY_RESUME_DIR", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A moto S3 server on 127.0.0.1 for the tests of one module, stopped afterwards."""
    from s3_utils import moto_server

    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with moto_server(log) as server:
        yield server


@pytest.fixture
def s3_url(s3_server: Any, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://<new bucket>/team`` with credentials, endpoint and a private blob cache set."""
    from s3_utils import apply_env, s3_env

    apply_env(monkeypatch, s3_env(s3_server, isolated))
    return f"s3://{s3_server.bucket()}/team"


@pytest.fixture
def shell(isolated: Path) -> Iterator[InteractiveShell]:
    """A fresh InteractiveShell with ipy_resume loaded; never shared between tests."""
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(config=config)
    sh.run_line_magic("load_ext", "ipy_resume")
    # Saves are written in the background; these tests look at the store (files,
    # stderr) right after each cell, so each cell ends once its save is durable.
    sh.events.register("post_run_cell", lambda *_: background.flush())
    yield sh
    sh.history_manager.end_session()
    InteractiveShell.clear_instance()


def spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    """Wrap ``module.name`` so every call still runs it; returns the list of the first
    argument of each call (an observing wrapper, undone when the test ends).

    >>> seen = spy(monkeypatch, pending, "_load")  # doctest: +SKIP
    """
    seen: list[Any] = []
    real = getattr(module, name)

    def observed(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[0] if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, observed)
    return seen


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment for a child Python that shares this test's store and key."""
    env = dict(os.environ)
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter-data")
    env["IPY_RESUME_DIR"] = str(tmp_path / "store")
    env.update(extra)
    return env


def python_output(code: str, seed: str, cwd: Path) -> str:
    """Run *code* in a fresh interpreter with ``PYTHONHASHSEED=seed``; return its stdout."""
    import subprocess

    env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(cwd))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


_REPORTS = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """In the main process, a folder for the workers' reliability figures (``pytest -n``)."""
    import tempfile

    import reliability_report

    if not hasattr(config, "workerinput") and reliability_report.FOLDER_ENV not in os.environ:
        folder = tempfile.mkdtemp(prefix="ipy-resume-reports-")
        os.environ[reliability_report.FOLDER_ENV] = folder
        config.stash[_REPORTS] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    import reliability_report

    folder = config.stash.get(_REPORTS, None)  # (only the folder made above)
    if folder is not None:
        os.environ.pop(reliability_report.FOLDER_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show the reliability suite's figures (kills, positions, detected, lost) in every run."""
    import reliability_report

    reliability_report.summary(terminalreporter)
