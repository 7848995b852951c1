"""The engine's lines about saves: what failed, what a slot is, how long something took."""

from __future__ import annotations

from ..store import SaveError, StoreError
from .cells import CheckpointOptions

__all__ = ["save_failure", "seconds", "stored_as"]


def save_failure(opts: CheckpointOptions, exc: BaseException, listed: str) -> str:
    """The line that says a save failed and that the values are still in the kernel.

    >>> save_failure(CheckpointOptions("c1"), OSError("disk full"), "x")
    "could not save checkpoint 'c1': disk full. Your results are still in the kernel (x); nothing was saved."
    """
    if isinstance(exc, SaveError):
        return f"{exc} Kept in the kernel: {listed}."
    if not isinstance(exc, (StoreError, OSError)):
        return (
            f"could not save checkpoint {opts.shown} ({type(exc).__name__}: {exc}). "
            f"Your results are still in the kernel ({listed}); nothing was saved."
        )
    return (
        f"could not save checkpoint {opts.shown}: {exc}. "
        f"Your results are still in the kernel ({listed}); nothing was saved."
    )


_EXTRAS_SAID = {
    "result": "the cell's result (its Out value)",
    "shown": "the cell's displayed result",
    "outputs": "the cell's output",
    "rng": "the random generators' state",
    "settings": "the library settings it changed",
    "files": "the files it wrote",
}


def stored_as(slot: str) -> str:
    """What a slot of a save is, in the user's words: ``'x'``, ``file 'a.csv'``, ...

    >>> stored_as("x"), stored_as("extra:result"), stored_as("file:out.csv")
    ("'x'", "the cell's result (its Out value)", "file 'out.csv'")
    """
    if slot.startswith("extra:"):
        return _EXTRAS_SAID.get(slot[6:], f"its {slot[6:]}")
    if slot.startswith("file:"):
        return f"file '{slot[5:]}'"
    return f"'{slot}'"


def seconds(value: float) -> str:
    """A duration as a user reads it.

    >>> seconds(0.25), seconds(3.0), seconds(600.0)
    ('250 ms', '3.0 s', '10.0 min')
    """
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"
