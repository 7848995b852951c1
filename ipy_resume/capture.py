"""Record what a cell prints and displays while it still reaches the user live.

The recording is a list of events in the order they happened, so a replay
interleaves stdout, stderr and rich output exactly as the first run did. This
module knows nothing of IPython: the display side is a pair of callables the
adapter supplies.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TextIO

# One event: ("stdout"|"stderr", text) | ("display", payload dict) | ("clear", {"wait": bool})
Event = tuple[str, Any]

# The real (stdout, stderr) of each active tee, innermost last.
_live: list[tuple[TextIO, TextIO]] = []


@dataclass
class OutputRecord:
    """Everything a cell emitted, in order.

    >>> r = OutputRecord(); r.add_stream("stdout", "a"); r.add_stream("stdout", "b"); r.events
    [('stdout', 'ab')]
    """

    events: list[Event] = field(default_factory=list)

    def add_stream(self, name: str, text: str) -> None:
        """Append stream text, merging with the previous event of the same stream."""
        if not text:
            return
        if self.events and self.events[-1][0] == name:
            self.events[-1] = (name, self.events[-1][1] + text)
        else:
            self.events.append((name, text))

    def add_display(self, payload: dict[str, Any]) -> None:
        """Append one rich display message (data, metadata, transient, update)."""
        self.events.append(("display", payload))

    def add_clear(self, wait: bool) -> None:
        """Append a ``clear_output`` request."""
        self.events.append(("clear", {"wait": wait}))

    def text(self, name: str = "stdout") -> str:
        """All text written to one stream.

        >>> r = OutputRecord([("stdout", "x"), ("stderr", "e"), ("stdout", "y")]); r.text()
        'xy'
        """
        return "".join(value for kind, value in self.events if kind == name)


class StreamTee:
    """A text stream that forwards every write to *target* and records it."""

    def __init__(self, target: TextIO, name: str, record: OutputRecord) -> None:
        self._target = target
        self._name = name
        self._record = record

    def write(self, text: str) -> int:
        self._record.add_stream(self._name, text)
        return self._target.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> Any:
        # encoding, isatty, fileno and friends belong to the real stream.
        return getattr(self._target, name)


@contextmanager
def tee_streams(record: OutputRecord) -> Iterator[OutputRecord]:
    """Tee ``sys.stdout`` and ``sys.stderr`` into *record* for the duration.

    >>> rec = OutputRecord()
    >>> with tee_streams(rec):
    ...     print("hi")
    hi
    >>> rec.text()
    'hi\\n'
    """
    saved = sys.stdout, sys.stderr
    _live.append(saved)
    sys.stdout = StreamTee(saved[0], "stdout", record)
    sys.stderr = StreamTee(saved[1], "stderr", record)
    try:
        yield record
    finally:
        for stream in (sys.stdout, sys.stderr):
            # A closed user stream must not mask the cell's own error.
            with suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = saved
        _live.pop()


def live_stderr() -> TextIO:
    """The stderr the user sees, bypassing any recording: for progress lines.

    Progress is about *this* run; replaying it on a restore would be noise.

    >>> live_stderr() is sys.stderr
    True
    """
    return _live[-1][1] if _live else sys.stderr


def replay(
    record: OutputRecord,
    publish: Callable[[dict[str, Any]], None] | None = None,
    clear: Callable[[bool], None] | None = None,
) -> None:
    """Emit a recorded cell's output again, in its original order.

    Display events go to *publish* (skipped when it is None, e.g. outside IPython).

    >>> replay(OutputRecord([("stdout", "again\\n")]))
    again
    """
    for kind, value in record.events:
        if kind == "stdout":
            sys.stdout.write(value)
        elif kind == "stderr":
            sys.stderr.write(value)
        elif kind == "display" and publish is not None:
            publish(value)
        elif kind == "clear" and clear is not None:
            clear(bool(value.get("wait", False)))
    sys.stdout.flush()
    sys.stderr.flush()
