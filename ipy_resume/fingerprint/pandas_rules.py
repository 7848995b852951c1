"""pandas: Series, DataFrames, Index and extension arrays, column by column.

Consulted only while pandas is imported.  Labels, index and column values are hashed; Arrow-backed
columns (the ``str`` dtype, ``ArrowDtype``) from their Arrow buffers (:mod:`.arrow_rules`), other
string columns as one buffer of UTF-8 text plus a missing-value mask, numeric columns as buffers.
"""

from __future__ import annotations

import sys
from typing import Any

import xxhash

from .arrow_rules import arrow_digest
from .core import CALL_MEMO, Fingerprinter, Handler, add_provider
from .numpy_rules import c_ndarray
from .primitives import atomic_int, hash128, pack_u64

# Strings joined per piece: bounds the text copied at once for a column of long documents.
_JOIN_CHUNK = 16_384


def _joined_strings(items: list[Any]) -> bytes | None:
    """Digest of a list of ``str`` in one pass over their UTF-8 bytes; None if not all are str.

    The strings are joined with NUL; that is only unambiguous when no string holds a NUL, which
    one count of the separators proves (else the caller falls back to hashing element by element).
    The digest is that of the whole joined text, however it is cut into pieces.
    """
    hasher = xxhash.xxh3_128(b"strings.joined\0" + pack_u64(len(items)))
    for start in range(0, len(items), _JOIN_CHUNK):
        piece = items[start : start + _JOIN_CHUNK]
        try:
            joined = "\0".join(piece)
        except TypeError:
            return None
        if joined.count("\0") != len(piece) - 1:
            return None
        if start:
            hasher.update(b"\0")
        hasher.update(joined.encode("utf-8", "surrogatepass"))
    return hasher.digest()


def _pd_object_values(fp: Fingerprinter, arr: Any) -> bytes:
    """An object ndarray from pandas: all-string data is hashed as one buffer of UTF-8 bytes."""
    import numpy as np

    pd = sys.modules["pandas"]
    if arr.ndim == 1:
        joined = _joined_strings(arr.tolist())
        if joined is not None:
            return hash128(b"pd.strings\0" + joined)
        try:
            mask = np.asarray(pd.isna(arr), dtype=bool)
        except Exception:
            mask = None
        if mask is not None and mask.shape == arr.shape and mask.any():
            # Where the values are is the mask; what they are (None, nan, NA, NaT: all "missing"
            # to pandas) is their one type; the strings between them are joined as above.
            kinds = set(map(type, arr[mask].tolist()))
            joined = _joined_strings(arr[~mask].tolist()) if len(kinds) == 1 else None
            if joined is not None:
                kind = fp.digest_child(kinds.pop())
                return hash128(b"pd.strings.masked\0" + kind + c_ndarray(fp, mask) + joined)
    return c_ndarray(fp, arr)


def _pd_values(fp: Fingerprinter, values: Any) -> bytes:
    """The values of a Series, Index or column: an ndarray or an ExtensionArray."""
    import numpy as np

    pd = sys.modules["pandas"]
    if isinstance(values, np.ndarray):
        if values.dtype.hasobject:
            return _pd_object_values(fp, values)
        return c_ndarray(fp, values)
    numpy_backed = getattr(pd.arrays, "NumpyExtensionArray", None) or pd.arrays.PandasArray
    if isinstance(values, numpy_backed):
        return _pd_values(fp, values.to_numpy())
    dtype = values.dtype
    if isinstance(values, pd.Categorical):
        return hash128(
            b"pd.Categorical\0"
            + fp.digest_child(values.categories)
            + (b"\1" if values.ordered else b"\0")
            + c_ndarray(fp, np.asarray(values.codes))
        )
    token = hash128(str(dtype).encode("utf-8", "surrogatepass"))
    pa = sys.modules.get("pyarrow")
    chunked = getattr(values, "_pa_array", None)
    if pa is not None and isinstance(chunked, pa.ChunkedArray):
        # Arrow-backed (the ``str`` dtype, ArrowDtype): from the buffers, no Python objects
        digest = arrow_digest(chunked)
        if digest is not None:
            return hash128(b"pd.arrow\0" + token + digest)
    asi8 = getattr(values, "asi8", None)
    if isinstance(asi8, np.ndarray):
        return hash128(b"pd.datetimelike\0" + token + c_ndarray(fp, asi8))
    data, mask = getattr(values, "_data", None), getattr(values, "_mask", None)
    if (
        isinstance(data, np.ndarray)
        and isinstance(mask, np.ndarray)
        and mask.dtype == bool
        and data.shape == mask.shape
        and not data.dtype.hasobject
    ):
        if mask.any():
            # what sits under the mask is arbitrary
            data = np.where(mask, np.zeros((), dtype=data.dtype), data)
        return hash128(b"pd.masked\0" + token + c_ndarray(fp, data) + c_ndarray(fp, mask))
    if isinstance(dtype, pd.StringDtype):
        # The python-backed StringArray keeps its object ndarray; others convert (a copy).
        raw = getattr(values, "_ndarray", None)
        if not (isinstance(raw, np.ndarray) and raw.dtype.hasobject):
            raw = values.to_numpy(dtype=object)
        return hash128(b"pd.string\0" + token + _pd_object_values(fp, raw))
    return hash128(b"pd.extension\0" + token + fp.ordered(values))


