"""Write the golden store of the current format: ``tests/golden/format<N>/``.

Run once per released format (``python tests/golden/make_golden.py``) and commit
the result; never regenerate an existing format's store, because its point is
to be bytes an *older* ipy_resume wrote.  The store is signed with the fixed
test key in ``format<N>.key`` (test data, not a secret).  The values are
:func:`golden_values`; ``tests/test_reliability_golden.py`` loads the store and
compares them exactly.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent
GOLDEN_KEY = bytes.fromhex("60" * 16 + "a5" * 16)


def golden_values(fmt: int = 1) -> dict[tuple[str, str], dict[str, Any]]:
    """(CELL_ID, key) -> the values stored under it (one checkpoint each) in format *fmt*."""
    values = {
        ("arrays", "k-arrays"): {
            "c_order": np.arange(8_192, dtype="<f8") / 3,  # HDF5, C order
            "f_order": np.asfortranarray(np.arange(128 * 128, dtype=">i4").reshape(128, 128)),
            "dates": np.arange(8_192).astype("datetime64[s]"),  # HDF5 opaque type
        },
        ("mixed", "k-mixed-1"): {
            "small": {
                "list": [1, 2.5, "é", b"bytes", None, True, -0.0],
                "tuple": (1, (2, 3)),
                "set": frozenset({1, 2}),
                "complex": 1 + 2j,
            },
            "nested": {"buf": np.arange(8_192, dtype=np.int64)},  # raw out-of-band blob
            "text": "golden",
        },
        ("mixed", "k-mixed-2"): {"text": "second key of one cell", "n": 2},
    }
    if fmt >= 2:  # shared objects: one object under two names, views, a link between checkpoints
        base = np.arange(20_000, dtype=np.float64)  # HDF5
        small = np.arange(12.0)  # pickled with the group
        items = ["shared", 1]
        values[("shared", "k-shared")] = {
            "base": base,
            "window": base[100:200:2],
            "small": small,
            "tail": small[6:],
            "items": items,
            "same_items": items,
        }
        values[("linked", "k-linked")] = {"holder": {"items": items, "n": 3}}
    return values


def main() -> int:
    from ipy_resume.engine.sharing import SharedObjects, fingerprints_of
    from ipy_resume.store import FORMAT_VERSION, Store

    target = HERE / f"format{FORMAT_VERSION}"
    if target.exists() and "--force" not in sys.argv:
        print(f"{target} exists; a released format's golden store is never rewritten")
        return 1
    shutil.rmtree(target, ignore_errors=True)
    store = Store(target, key=GOLDEN_KEY)
    shared = SharedObjects()  # so "linked" links to the list "shared" stored
    for (cell_id, key), values in golden_values(FORMAT_VERSION).items():
        info = {"golden": 1, "fingerprints": fingerprints_of(values)}
        saved = store.save(
            cell_id, key, values, extras={"note": f"golden {cell_id}"}, info=info, linker=shared
        )
        shared.note(saved.manifest, values)
    (target / "lock").unlink(missing_ok=True)
    (HERE / f"format{FORMAT_VERSION}.key").write_text(GOLDEN_KEY.hex() + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
