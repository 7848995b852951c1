"""Counts of the reliability suite (kills, positions, detected, lost), shown in pytest's summary.

Tests call :func:`record`; the ``pytest_terminal_summary`` hook in conftest.py
calls :func:`summary`, so the figures appear in ``make test`` output without
``-s``.
"""

from __future__ import annotations

from typing import Any

_LINES: dict[str, str] = {}


def record(name: str, line: str) -> None:
    """Remember one line of figures under *name* (a later record replaces it)."""
    _LINES[name] = line


def summary(terminalreporter: Any) -> None:
    """Write the recorded figures as their own section of the terminal summary."""
    if not _LINES:
        return
    terminalreporter.write_sep("=", "ipy_resume reliability figures")
    for name in sorted(_LINES):
        terminalreporter.write_line(f"{name}: {_LINES[name]}")
