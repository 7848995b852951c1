"""Seed, snapshot and restore the global random number generators.

A checkpoint hit must leave the generators exactly where an execution would
have left them, otherwise the cells after it draw different numbers. Only the
*global* generators need this: a ``numpy.random.Generator`` held in a variable
is a value and travels with the other values.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np

# Seeds are folded into numpy's legacy seeding range.
_NUMPY_SEED_MODULUS = 2**32


def derive_seed(seed_base: int, cell_id: str) -> int:
    """Return the default seed of a cell: stable for a store and a CELL_ID.

    >>> derive_seed(7, "train") == derive_seed(7, "train")
    True
    """
    from .fingerprint import digest_bytes

    digest = digest_bytes(seed_base.to_bytes(16, "little", signed=True), cell_id.encode("utf-8"))
    return int.from_bytes(digest[:8], "little") >> 1


def seed_all(seed: int) -> None:
    """Seed ``random``, numpy's global generator and, if already imported, torch.

    >>> seed_all(3); a = random.random(); seed_all(3); a == random.random()
    True
    """
    random.seed(seed)
    np.random.seed(seed % _NUMPY_SEED_MODULUS)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


def snapshot() -> dict[str, Any]:
    """Capture the state of every global generator as plain picklable data.

    >>> state = snapshot(); x = random.random(); restore(state); x == random.random()
    True
    """
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=False),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state().numpy().copy()
    return state


def restore(state: dict[str, Any]) -> None:
    """Put every generator named in *state* back to that state.

    >>> s = snapshot(); restore(s)
    """
    if "python" in state:
        random.setstate(_as_python_state(state["python"]))
    if "numpy" in state:
        np.random.set_state(state["numpy"])
    torch = sys.modules.get("torch")
    if "torch" in state and torch is not None:
        torch.set_rng_state(torch.from_numpy(np.asarray(state["torch"], dtype=np.uint8)))


def _as_python_state(value: Any) -> tuple[Any, ...]:
    # A round trip through some serialisers turns the inner tuple into a list.
    version, internal, gauss = value
    return (version, tuple(internal), gauss)
