"""Arrow-backed values are hashed from their buffers: chunking and slicing do not matter,
every difference in values, nulls or type does."""

from __future__ import annotations

import itertools
import pickle
import subprocess
import sys
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from ipy_resume.fingerprint import arrow_rules, fingerprint


def distinct(values: list[Any]) -> None:
    digests = [fingerprint(v) for v in values]
    for i, d in enumerate(digests):
        for j in range(i):
            assert digests[j] != d, f"{values[j]!r} and {values[i]!r} collide"


def cuts(arr: pa.Array, *bounds: int) -> pa.ChunkedArray:
    """*arr* cut at *bounds* into chunks that are slices (non-zero offsets) of it."""
    edges = [0, *bounds, len(arr)]
    return pa.chunked_array([arr.slice(a, b - a) for a, b in itertools.pairwise(edges)], arr.type)


STRINGS = ["alpha", "", None, "βeta", "gamma", None, "", "delta", "e" * 300, "z"]


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_strings_hash_the_same_however_chunked_or_sliced(typ: pa.DataType) -> None:
    values = [v.encode() if v is not None and "binary" in str(typ) else v for v in STRINGS]
    whole = pa.array(values, type=typ)
    expected = fingerprint(pa.chunked_array([whole]))
    assert fingerprint(cuts(whole, 1, 4, 9)) == expected
    assert fingerprint(cuts(whole, 3)) == expected
    # a chunk that is a slice in the middle of a bigger array's buffers
    padded = pa.array(["x", "yy", *values, "w"], type=typ)
    assert fingerprint(pa.chunked_array([padded.slice(2, len(values))])) == expected
    # empty chunks change nothing
    empty = pa.array([], type=typ)
    assert fingerprint(pa.chunked_array([empty, whole, empty], typ)) == expected
    # a bare Array and a one-chunk ChunkedArray are different Python types
    assert fingerprint(whole) != expected
    assert fingerprint(whole) == fingerprint(padded.slice(2, len(values)))


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_every_change_of_a_string_column_changes_the_digest(typ: pa.DataType) -> None:
    def col(values: list[Any], *bounds: int) -> pa.ChunkedArray:
        return cuts(pa.array(values, type=typ), *bounds)

    distinct(
        [
            col(["a", "bc", "d"]),
            col(["ab", "c", "d"]),  # same bytes, other boundaries
            col(["a", "b", "cd"]),
            col(["a", "bc", "e"]),
            col(["a", "bc", None]),  # null
            col(["a", "bc", ""]),  # empty string is not null
            col(["a", None, "d"]),
            col([None, "bc", "d"]),
            col(["a", "bc"]),
            col(["a", "bc", "d", ""]),
            col([]),
            col([None]),
            col([""]),
            # same bytes, lengths and null count: only where the null sits differs
            col(["a", None, "", "d"]),
            col(["a", "", None, "d"]),
        ]
    )
    # the same differences, seen through chunks and slices
    assert fingerprint(col(["a", "bc", None], 1)) == fingerprint(col(["a", "bc", None]))
    assert fingerprint(col(["a", "bc", None], 1)) != fingerprint(col(["a", "bc", ""], 2))


def test_string_and_large_string_are_different_types() -> None:
    distinct(
        [
            pa.chunked_array([pa.array(["a", "b"], type=pa.string())]),
            pa.chunked_array([pa.array(["a", "b"], type=pa.large_string())]),
            pa.chunked_array([pa.array([b"a", b"b"], type=pa.binary())]),
        ]
    )


