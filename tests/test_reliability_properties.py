"""Property tests: store-and-restore is exact; fingerprints agree across processes and separate.

* Round trip: generated nested containers, numpy arrays of every dtype and
  memory order (small ones pickled, large ones through the HDF5 path) and
  pandas frames come back from a fresh :class:`Store` exactly: same types, same
  dtypes (byte order included), same memory order where it was contiguous, same
  bits (-0.0 and NaN payloads included), and the same fingerprint.
* Fingerprints: equal values give equal fingerprints in another process with
  another ``PYTHONHASHSEED`` (sets of strings then iterate in another order);
  values that differ give different fingerprints.

``IPY_RESUME_HYPOTHESIS_EXAMPLES`` scales the number of examples (default 200).
"""

from __future__ import annotations

import io
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import reliability_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.extra import pandas as hpd

from ipy_resume.fingerprint import Fingerprinter
from ipy_resume.store import Store, codecs
from ipy_resume.store.codecs import ARRAY_BLOB_MIN

EXAMPLES = int(os.environ.get("IPY_RESUME_HYPOTHESIS_EXAMPLES", "200"))
KEY = bytes(range(32))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same examples on every run: a failure reproduces
)

# ---------------------------------------------------------------------------
# strategies

SCALAR_DTYPES = [
    "?",
    *(f"{e}{k}{n}" for e in "<>" for k in "iu" for n in (1, 2, 4, 8)),
    *(f"{e}f{n}" for e in "<>" for n in (2, 4, 8)),
    *(f"{e}c{n}" for e in "<>" for n in (8, 16)),
    "g",  # long double
    "G",
    *(f"<M8[{u}]" for u in ("D", "s", "ms", "ns")),
    *(f">m8[{u}]" for u in ("h", "us")),
    "S5",
    "<U3",
    ">U2",
    "V4",
]
STRUCTURED = [
    np.dtype([("a", "<i4"), ("b", ">f8"), ("c", "S3")]),
    np.dtype([("x", "<f4", (2,)), ("y", "?")]),
    np.dtype({"names": ["p", "q"], "formats": ["<u2", "<i8"], "offsets": [0, 8]}),  # padding
]
ALL_DTYPES = [np.dtype(d) for d in SCALAR_DTYPES] + STRUCTURED


def _orders(arr: np.ndarray) -> st.SearchStrategy[np.ndarray]:
    variants = [st.just(arr), st.just(np.asfortranarray(arr))]
    if arr.ndim >= 1 and arr.shape[0] > 1:
        variants.append(st.just(arr[::2]))  # strided, not contiguous
    if arr.ndim >= 2:
        variants.append(st.just(arr.T))
    return st.one_of(variants)


def _arrays_of(dt: np.dtype[Any]) -> st.SearchStrategy[np.ndarray]:
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)
    if dt.kind == "V" and dt.names is None:  # hypothesis cannot infer raw void elements
        raw = st.binary(min_size=dt.itemsize, max_size=dt.itemsize).map(np.void)
        return hnp.arrays(dt, shapes, elements=raw)
    return hnp.arrays(dt, shapes)


small_arrays = st.sampled_from(ALL_DTYPES).flatmap(_arrays_of).flatmap(_orders)

object_arrays = st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), max_size=6).map(
    lambda items: np.array([*items, None], dtype=object)
)

frames = hpd.data_frames(
    columns=[
        hpd.column("i", dtype=np.int64),
        hpd.column("f", dtype=np.float64),
        hpd.column("b", dtype=bool),
        hpd.column("s", elements=st.text(max_size=4)),
        hpd.column("t", dtype="datetime64[ns]"),
    ],
    index=hpd.range_indexes(max_size=8),
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)


def containers(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.tuples(inner, inner),
            st.dictionaries(st.text(max_size=4), inner, max_size=4),
            st.frozensets(st.text(max_size=4), max_size=4),
            st.sets(st.integers(), max_size=4),
        ),
        max_leaves=12,
    )


values = containers(st.one_of(scalars, small_arrays, object_arrays))


# ---------------------------------------------------------------------------
# exact comparison


