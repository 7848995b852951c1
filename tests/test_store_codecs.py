"""Codecs: HDF5 array files and pickle streams, alone and round-tripped through a Store."""

from __future__ import annotations

import pickle
import threading
import types
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ipy_resume.store import Store, codecs

KEY = b"k" * 32
BIG = 10_000  # elements: >= 64 KiB for itemsize >= 8

DTYPES = [
    "float64",
    "float32",
    "float16",
    ">f8",
    "longdouble",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
    "datetime64[ns]",
    "datetime64[D]",
    "timedelta64[ms]",
    "S7",
    "U5",
    "V3",
    [("a", "<f8"), ("b", "i1", (3,)), ("c", [("d", "<u2")])],
    np.dtype([("x", "i1"), ("y", "<f8")], align=True),
]


def _sample(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt.kind == "b":
        raw = raw % 2
    a = raw.view(dt).reshape(shape) if dt.kind not in "fcUMm" else None
    if dt.kind == "f":
        a = rng.standard_normal(shape).astype(dt)
    elif dt.kind == "c":
        a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    elif dt.kind in "Mm":
        a = rng.integers(-(10**12), 10**12, size=shape).astype(dt)
    elif dt.kind == "U":
        a = np.array(["hé", "x", "", "abcde"] * (int(np.prod(shape)) // 4 + 1))[
            : int(np.prod(shape))
        ].reshape(shape)
    assert a is not None
    return np.asarray(a, dtype=dt).reshape(shape)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (field by field: padding bytes are undefined)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.isalignedstruct != b.dtype.isalignedstruct:
        return False
    if a.dtype.names:
        return all(_equal(a[name], b[name]) for name in a.dtype.names)
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "st", key=KEY)


# ---------------------------------------------------------------------------
# dtype descriptions


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_json_round_trip(dtype: Any) -> None:
    import json

    dt = np.dtype(dtype)
    assert codecs.dtype_from_json(json.loads(json.dumps(codecs.dtype_to_json(dt)))) == dt


@pytest.mark.parametrize("bad", [3, [["a"]], [["a", 5]], "not a dtype"])
def test_bad_dtype_json(bad: Any) -> None:
    with pytest.raises(ValueError):
        codecs.dtype_from_json(bad)


# ---------------------------------------------------------------------------
# HDF5 plans


def _write_plan(plan: codecs.ArrayPlan, path: Path) -> bytes:
    data = b"".join(bytes(c) for c in plan.chunks())
    path.write_bytes(data)
    return data


def test_plan_is_a_view_and_deterministic(tmp_path: Path) -> None:
    a = np.random.default_rng(1).random((200, 300))
    plan = codecs.plan_array(a)
    assert plan is not None and plan.order == "C"
    assert np.shares_memory(np.frombuffer(plan.data, np.uint8), a)  # no copy
    assert plan.offset % codecs.DATA_ALIGNMENT == 0 and len(plan.head) == plan.offset
    again = codecs.plan_array(a.copy())
    assert again is not None
    first = _write_plan(plan, tmp_path / "1.h5")
    second = _write_plan(again, tmp_path / "2.h5")
    assert first == second  # equal arrays give equal files
    assert plan.size == len(first)


def test_plan_file_is_valid_hdf5(tmp_path: Path) -> None:
    a = np.random.default_rng(2).random((50, 40, 30)).astype(np.float32)
    plan = codecs.plan_array(a)
    assert plan is not None
    _write_plan(plan, tmp_path / "a.h5")
    with h5py.File(tmp_path / "a.h5", "r") as f:
        ds = f["data"]
        assert ds.shape == a.shape and ds.dtype == a.dtype
        assert ds.id.get_offset() == plan.offset
        assert np.array_equal(ds[()], a)


def test_fortran_array_is_stored_transposed_without_copy(tmp_path: Path) -> None:
    a = np.asfortranarray(np.random.default_rng(3).random((300, 70)))
    plan = codecs.plan_array(a)
    assert plan is not None and plan.order == "F" and plan.shape == (300, 70)
    assert np.shares_memory(np.frombuffer(plan.data, np.uint8), a)
    _write_plan(plan, tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert f["data"].attrs["order"] == "F"
        assert np.array_equal(f["data"][()].T, a)
    buf = np.fromfile(tmp_path / "f.h5", dtype=np.uint8)
    back = codecs.decode_array(buf, plan.offset, plan.dtype, plan.shape, plan.order)
    assert np.array_equal(back, a) and back.flags.f_contiguous


def test_non_contiguous_array_is_copied() -> None:
    a = np.random.default_rng(4).random((400, 400))[::2, ::3]
    plan = codecs.plan_array(a)
    assert plan is not None and plan.order == "C"
    assert not np.shares_memory(np.frombuffer(plan.data, np.uint8), a)
    assert bytes(plan.data) == np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize(
    "value",
    [
        np.zeros(100),  # too small
        np.empty(20_000, dtype=object),  # objects
        np.ma.masked_array(np.zeros(20_000)),  # subclass
        np.zeros((0, 20_000)),  # empty
        np.array(["abcdefgh"] * 5_000),  # unicode: no HDF5 type
        [1.0] * 20_000,  # not an array
    ],
    ids=["small", "object", "masked", "empty", "unicode", "list"],
)
def test_ineligible_values_are_not_planned(value: object) -> None:
    assert codecs.plan_array(value) is None


def test_decode_array_returns_a_writeable_view() -> None:
    a = np.arange(20_000, dtype=np.int64)
    plan = codecs.plan_array(a)
    assert plan is not None
    buf = np.frombuffer(bytearray(b"".join(bytes(c) for c in plan.chunks())), np.uint8)
    back = codecs.decode_array(buf, plan.offset, plan.dtype, plan.shape, plan.order)
    assert np.array_equal(back, a) and np.shares_memory(back, buf)
    back[0] = 42
    assert back.flags.writeable and buf[plan.offset] == 42
    with pytest.raises(ValueError):
        codecs.decode_array(buf, buf.size - 8, plan.dtype, plan.shape, plan.order)


def test_skeletons_are_thread_safe() -> None:
    results: list[bytes] = []
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        barrier.wait()
        plan = codecs.plan_array(np.zeros((1000 + i, 17)))
        assert plan is not None
        results.append(plan.head)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4


# ---------------------------------------------------------------------------
# pickles


def test_pickle_large_buffers_out_of_band_small_in_band() -> None:
    big = np.arange(100_000, dtype=np.float64)
    small = np.arange(10, dtype=np.float64)
    pickled = codecs.pickle_value({"big": big, "small": small})
    assert len(pickled.buffers) == 1 and pickled.buffers[0].nbytes == big.nbytes
    assert len(pickled.stream) < 10_000
    back = codecs.unpickle_value(pickled.stream, [np.frombuffer(pickled.buffers[0], np.uint8)])
    assert isinstance(back, dict)
    assert np.array_equal(back["big"], big) and np.array_equal(back["small"], small)


def test_pickle_failure_is_one_line() -> None:
    with pytest.raises(codecs.EncodeError) as info:
        codecs.pickle_value(threading.Lock())
    assert "\n" not in str(info.value) and "cannot be pickled" in str(info.value)
    assert "TypeError" in str(info.value)


@pytest.mark.parametrize("dtype", ["datetime64[s]", "datetime64[ns]", "timedelta64[ms]", ">M8[us]"])
@pytest.mark.parametrize("layout", ["C", "F", "1d", "strided"])
def test_large_datetimes_leave_the_stream_and_come_back_exactly(dtype: str, layout: str) -> None:
    base = _sample(dtype, (300, 40), 3)
    base[0, 0] = np.array("NaT", dtype=base.dtype)
    arr = {
        "C": base,
        "F": np.asfortranarray(base),
        "1d": base.reshape(-1),
        "strided": base[:, ::2],
    }[layout]
    pickled = codecs.pickle_value({"a": arr})
    if layout == "strided":  # not contiguous: numpy's own pickling, in the stream
        assert pickled.buffers == [] and len(pickled.stream) > arr.nbytes
    else:
        assert [b.nbytes for b in pickled.buffers] == [arr.nbytes]
        assert len(pickled.stream) < 2_000
    buffers = [np.frombuffer(bytearray(b), np.uint8) for b in pickled.buffers]
    back = codecs.unpickle_value(pickled.stream, buffers)
    assert isinstance(back, dict)
    got = back["a"]
    assert _equal(got, arr) and got.dtype.str == arr.dtype.str
    if layout != "strided":  # (numpy's own pickling makes a copy contiguous)
        assert got.flags.f_contiguous == arr.flags.f_contiguous
        assert got.flags.c_contiguous == arr.flags.c_contiguous
    assert got.flags.writeable
    assert np.isnat(got).sum() == np.isnat(arr).sum() >= 1


def _frame(rows: int) -> Any:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    rng = np.random.default_rng(5)
    ints = rng.integers(0, 1_000, rows)
    df = pd.DataFrame(
        {
            "id": np.arange(rows, dtype=np.int64),
            "value": rng.standard_normal(rows),
            "when": np.datetime64("2024-01-01", "ns") + ints.astype("timedelta64[s]"),
            "span": ints.astype("timedelta64[ms]"),
            "zoned": pd.date_range("2024-03-30", periods=rows, freq="min", tz="Europe/Paris"),
            "group": pd.Categorical.from_codes(ints % 3, ["a", "b", "c"]),
            "label": pd.array([f"user_{k}" if k % 7 else None for k in ints], dtype="str"),
            "arrow": pd.array(ints, dtype="int64[pyarrow]"),
        },
        index=pd.Index(np.arange(rows) * 2, name="row"),
    )
    df.columns.name = "field"
    df.attrs["source"] = {"run": 3}
    return df.set_flags(allows_duplicate_labels=False)


def _assert_same_frame(got: Any, want: Any) -> None:
    import pandas as pd

    pd.testing.assert_frame_equal(got, want, check_exact=True, check_freq=True, check_flags=True)
    assert got.attrs == want.attrs and got.columns.name == want.columns.name
    assert got.index.name == want.index.name
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
    for name in want.columns:
        assert got[name].isna().tolist() == want[name].isna().tolist(), name


def test_a_frames_columns_leave_the_stream(store: Store) -> None:
    """Every large column, dates and Arrow strings too, is a buffer of its own; the frame
    comes back exactly (dtypes, index, names, flags, attrs, missing values)."""
    df = _frame(100_000)
    group = codecs.pickle_group({"df": df})
    assert len(group.stream) < 20_000  # (each date column was 800 KB of it)
    assert sum(b.nbytes for b in group.buffers) > 6 * 800_000
    store.save("frame", "k", {"df": df})
    m = store.find("frame", "k")
    assert m is not None
    _assert_same_frame(store.load_values(m)["df"], df)


def test_arrow_columns_of_several_chunks_or_sliced_come_back_exactly(store: Store) -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    words = [f"w{k}" * (k % 5) if k % 11 else None for k in range(30_000)]
    chunked = pa.chunked_array([pa.array(words[:10_000]), pa.array(words[10_000:])])
    sliced = pa.chunked_array([pa.array(words).slice(5_000, 20_000)])
    values = {
        "chunked": pd.Series(pd.arrays.ArrowExtensionArray(chunked)),
        "sliced": pd.Series(pd.arrays.ArrowExtensionArray(sliced)),
        "whole": pd.Series(pd.array(words, dtype="str")),
    }
    store.save("arrow", "k", values)
    m = store.find("arrow", "k")
    assert m is not None
    back = store.load_values(m)
    for name, want in values.items():
        got = back[name]
        pd.testing.assert_series_equal(got, want, check_exact=True)
        assert got.array._pa_array.to_pylist() == want.array._pa_array.to_pylist(), name
    # a single chunk is pickled from its own memory, not from a copy of it
    whole = values["whole"].array._pa_array.chunk(0)
    own = {b.address for b in whole.buffers() if b is not None and b.size >= codecs.OOB_MIN}
    group = codecs.pickle_group({"whole": values["whole"]})
    assert own and own <= {np.frombuffer(b, np.uint8).ctypes.data for b in group.buffers}
    # a slice is stored as its own rows, not with the whole of its parent's buffers
    alone = codecs.pickle_group({"sliced": values["sliced"]})
    stored = len(alone.stream) + sum(b.nbytes for b in alone.buffers)
    assert stored < 0.8 * pa.array(words).get_total_buffer_size()


# ---------------------------------------------------------------------------
# round trips through a store (real files)


SHAPES = [(), (0,), (7,), (3, 4, 5), (BIG,), (60, 50, 8)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_store_round_trip_dtypes_and_shapes(store: Store, dtype: Any) -> None:
    values = {f"s{i}": _sample(dtype, shape, i) for i, shape in enumerate(SHAPES)}
    big = _sample(dtype, (600, 120), 99)
    values["C"] = big
    values["F"] = np.asfortranarray(big)
    values["strided"] = big[::2, ::3]
    values["T"] = big.T
    values["be"] = big.astype(big.dtype.newbyteorder(">")) if big.dtype.kind in "fiuc" else big
    result = store.save("dtypes", "k", values)
    assert result.failed == {}
    m = store.find("dtypes", "k")
    assert m is not None
    back = store.load_values(m)
    for name, value in values.items():
        got = back[name]
        assert isinstance(got, np.ndarray), name
        assert _equal(got, value), name
        assert got.flags.writeable, name
    f_back = back["F"]
    assert isinstance(f_back, np.ndarray) and f_back.flags.f_contiguous
    kinds = {name: ref.kind for name, ref in m.values.items()}
    hdf5_ok = np.dtype(dtype).kind != "U" and not np.dtype(dtype).isalignedstruct
    assert (kinds["C"] == "hdf5") == hdf5_ok
    assert kinds["s0"] == "pickle" and kinds["s2"] == "pickle"  # small values are packed


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    arr=hnp.arrays(
        dtype=st.one_of(hnp.integer_dtypes(), hnp.floating_dtypes(), hnp.complex_number_dtypes()),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40),
    ),
    big=st.booleans(),
)
def test_store_round_trip_property(tmp_path: Path, arr: np.ndarray, big: bool) -> None:
    if big and arr.size:
        arr = np.tile(arr, max(1, 70_000 // arr.nbytes))
    store = Store(tmp_path / "prop", key=KEY)
    store.save("p", "k", {"a": arr})
    m = store.find("p", "k")
    assert m is not None
    got = store.load_values(m)["a"]
    assert isinstance(got, np.ndarray) and _equal(got, arr)


def test_a_lone_view_of_a_small_memory_comes_back_a_view_and_of_a_large_one_a_copy(
    store: Store,
) -> None:
    """Views of memory nothing stored owns: a small memory is stored whole with its first
    view (views stay views, even a lone one, in one pickle of the group), a large one is not."""
    small = np.arange(40.0).reshape(20, 2)
    other = np.arange(30.0).reshape(10, 3)
    large = np.arange(float(codecs.ROOT_SLACK_MIN // 4)).reshape(-1, 2)
    holder = types.SimpleNamespace(
        x=small[:, 0], rows=small[::2], lone=other[:, 1], big=large[:4, 0]
    )
    pickled = codecs.pickle_group({"holder": holder})
    assert pickled.roots and all(r.nbytes > codecs.ROOT_SLACK_MIN for r in pickled.roots)
    store.save("lone", "k", {"holder": holder})
    m = store.find("lone", "k")
    assert m is not None
    back = store.load_values(m)["holder"]
    assert isinstance(back, types.SimpleNamespace)
    for name in ("x", "rows", "lone", "big"):
        assert getattr(back, name).tolist() == getattr(holder, name).tolist(), name
    back.x[2] = -1.0
    assert back.rows[1, 0] == -1.0  # one memory again
    assert isinstance(back.lone.base, np.ndarray) and back.lone.base.nbytes == other.nbytes
    assert not np.may_share_memory(back.lone, back.x)
    # the large memory is not stored for four of its numbers
    assert not isinstance(back.big.base, np.ndarray) or back.big.base.nbytes < large.nbytes


def test_a_group_links_objects_and_plain_containers_stored_elsewhere() -> None:
    box = types.SimpleNamespace(n=1)
    items = [1, 2]
    values = {"holder": {"box": box, "again": box, "items": items, "items2": items}}
    links = {id(box): "c/box", id(items): "c/items"}
    group = codecs.pickle_group(values, links, lambda token: True)
    assert group.links == {"c/box", "c/items"}
    assert group.linked == {id(box), id(items)}
    # linked, not held inline: no reason to store box's checkpoint again with this group
    assert not group.reached & {id(box), id(items)}
    stored = {"c/box": box, "c/items": items}
    back = codecs.unpickle_group(group.stream, group.buffers, stored.__getitem__)
    holder = back["holder"]
    assert isinstance(holder, dict)
    assert holder["box"] is box and holder["again"] is box
    assert holder["items"] is items and holder["items2"] is items


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_a_group_stream_is_read_from_its_memory_in_every_protocol(protocol: int) -> None:
    # The unpickler reads the verified stream through a view of its memory (frames, lines
    # for protocol 0's opcodes, large bytes into buffers), as from a file holding its copy.
    big = bytes(range(256)) * 5000  # larger than a frame: read in one piece
    values = {"a": {"text": "line\nbreak", "n": 3, "big": big, "nested": [1.5, {"k": (1, 2)}]}}
    stream = pickle.dumps(values, protocol=protocol)
    memory = np.frombuffer(stream, dtype=np.uint8).copy()  # (as a blob's bytes are held)
    back = codecs.unpickle_group(memory.data, [], lambda token: None)
    assert back == values
    with pytest.raises(pickle.UnpicklingError):
        codecs.unpickle_group(memory.data[: len(stream) // 2], [], lambda token: None)


def test_a_walk_made_before_the_pickle_is_taken_only_when_it_is_the_same_walk() -> None:
    """A walk that skipped an object the pickle then writes inline (its link failed its
    check) is not the walk of what the group holds: the group walks again."""
    inner = [1, 2]
    box = types.SimpleNamespace(inner=inner)
    values = {"holder": {"box": box}}
    links = {id(box): "c/box"}
    walked = codecs.Walk.of(list(values.values()), {id(box)})
    assert walked.hits == {id(box)} and id(inner) not in walked.held
    copied = codecs.pickle_group(values, links, lambda token: False, walked=walked)
    assert {id(box), id(inner)} <= copied.members  # held inline: its insides count
    linked = codecs.pickle_group(values, links, lambda token: True, walked=walked)
    assert linked.links == {"c/box"}
    assert linked.members == codecs.identities(values.values(), {id(box)}) == walked.held
    # another value than the walk's: walked again
    other = {"holder": {"box": box, "more": [inner]}}
    again = codecs.pickle_group(other, links, lambda token: True, walked=walked)
    assert again.members == codecs.identities(other.values(), {id(box)}) != walked.held


def test_a_link_that_fails_its_check_is_stored_as_a_copy() -> None:
    box = types.SimpleNamespace(n=1)
    items = [1, 2]
    values = {"holder": {"box": box, "items": items}}
    links = {id(box): "c/box", id(items): "c/items"}
    group = codecs.pickle_group(values, links, lambda token: False)
    assert group.links == set() and group.linked == set()
    back = codecs.unpickle_group(group.stream, group.buffers, lambda token: None)
    holder = back["holder"]
    assert isinstance(holder, dict)
    assert holder["box"] is not box and holder["box"].n == 1
    assert holder["items"] is not items and holder["items"] == [1, 2]


def test_a_linked_object_cannot_be_read_without_its_group() -> None:
    box = types.SimpleNamespace(n=1)
    group = codecs.pickle_group({"holder": [box]}, {id(box): "c/box"}, lambda token: True)
    with pytest.raises(pickle.UnpicklingError, match="c/box"):
        pickle.loads(group.stream)
