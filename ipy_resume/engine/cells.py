"""What one ``%%checkpoint`` run is made of: the options the user gave, the plan (its key
and the facts it came from), the run, what its checkpoint holds and what the engine did.

Plain data, shared by the engine (:mod:`.core`) and the modules that compute its parts
(:mod:`.content`, :mod:`.planning`, :mod:`.restoring`); the host protocol is how the
engine runs a cell and talks to the user without knowing IPython.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..fingerprint import Fingerprinter
from ..runtime.analysis import CellAnalysis
from ..runtime.capture import OutputRecord

__all__ = [
    "CheckpointOptions",
    "Content",
    "Host",
    "Outcome",
    "Phases",
    "Plan",
    "Ran",
    "RunResult",
    "show_status",
]


@dataclass
class CheckpointOptions:
    """What the user asked for on the ``%%checkpoint`` line.

    >>> CheckpointOptions("train", seed=3).cell_id
    'train'
    """

    cell_id: str
    force: bool = False
    inputs: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    outputs: list[str] | None = None
    deps: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    no_file_deps: bool = False  # do not record the files the cell reads
    seed: int | None = None
    no_seed: bool = False
    salt: str = ""
    explain: bool = False
    quiet: bool = False
    # store only when the run took at least this long (auto mode); faster runs are not saved
    min_seconds: float | None = None
    label: str | None = None  # how status lines name the cell (auto mode: its first line)
    map_location: str | None = None  # restore torch tensors on this device (magics applies it)

    @property
    def shown(self) -> str:
        """The cell as status lines name it.

        >>> CheckpointOptions("c1", label="df = load()").shown
        "cell 'df = load()'"
        """
        return f"cell '{self.label}'" if self.label else f"'{self.cell_id}'"


class Phases:
    """Where one ``Engine.run`` spent its time: seconds per step, in the order taken.

    Each :meth:`mark` closes the span since the previous one (or since the start) under its
    name; a name marked twice adds up.  Two clock reads a step: cheap enough to keep on.

    >>> p = Phases(); p.mark("plan"); list(p.spans)
    ['plan']
    """

    __slots__ = ("_last", "spans")

    def __init__(self) -> None:
        self.spans: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.spans[name] = self.spans.get(name, 0.0) + now - self._last
        self._last = now


@dataclass
class RunResult:
    """What one cell run produced: the cell's result value and its recorded output."""

    value: Any
    has_value: bool
    record: OutputRecord
    # how the front end showed the result (format data, metadata), replayed on a hit so the
    # output is the recorded one even where a repr holds a memory address
    shown: tuple[dict[str, Any], dict[str, Any]] | None = None


class Host(Protocol):
    """Executes a cell and shows things to the user; supplied by the adapter."""

    def run(self) -> RunResult:
        """Execute the cell body, streaming output live while recording it."""
        ...

    def replay(self, record: OutputRecord) -> None:
        """Show recorded output again."""
        ...

    def message(self, text: str) -> None:
        """Show one warning or error line (stderr): the user must always see it."""
        ...

    # Optional: ``status(text)`` shows a routine status line (restored, executed, the
    # reason for an execution). A host whose front end shows the outcome some other
    # way (a badge on the cell) may drop it; without the method, ``message`` shows it.
    # ``wants_reason`` (a bool attribute) asks for the reason of every execution, to
    # show it without ``--explain``.  ``waits_for_save`` (a bool attribute, default True)
    # False: a small save is not waited for; its cell says "saving" and the writer's line
    # "saved" follows under the cell (a Jupyter kernel, where a wait adds to every cell).


def show_status(host: Host, text: str) -> None:
    """Show a routine status line through *host*: its ``status`` when it has one.

    >>> class H:
    ...     def message(self, text): print("message:", text)
    >>> show_status(H(), "restored")
    message: restored
    """
    show = getattr(host, "status", None)
    if callable(show):
        show(text)
    else:
        host.message(text)


@dataclass
class Plan:
    """The key of one cell run and the facts it was derived from."""

    analysis: CellAnalysis | None
    key: str | None
    parts: dict[str, str]
    input_digests: dict[str, bytes]
    seed: int | None
    problem: str | None = None  # why no key could be made: the cell always executes
    stale: str | None = None  # a checkpoint has this key, but a file it read changed
    unusable: str | None = None  # a checkpoint has this key, but it failed to load (said)


@dataclass
class Outcome:
    """What ``Engine.run`` did, for callers that want more than the result value."""

    status: str  # one of journal.OUTCOMES
    checkpoint_id: str | None = None
    names: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    duration: float = 0.0  # run time (executed) or restore time (restored)
    saved: float = 0.0  # time a restore saved
    io: float = 0.0  # save or load time
    bytes: int = 0
    detail: str = ""
    reason: str = ""  # why the cell executed instead of restoring, in words


@dataclass
class Ran:
    """One execution of a cell, and the state before it that the save compares with."""

    result: RunResult
    duration: float
    before: set[str]  # the names the cell binds that were bound before the run
    settings_before: dict[str, Any]
    reached: dict[str, bytes]  # see content.reached_state
    rng_state: dict[str, Any]
    files_read: dict[str, list[dict[str, Any]]]
    files_written: list[str]
    files_removed: list[str]
    # ``from m import *`` binds names the code does not list: what each name held before
    starred: dict[str, Any] | None = None


@dataclass
class Content:
    """What one checkpoint holds, as :meth:`Store.save` takes it."""

    names: list[str]
    values: dict[str, Any]
    extras: dict[str, Any]
    info: dict[str, Any]
    missing_files: dict[str, str]  # files named with --files that could not be read
    # the fingerprints of the cell's inputs and outputs as they are now, by name
    current: dict[str, bytes] = field(default_factory=dict)
    fingerprinter: Fingerprinter | None = None  # that took them (its memo, for the save)
    # outputs whose fingerprints the store takes (name -> function): large arrays of a
    # staged save, digested by its writer after the cell returned (see store.late)
    late: dict[str, Callable[[object], str | None]] = field(default_factory=dict)
