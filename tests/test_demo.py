"""``ipy-resume demo``: the headless crash-and-resume story checks itself and says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

pytestmark = pytest.mark.slow


def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipy_resume.frontends.cli", "demo", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for step in (
        "[ execute]",
        "[   crash]",
        "[ restart]",
        "[ resumed]",
        "[continue]",
        "[restored]",
    ):
        assert step in out
    assert "killed with SIGKILL" in out
    assert "resuming loop 0 of 'train' at iteration 5 of 8" in out
    assert "identical to an uninterrupted run: True" in out
    assert "all checks passed" in out
    assert (tmp_path / ".ipy_resume" / "journal.sqlite").exists()