def test_string_column_past_2_gib_switches_the_ends_to_int64(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Pretend int32 ends overflow sooner: the digest must still not depend on chunking.
    whole = pa.array([f"s{i}" * (i % 7) for i in range(1000)], type=pa.string())
    reference = fingerprint(pa.chunked_array([whole]))
    assert fingerprint(cuts(whole, 17, 500)) == reference
    monkeypatch.setattr(arrow_rules, "_NARROW_ENDS_MAX", 100)
    wide = fingerprint(pa.chunked_array([whole]))
    assert wide == fingerprint(cuts(whole, 17, 500))
    assert wide != reference


@pytest.mark.parametrize(
    "typ",
    [
        pa.int8(),
        pa.int64(),
        pa.uint32(),
        pa.float16(),
        pa.float64(),
        pa.timestamp("ms"),
        pa.timestamp("ns", tz="UTC"),
        pa.date32(),
        pa.time64("us"),
        pa.duration("s"),
        pa.bool_(),
    ],
)
def test_fixed_width_and_boolean_columns(typ: pa.DataType) -> None:
    def made(values: list[Any]) -> pa.Array:
        ints = pa.array(values, type=pa.int64())
        if pa.types.is_boolean(typ) or pa.types.is_floating(typ) or pa.types.is_integer(typ):
            return ints.cast(typ)
        return ints.cast(pa.int32() if typ.bit_width == 32 else pa.int64()).view(typ)

    ints = pa.array([1, 0, None, 1, 1, 0, 1, 1, 0, 1, None, 0, 1], type=pa.int64())
    whole = made(ints.to_pylist())
    expected = fingerprint(pa.chunked_array([whole]))
    for bounds in [(1,), (3, 5), (7, 8, 9), (11,)]:  # bit offsets not multiples of 8
        assert fingerprint(cuts(whole, *bounds)) == expected
    changed = ints.to_pylist()
    changed[4] = 0
    nulled = ints.to_pylist()
    nulled[5] = None
    moved = ints.to_pylist()
    moved[1], moved[2] = None, 0  # (pyarrow writes 0 under a null)
    distinct(
        [
            pa.chunked_array([whole]),
            pa.chunked_array([made(moved)]),
            pa.chunked_array([made(changed)]),
            pa.chunked_array([made(nulled)]),
            pa.chunked_array([whole.slice(1)]),
        ]
    )


def test_timezones_and_units_are_part_of_the_type() -> None:
    base = pa.array([0, 1, 2], type=pa.int64())
    distinct(
        [
            pa.chunked_array([base.cast(pa.timestamp("s"))]),
            pa.chunked_array([base.cast(pa.timestamp("ms"))]),
            pa.chunked_array([base.cast(pa.timestamp("s", tz="UTC"))]),
            pa.chunked_array([base.cast(pa.timestamp("s", tz="Europe/Paris"))]),
            pa.chunked_array([base]),
        ]
    )


def test_a_boolean_column_is_read_through_its_slice_offset() -> None:
    bits = pa.array([True, False] * 40 + [True])
    # the same logical values from different bit positions in the buffer
    shifted = pa.array([False, False, False, *bits.to_pylist()]).slice(3)
    assert fingerprint(pa.chunked_array([shifted])) == fingerprint(pa.chunked_array([bits]))
    flipped = bits.to_pylist()
    flipped[80] = False
    assert fingerprint(pa.chunked_array([pa.array(flipped)])) != fingerprint(
        pa.chunked_array([bits])
    )


def test_a_chunk_without_nulls_counts_as_all_valid() -> None:
    # The null sits in one chunk; the other chunks have no validity bitmap at all.
    whole = pa.array(["a", "b", None, "d", "e"])
    parts = pa.chunked_array([pa.array(["a", "b"]), pa.array([None, "d"]), pa.array(["e"])])
    assert parts.chunk(0).buffers()[0] is None
    assert fingerprint(parts) == fingerprint(pa.chunked_array([whole]))


def test_null_and_unsupported_types_still_hash_by_value() -> None:
    distinct([pa.chunked_array([pa.nulls(3)]), pa.chunked_array([pa.nulls(4)])])
    assert fingerprint(pa.chunked_array([pa.nulls(3)])) == fingerprint(
        pa.chunked_array([pa.nulls(1), pa.nulls(2)])
    )
    # dictionary and nested types go through the generic rule, by value
    dict_a = pa.array(["x", "y", "x"]).dictionary_encode()
    dict_b = pa.array(["x", "y", "y"]).dictionary_encode()
    assert arrow_rules.arrow_digest(dict_a) is None
    distinct([dict_a, dict_b])
    assert fingerprint(dict_a) == fingerprint(pa.array(["x", "y", "x"]).dictionary_encode())
    lists = [pa.array([[1, 2], [3]]), pa.array([[1], [2, 3]]), pa.array([[1, 2], None])]
    distinct(lists)
    assert fingerprint(pa.array([[1, 2], [3]])) == fingerprint(lists[0])


# ---- through pandas ----------------------------------------------------------------------


def test_pandas_str_columns_are_hashed_from_arrow_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    s = pd.Series([f"user_{i % 997:05d}" for i in range(100_000)], dtype="str")
    if not isinstance(getattr(s.array, "_pa_array", None), pa.ChunkedArray):
        pytest.skip("this pandas keeps str columns as Python objects")
    before = fingerprint(s)

    def no_objects(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("converted to Python objects")

    monkeypatch.setattr(type(s.array), "to_numpy", no_objects)
    assert fingerprint(s) == before
    assert fingerprint(pd.DataFrame({"label": s})) == fingerprint(pd.DataFrame({"label": s}))


def test_pandas_arrow_columns_agree_across_chunking_and_round_trips() -> None:
    values = [f"v{i}" if i % 11 else None for i in range(5000)]
    one = pd.Series(pd.array(values, dtype="string[pyarrow]"))
    many = pd.concat([one.iloc[:10], one.iloc[10:2500], one.iloc[2500:]], ignore_index=True)
    assert many.array._pa_array.num_chunks == 3
    assert fingerprint(one) == fingerprint(many)
    assert fingerprint(one) == fingerprint(pickle.loads(pickle.dumps(one)))
    changed = one.copy()
    changed.iloc[4000] = "other"
    nulled = one.copy()
    nulled.iloc[1] = None
    distinct([one, changed, nulled, one.iloc[1:], one.astype(object)])


def test_pandas_dtypes_that_store_the_same_text_differently_do_not_collide() -> None:
    text = ["a", "b", None]
    candidates = [pd.Series(text, dtype="str"), pd.Series(text, dtype=object)]
    for dtype in ("string[python]", "string[pyarrow]", pd.ArrowDtype(pa.large_string())):
        candidates.append(pd.Series(text, dtype=dtype))
    distinct(candidates)
    ints = [pd.Series([1, None, 3], dtype=d) for d in ("Int64", "int64[pyarrow]", "float64")]
    distinct(ints)
    assert fingerprint(pd.Series([1, None, 3], dtype="int64[pyarrow]")) == fingerprint(
        pd.Series([1, None, 3], dtype="int64[pyarrow]")
    )
    assert fingerprint(pd.Series([1, None, 3], dtype="int64[pyarrow]")) != fingerprint(
        pd.Series([1, None, 4], dtype="int64[pyarrow]")
    )


def test_arrow_digests_are_equal_across_processes() -> None:
    code = (
        "import pandas as pd, pyarrow as pa\n"
        "from ipy_resume.fingerprint import fingerprint_hex\n"
        "s = pd.Series(['a', None, 'bc'] * 1000, dtype='str')\n"
        "c = pa.chunked_array([pa.array([1, None, 2]), pa.array([3])])\n"
        "print(fingerprint_hex(s), fingerprint_hex(c))\n"
    )
    out = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(out) == 1
    s = pd.Series(["a", None, "bc"] * 1000, dtype="str")
    c = pa.chunked_array([pa.array([1, None, 2]), pa.array([3])])
    from ipy_resume.fingerprint import fingerprint_hex

    assert out.pop().split() == [fingerprint_hex(s), fingerprint_hex(c)]