def same(a: Any, b: Any) -> bool:
    """Exact equality: types, dtypes, memory order of contiguous arrays, and bits."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        f_only = a.ndim > 1 and a.flags.f_contiguous and not a.flags.c_contiguous
        if f_only and not b.flags.f_contiguous:
            return False
        if a.dtype.hasobject:
            return all(same(x, y) for x, y in zip(a.flat, b.flat, strict=True))
        if _padded(a.dtype):  # padding bytes are not part of the value: compare the fields
            return all(same(a[f], b[f]) for f in a.dtype.names or ())
        return a.tobytes() == b.tobytes()
    if isinstance(a, pd.DataFrame):
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        except AssertionError:
            return False
        return list(a.dtypes) == list(b.dtypes)
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or repr(a) == repr(b)
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def _padded(dtype: np.dtype[Any]) -> bool:
    fields = dtype.fields or {}
    return bool(fields) and dtype.itemsize > sum(f[0].itemsize for f in fields.values())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp("prop") / "store", key=KEY)


_counter = [0]


def _round_trip(store: Store, value: Any) -> Any:
    _counter[0] += 1
    store.save("prop", f"k{_counter[0]}", {"v": value})
    fresh = Store(store.root, key=KEY)  # nothing cached
    m = fresh.find("prop", f"k{_counter[0]}")
    assert m is not None
    return fresh.load_values(m)["v"]


# ---------------------------------------------------------------------------
# round trips


@PROPERTY
@given(value=values)
def test_round_trip_of_nested_values_is_exact(store: Store, value: Any) -> None:
    back = _round_trip(store, value)
    assert same(value, back), (value, back)
    assert Fingerprinter().digest(back) == Fingerprinter().digest(value)


@PROPERTY
@given(frame=frames)
def test_round_trip_of_data_frames_is_exact(store: Store, frame: pd.DataFrame) -> None:
    back = _round_trip(store, frame)
    assert same(frame, back)
    assert Fingerprinter().digest(back) == Fingerprinter().digest(frame)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_large_arrays_of_every_dtype_and_order_round_trip(
    store: Store, dtype: np.dtype[Any], order: str
) -> None:
    m = (ARRAY_BLOB_MIN // dtype.itemsize) // 2 * 2 + 64  # x2 rows: past the HDF5 threshold
    rng = np.random.default_rng(len(str(dtype)))
    raw = rng.integers(0, 256, size=(2 * m * dtype.itemsize,), dtype=np.uint8)
    if dtype.kind == "b":
        raw %= 2
    if dtype.kind == "U":  # only valid code points
        raw = (raw.view(np.uint32) % 0x2000).astype(np.uint32).view(np.uint8)
    arr = raw.view(dtype).reshape(2, m)
    if order == "F":
        arr = np.asfortranarray(arr)
    elif order == "strided":
        arr = arr[:, ::2]
    back = _round_trip(store, arr)
    assert same(arr, back)
    # padding bytes are not part of the value, so the fingerprint leaves them out too
    assert Fingerprinter().digest(back) == Fingerprinter().digest(arr)
    if order == "F":
        assert back.flags.f_contiguous


# ---------------------------------------------------------------------------
# fingerprints

fp_values = containers(
    st.one_of(scalars, small_arrays, st.frozensets(st.text(min_size=1, max_size=6), max_size=6))
)


def _dumps(value: Any) -> bytes:
    # the store's pickler: plain pickle loses the byte order of some numpy arrays
    out = io.BytesIO()
    codecs._Pickler(out, protocol=5).dump(value)
    return out.getvalue()


def _fp_equal_expected(a: Any, b: Any) -> bool:
    """When the fingerprints must agree: exact equality, with NaN equal to NaN as a float."""
    return same(a, b)


@PROPERTY
@given(data=st.data())
def test_fingerprints_separate_different_values(data: st.DataObject) -> None:
    a = data.draw(fp_values, label="a")
    if data.draw(st.booleans(), label="copy"):
        b = pickle.loads(_dumps(a))
    else:
        b = data.draw(fp_values, label="b")
    equal = _fp_equal_expected(a, b)
    assert (Fingerprinter().digest(a) == Fingerprinter().digest(b)) == equal, (a, b)


_CHILD = """
import pickle, sys
from ipy_resume.fingerprint import Fingerprinter
values = pickle.loads(open(sys.argv[1], "rb").read())
sys.stdout.write("\\n".join(Fingerprinter().digest(v).hex() for v in values))
"""


@settings(max_examples=4, deadline=None, derandomize=True)
@given(
    batch=st.lists(
        st.one_of(
            fp_values,
            frames,
            st.sets(st.text(min_size=1, max_size=8), min_size=3, max_size=12),
            st.dictionaries(st.text(max_size=5), st.integers(), min_size=2, max_size=8),
        ),
        min_size=25,
        max_size=25,
    )
)
def test_fingerprints_are_equal_across_processes(
    batch: list[Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("fp") / "values.pickle"
    path.write_bytes(_dumps(batch))
    mine = [Fingerprinter().digest(v).hex() for v in batch]
    for seed in ("1", "4242"):
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONHASHSEED=seed),
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split("\n") == mine
    reliability_report.record(
        "property tests",
        f"{EXAMPLES} examples per round-trip and separation property, "
        f"{len(ALL_DTYPES)} dtypes x 3 orders through HDF5, fingerprints equal in 2 other "
        "processes with other hash seeds",
    )


def test_store_is_in_a_fresh_folder(store: Store) -> None:
    assert Path(store.root).is_dir() or not Path(store.root).exists()