def _c_pd_index(fp: Fingerprinter, idx: Any) -> bytes:
    pd = sys.modules["pandas"]
    kind = fp.digest_child(type(idx))
    names = fp.digest_child(list(idx.names))
    if isinstance(idx, pd.MultiIndex):
        import numpy as np

        levels = fp.ordered(idx.levels)
        codes = b"".join(c_ndarray(fp, np.asarray(c)) for c in idx.codes)
        return hash128(b"pd.MultiIndex\0" + kind + names + levels + codes)
    if isinstance(idx, pd.RangeIndex):
        bounds = atomic_int(idx.start) + atomic_int(idx.stop) + atomic_int(idx.step)
        return hash128(b"pd.RangeIndex\0" + kind + names + bounds)
    freq = fp.digest_child(getattr(idx, "freqstr", None))
    return hash128(b"pd.Index\0" + kind + names + freq + _pd_values(fp, idx.array))


def _c_pd_series(fp: Fingerprinter, s: Any) -> bytes:
    return hash128(
        b"pd.Series\0"
        + fp.digest_child(type(s))
        + fp.digest_child(s.name)
        + fp.digest_child(s.index)
        + fp.digest_child(s.attrs)
        + _pd_values(fp, s.array)
    )


def _c_pd_frame(fp: Fingerprinter, df: Any) -> bytes:
    parts = [
        b"pd.DataFrame\0",
        fp.digest_child(type(df)),
        fp.digest_child(df.columns),
        fp.digest_child(df.index),
        fp.digest_child(df.attrs),
    ]
    # A column's values as its block stores them (an ndarray, or the extension array
    # ``Series.array`` gives): the same digest as ``df.iloc[:, i].array``, whose NumPy
    # wrapper unwraps to that ndarray, without building a Series per column (two thirds
    # of a wide frame's time).  Read only, so pandas' copy-on-write tracking is not needed.
    column = getattr(df, "_get_column_array", None)
    if column is None:
        columns = df.iloc
        column = lambda i: columns[:, i].array  # noqa: E731  (pandas without the method)
    for i in range(df.shape[1]):
        parts.append(_pd_values(fp, column(i)))
    return hash128(b"".join(parts))


def _c_pd_array(fp: Fingerprinter, arr: Any) -> bytes:
    return hash128(b"pd.array\0" + fp.digest_child(type(arr)) + _pd_values(fp, arr))


def _pandas_rule(t: type) -> tuple[Handler, int] | None:
    pd = sys.modules["pandas"]
    extensions = getattr(getattr(pd, "api", None), "extensions", None)
    rules = [
        (getattr(pd, "DataFrame", None), _c_pd_frame),
        (getattr(pd, "Series", None), _c_pd_series),
        (getattr(pd, "Index", None), _c_pd_index),
        (getattr(extensions, "ExtensionArray", None), _c_pd_array),
    ]
    for base, handler in rules:
        if isinstance(base, type) and issubclass(t, base):
            return (handler, CALL_MEMO)
    return None


add_provider(_pandas_rule, order=30, requires="pandas")
