"""Counts of the reliability suite (kills, positions, detected, lost), shown in pytest's summary.

Tests call :func:`record`; the ``pytest_terminal_summary`` hook in conftest.py
calls :func:`summary`, so the figures appear in ``make test`` output without
``-s``.  When the tests run in several worker processes (``pytest -n``), each
record is also written to the folder named by :data:`FOLDER_ENV`, which the main
process made before the workers started, and the summary reads it from there.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

FOLDER_ENV = "IPY_RESUME_TEST_REPORTS"
_LINES: dict[str, str] = {}


def record(name: str, line: str) -> None:
    """Remember one line of figures under *name* (a later record replaces it)."""
    _LINES[name] = line
    folder = os.environ.get(FOLDER_ENV)
    if folder:
        path = Path(folder) / hashlib.sha256(name.encode()).hexdigest()[:16]
        path.write_text(f"{name}\n{line}", encoding="utf-8")


def _collected() -> dict[str, str]:
    lines = dict(_LINES)
    folder = os.environ.get(FOLDER_ENV)
    if folder and Path(folder).is_dir():
        for path in Path(folder).iterdir():
            name, _, line = path.read_text(encoding="utf-8").partition("\n")
            lines[name] = line
    return lines


def summary(terminalreporter: Any) -> None:
    """Write the recorded figures as their own section of the terminal summary."""
    lines = _collected()
    if not lines:
        return
    terminalreporter.write_sep("=", "ipy_resume reliability figures")
    for name in sorted(lines):
        terminalreporter.write_line(f"{name}: {lines[name]}")
