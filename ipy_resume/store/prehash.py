"""Blob addresses of a save's large arrays, hashed on a helper thread ahead of the save.

After a cell returns, the kernel hashes each large output twice before the cell is done: once
for its fingerprint (what a later cell's key takes) and once for its blob's address (the xxh3
of the HDF5 file the array becomes, which names the blob).  The two are different digests of
the same bytes, and xxh3 releases the GIL, so :func:`start` hashes the blob on a helper thread
while the kernel fingerprints, and the writer takes the result with :func:`address`: on two
cores the two passes cost about one.

Nothing runs the user's code between the two, so the bytes hashed are the bytes written.  Were
they changed all the same, the blob would not match its address, and a read verifies every
blob against it before use: the checkpoint would fail verification, never restore other bytes.

>>> import numpy as np
>>> y = np.ones(1 << 21)
>>> start([y]); address(plan_array(y)) == blobs.digest(XXH3, plan_array(y).chunks())
1
True
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ipy_resume.store import blobs
from ipy_resume.store.arrays import ArrayPlan, plan_array
from ipy_resume.store.blobs import XXH3

__all__ = ["MIN_BYTES", "address", "clear", "start"]

MIN_BYTES = 8 << 20
"""Arrays this large are hashed ahead: below it, a thread's hand-off costs more than it saves."""

_Key = tuple[int, int, bytes, bytes]
_lock = threading.Lock()
_ahead: dict[_Key, Future[str]] = {}
_pool: ThreadPoolExecutor | None = None


def _key(plan: ArrayPlan) -> _Key:
    # The memory and the layout around it: the same array planned twice gives the same key.
    pointer = np.frombuffer(plan.data, np.uint8).__array_interface__["data"][0]
    return (pointer, plan.data.nbytes, bytes(plan.head), bytes(plan.tail))


def _digest(plan: ArrayPlan) -> str:
    return blobs.digest(XXH3, plan.chunks())


def start(values: Iterable[object]) -> int:
    """Hash the blob of each large array among *values* on the helper thread; how many.

    >>> start([np.zeros(10)])  # too small to be worth it
    0
    """
    global _pool
    started = 0
    for value in values:
        if type(value) is not np.ndarray or value.nbytes < MIN_BYTES:
            continue
        plan = plan_array(value)
        if plan is None:
            continue
        with _lock:
            key = _key(plan)
            if key in _ahead:
                continue
            if _pool is None:
                _pool = ThreadPoolExecutor(1, thread_name_prefix="ipy-resume-prehash")
            _ahead[key] = _pool.submit(_digest, plan)
        started += 1
    return started


def address(plan: ArrayPlan) -> str:
    """The blob address of *plan*: the helper thread's, when :func:`start` took it, else now.

    >>> address(plan_array(np.arange(1 << 18))) == blobs.digest(XXH3, plan_array(np.arange(1 << 18)).chunks())
    True
    """
    with _lock:
        ahead = _ahead.pop(_key(plan), None)
    if ahead is not None:
        try:
            return ahead.result()
        except Exception:  # (the thread's failure is this call's to see: hash it here)
            pass
    return _digest(plan)


def clear() -> None:
    """Forget what :func:`start` took and nobody asked for (a value pickled instead, a save
    that failed): a later save of other bytes at the same memory must not find it.

    >>> clear()
    """
    with _lock:
        _ahead.clear()
