"""Waiting in a test for something another thread or process does: a poll with a deadline.

A fixed sleep orders events only while the machine is fast enough; under load the other
side has not got there yet and the test fails for no reason. A poll waits exactly as long
as it takes, up to a deadline far above the normal case, and then fails saying what never
happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 60.0, *, what: str, every: float = 0.01
) -> T:
    """Call *predicate* until it returns something true, and return that.

    Raises ``AssertionError`` naming *what* (the awaited event, as "the writer to start")
    and the last value seen once *timeout* seconds have passed.

    >>> wait_until(lambda: [1], what="a non-empty list")
    [1]
    >>> wait_until(lambda: 0, 0.05, what="zero to turn true")
    Traceback (most recent call last):
    AssertionError: waited 0.05 s for zero to turn true; last saw 0
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; last saw {value!r}")
        time.sleep(every)
