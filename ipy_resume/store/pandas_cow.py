"""pandas' copy-on-write, as the store keeps it: frames that share a block come back apart.

Under copy-on-write (always on from pandas 3; an option in pandas 2) two frames may hold
one block's memory (``d2 = df.drop(columns="b")``, ``df[["a"]]``, a shallow copy), and
pandas copies it before either writes in place: no write ever shows through the other.
pandas tracks that sharing in each block's ``refs``, which a pickle does not keep.

Restored with their memory shared but without that bookkeeping, ``df.iloc[0, 0] = 1``
would write into ``d2`` too: a restored kernel that behaves unlike the saved one.  So a
block whose memory pandas marks as shared is written as a copy of it (what copy-on-write
would have made at the first write), and that memory is no evidence that the two frames
hold one object (see ``codecs.identities``): the save does not store one again with the
other.  A block that shares nothing is written as before, views and links included.

Not covered: a NumPy array handed to pandas with ``copy=False`` is the block's memory
without pandas knowing of it; once a frame derived from that one also holds it, the
restored frames hold copies of their own (docs/state.md).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["active", "block_type", "manager_types", "shared_block", "unshared_manager"]


def active() -> bool:
    """Whether pandas is imported and copies on write (pandas 3 always does)."""
    pandas = sys.modules.get("pandas")
    if pandas is None:
        return False
    version = str(getattr(pandas, "__version__", "0"))
    if version.partition(".")[0].isdigit() and int(version.partition(".")[0]) >= 3:
        return True
    config = sys.modules.get("pandas._config")
    using = getattr(config, "using_copy_on_write", None)
    try:
        return bool(using()) if callable(using) else False
    except Exception:  # (an older pandas: no copy-on-write)
        return False


def block_type() -> type | None:
    """pandas' block class (every block's base), when pandas is imported."""
    internals = sys.modules.get("pandas._libs.internals")
    found = getattr(internals, "Block", None)
    return found if isinstance(found, type) else None


def manager_types() -> frozenset[type]:
    """pandas' block managers (a frame's and a series'), when pandas is imported."""
    managers = sys.modules.get("pandas.core.internals.managers")
    if managers is None:
        return frozenset()
    found = (getattr(managers, n, None) for n in ("BlockManager", "SingleBlockManager"))
    return frozenset(t for t in found if isinstance(t, type))


def shared_block(block: Any) -> bool:
    """True when pandas knows another live block holds *block*'s memory.

    >>> import pandas as pd
    >>> df = pd.DataFrame({"a": [1.0, 2.0]}); view = df[["a"]]
    >>> shared_block(df._mgr.blocks[0]), shared_block(df.copy()._mgr.blocks[0])
    (True, False)
    """
    refs = getattr(block, "refs", None)
    try:
        return bool(refs is not None and refs.has_reference())
    except Exception:  # (pandas' bookkeeping changed: treated as shared by nothing)
        return False


def _copied(values: Any) -> Any:
    if isinstance(values, np.ndarray):
        return values.copy(order="K")
    return values.copy()  # an ExtensionArray (pandas' own copy)


def unshared_manager(manager: Any) -> tuple[Any, ...] | None:
    """What pickle writes for *manager* with each block pandas marks as shared copied, or
    None when none is (or when its state is not the layout this knows: pickled as before).

    pandas' own state is kept (layout "0.14.1", read by every pandas since 2014): only the
    values of shared blocks are replaced by copies, so a reader needs nothing new.
    """
    blocks = getattr(manager, "blocks", ())
    shared = [shared_block(b) for b in blocks]
    if not any(shared):
        return None
    try:
        reduced = manager.__reduce_ex__(5)
        if not callable(reduced[0]):
            return None
        axes, block_values, block_items, extra = reduced[2]
        layout = extra["0.14.1"]
        described = layout["blocks"]
        if len(described) != len(blocks) or len(block_values) != len(blocks):
            return None
        values = [_copied(v) if s else v for v, s in zip(block_values, shared, strict=True)]
        described = [{**d, "values": v} for d, v in zip(described, values, strict=True)]
        state = (axes, values, block_items, {**extra, "0.14.1": {**layout, "blocks": described}})
    except Exception:  # (another layout: pickled as pandas writes it)
        return None
    return (reduced[0], reduced[1], state, *reduced[3:])
