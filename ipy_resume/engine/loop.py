"""``resumable``: a long loop inside a ``%%checkpoint`` cell that survives a crash.

Every N iterations (or S seconds) the loop's named state, its position and the
RNG state are committed like any checkpoint, under the cell's key plus the
loop's index. When the same cell — same code, same inputs — runs again after a
crash, the loop restores that state and continues from the next iteration;
the finished cell then becomes an ordinary checkpoint.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

from ..runtime import file_deps
from ..runtime.capture import live_stderr
from ..runtime.units import format_timestamp
from ..store import StoreError
from . import restoring, rng
from .core import PREFIX, ActiveCell, active_cell

T = TypeVar("T")

_EVERY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)\s*$")
_UNIT_SECONDS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PROGRESS_INTERVAL_S = 1.0


def parse_every(every: int | str | tuple[int | str, ...]) -> tuple[int | None, float | None]:
    """Turn ``every`` into (iterations, seconds); either may be None.

    >>> parse_every(10), parse_every("90s"), parse_every((100, "5min"))
    ((10, None), (None, 90.0), (100, 300.0))
    """
    parts = every if isinstance(every, tuple) else (every,)
    count: int | None = None
    seconds: float | None = None
    for part in parts:
        if isinstance(part, bool):
            raise ValueError(
                f"resumable(every={every!r}): give a count like 10 or a time like '60s'"
            )
        if isinstance(part, int):
            if part < 1:
                raise ValueError(f"resumable(every={part}): the count must be at least 1")
            count = part
            continue
        match = _EVERY.match(str(part))
        if not match:
            raise ValueError(
                f"resumable(every={part!r}): use a count like 10 or a time like '60s', '5min', '1h'"
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return count, seconds


def resumable(
    iterable: Iterable[T],
    state: Sequence[str] = (),
    every: int | str | tuple[int | str, ...] = 1,
) -> Iterator[T]:
    """Iterate, saving *state* every *every* iterations so a crash resumes mid-way.

    Inside a ``%%checkpoint`` cell::

        for epoch in resumable(range(1000), state=["model", "history"], every=10):
            history.append(train_one_epoch(model))

    After a kernel crash, running the same cell again restores ``model`` and
    ``history`` and the RNG state as of the last save and continues with the
    next epoch. Outside a ``%%checkpoint`` cell it is a plain loop (with a note).

    >>> list(resumable(range(3)))
    [0, 1, 2]
    """
    if isinstance(state, str):
        state = [state]
    count, seconds = parse_every(every)
    cell = active_cell()
    if cell is None:
        yield from iterable
        return
    yield from _LoopRun(cell, iterable, list(state), count, seconds).run()


class _LoopRun:
    """One execution of one resumable loop."""

    def __init__(
        self,
        cell: ActiveCell,
        iterable: Iterable[Any],
        state: list[str],
        count: int | None,
        seconds: float | None,
    ) -> None:
        self.cell = cell
        self.iterable = iterable
        self.state = state
        self.count = count
        self.seconds = seconds
        self.index = cell.loops
        cell.loops += 1
        self.key = f"{cell.key}-loop{self.index}"
        self.total = _length(iterable)
        self.warned: set[str] = set()
        self.last_save_position: int | None = None
        self.last_save_time = time.monotonic()
        self.last_progress = 0.0
        self.last_progress_position: int | None = None

    def run(self) -> Iterator[Any]:
        start = self._resume()
        position = start
        started = time.monotonic()
        self.last_save_time = started
        for item in _skip(self.iterable, start):
            yield item
            position += 1  # the body of this iteration has finished
            if self._due(position):
                self._save(position)
            self._progress(position, start, started)
        self._progress(position, start, started, final=True)

    # ---- resume and save ------------------------------------------------------------------

    def _resume(self) -> int:
        store = self.cell.engine.store
        try:
            fresh = file_deps.FreshFiles()
            manifest = store.find(self.cell.cell_id, self.key, accept=fresh)
            if manifest is None:
                if fresh.first:
                    self._say(
                        f"{fresh.first}: the loop's saved progress is not used; it starts over."
                    )
                return 0
            loaded = restoring.load(store, manifest)
        except StoreError as exc:
            self._say(f"{exc}; the loop starts from the beginning.")
            return 0
        position = int(manifest.info.get("loop", {}).get("position", 0))
        restoring.apply(self.cell.namespace, store, loaded)
        values = loaded.values
        self.last_save_position = position
        of = f" of {self.total}" if self.total is not None else ""
        names = ", ".join(sorted(values)) or "no names"
        self._say(
            f"resuming loop {self.index} of '{self.cell.cell_id}' at iteration {position}{of} "
            f"(saved {format_timestamp(manifest.created)} UTC; restored {names})"
        )
        return position

    def _due(self, position: int) -> bool:
        if self.count is not None and position % self.count == 0:
            return True
        return self.seconds is not None and time.monotonic() - self.last_save_time >= self.seconds

    def _save(self, position: int) -> None:
        namespace = self.cell.namespace
        missing = [name for name in self.state if name not in namespace]
        if missing and "missing" not in self.warned:
            self.warned.add("missing")
            self._say(f"resumable state {', '.join(missing)} is not defined; it is not saved")
        values = {name: namespace[name] for name in self.state if name in namespace}
        info = {
            "kind": "loop",
            "loop": {"index": self.index, "position": position, "total": self.total},
            "session": self.cell.engine.session,
            "names": {},
        }
        files_read = self.cell.reads.identities() if self.cell.reads is not None else {}
        if files_read:  # resuming is only right while they are unchanged
            info["file_deps"] = files_read
        try:
            result = self.cell.engine.store.save(
                self.cell.cell_id, self.key, values, extras={"rng": rng.snapshot()}, info=info
            )
        except (StoreError, OSError) as exc:
            if "save" not in self.warned:
                self.warned.add("save")
                self._say(f"could not save loop progress ({exc}); the loop goes on unsaved")
            return
        if result.failed and "failed" not in self.warned:
            self.warned.add("failed")
            what = ", ".join(f"'{n}' ({r})" for n, r in sorted(result.failed.items()))
            self._say(f"loop progress cannot be saved: {what}; a crash would restart the loop")
        self.last_save_position = position
        self.last_save_time = time.monotonic()

    # ---- talking to the user -------------------------------------------------------------

    def _say(self, text: str) -> None:
        stream = live_stderr()
        stream.write(f"\n{PREFIX}{text}\n")
        stream.flush()

    def _progress(self, position: int, start: int, started: float, final: bool = False) -> None:
        now = time.monotonic()
        stream = live_stderr()
        if final and self.last_progress_position == position:
            stream.write("\n")  # the line already shows the end
            stream.flush()
            return
        if not final and now - self.last_progress < _PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        self.last_progress_position = position
        done = position - start
        rate = done / (now - started) if now > started else 0.0
        of = f"/{self.total}" if self.total is not None else ""
        if self.last_save_position is None:
            saved = "not saved yet"
        else:
            saved = f"last save at {self.last_save_position}, {now - self.last_save_time:.0f} s ago"
        stream.write(f"\r{PREFIX}loop {position}{of}  {rate:.2f} it/s  {saved}   ")
        if final:
            stream.write("\n")
        stream.flush()


def _length(iterable: Iterable[Any]) -> int | None:
    try:
        return len(iterable)  # type: ignore[arg-type]
    except TypeError:
        return None


def _skip(iterable: Iterable[Any], start: int) -> Iterator[Any]:
    """Iterate from position *start*; sequences are indexed, other iterables consumed."""
    if start == 0:
        return iter(iterable)
    if isinstance(iterable, (range, list, tuple)):
        return iter(iterable[start:])
    return islice(iter(iterable), start, None)
