"""The timeline widget's kernel side: its synced snapshot, its requests, its live refresh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ipy_resume.frontends import comm
from ipy_resume.frontends.widget import _FRONTEND, TimelineWidget, timeline_widget


class Sent:
    """Stands in for the front end: records what the widget sends it."""

    def __init__(self, widget: TimelineWidget, monkeypatch: pytest.MonkeyPatch) -> None:
        self.messages: list[dict[str, Any]] = []
        monkeypatch.setattr(
            widget, "send", lambda content, buffers=None: self.messages.append(content)
        )


def test_widget_shows_restores_and_follows_the_store(
    isolated: Path, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell.run_cell("%%checkpoint first\nx = 10\n")
    shell.run_cell("%%checkpoint second\nx = x + 5\ny = 'later'\n")
    widget = timeline_widget()
    assert isinstance(widget, TimelineWidget)
    assert Path(widget.store) == (isolated / "store").resolve()
    events = widget.snapshot["events"]
    assert [e["cell_id"] for e in events] == ["first", "second"]
    # The front end module and stylesheet exist, so the widget can render.
    assert "export" in (_FRONTEND / "widget.js").read_text()
    assert ".ipr-timeline" in (_FRONTEND / "widget.css").read_text()

    front = Sent(widget, monkeypatch)
    widget._on_custom(widget, {"id": 1, "request": "details", "target": "first"}, [])
    assert front.messages[-1]["id"] == 1 and front.messages[-1]["data"]["cell_id"] == "first"

    widget._on_custom(widget, {"id": 2, "request": "restore", "target": "first"}, [])
    reply = front.messages[-1]
    assert reply["id"] == 2 and "x" in reply["data"]["restored"], reply
    assert shell.user_ns["x"] == 10 and "y" not in shell.user_ns

    widget._on_custom(widget, {"id": 3, "request": "restore", "target": "missing"}, [])
    assert "no checkpoint matches 'missing'" in front.messages[-1]["error"]

    # A new checkpoint reaches the widget by itself (a post-run hook calls notify_changed).
    before = len(widget.snapshot["events"])
    shell.run_cell("%%checkpoint third\nz = 3\n")
    cells = [e["cell_id"] for e in widget.snapshot["events"]]
    assert len(cells) > before and cells[-1] == "third"

    # Plain cells do not make it re-read the store; an explicit notify still works.
    shell.run_cell("w = 1")
    assert len(widget.snapshot["events"]) == len(cells)
    assert comm.notify_changed(shell) == 0  # no comm attached: only the widget refreshed

    widget._on_custom(widget, {"id": 4, "request": "refresh"}, [])
    assert front.messages[-1] == {"id": 4, "request": "refresh", "data": {}}


def test_widget_of_a_store_that_does_not_exist(tmp_path: Path) -> None:
    widget = TimelineWidget(store=tmp_path / "nothing-here")
    assert widget.snapshot["exists"] is False and widget.snapshot["events"] == []
    assert not (tmp_path / "nothing-here").exists()
