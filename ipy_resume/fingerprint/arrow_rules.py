"""pyarrow arrays: hashed from their buffers, whatever the chunking, never through Python objects.

Consulted only while pyarrow is imported (pandas' ``str`` columns, ``ArrowDtype`` columns,
``pa.Array`` and ``pa.ChunkedArray`` values).  An array of a supported type is digested from
its type, its length and three streams, each hashed as the concatenation over the chunks of:

* *validity*: one byte per element, 1 where the element is valid (only when some element is
  null; a column without nulls hashes no stream, with or without a validity bitmap);
* *ends* (strings and binaries): where each element ends in the concatenation of all the
  chunks' value bytes, in the offsets' own width (``int64`` for a ``string`` column whose
  text passes 2 GiB);
* *data*: the value bytes: a string chunk's bytes from its first offset to its last, a
  fixed-width chunk's ``width * length`` bytes from its slice offset, a boolean chunk's bits
  as one byte per element.

So a column's digest depends on its logical values only: cutting it into other chunks, or
slicing it (a slice offset into shared buffers), gives the same digest, and the common case
(one chunk whose offsets start at 0) hashes the buffers in place, without a copy.  What sits
in a null slot is hashed too (a string null of non-zero length, a number under a null): two
columns that differ only there get different digests, a spurious difference, never a
spurious match.  ``string`` and ``large_string`` (and ``str``/``string`` pandas dtypes) are
different types and never share a digest.  Other types (dictionary, nested, extension) are
left to the caller's generic rule (:func:`arrow_digest` returns None).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import xxhash

from .core import CALL_MEMO, Fingerprinter, Handler, add_provider
from .primitives import hash128, pack_u64

# Bits are unpacked to bytes this many elements at a time (a multiple of 8).
_BITS_PIECE = 1 << 23
# Past this many bytes of text, the ends of a ``string`` column no longer fit its int32 offsets.
_NARROW_ENDS_MAX = (1 << 31) - 1


def _bits(buf: Any, offset: int, length: int) -> Iterator[Any]:
    """The bits ``offset .. offset+length`` of a little-endian bitmap, one uint8 per bit."""
    import numpy as np

    raw = np.frombuffer(buf, dtype=np.uint8)
    for start in range(offset, offset + length, _BITS_PIECE):
        stop = min(start + _BITS_PIECE, offset + length)
        lo = start // 8
        piece = np.unpackbits(raw[lo : (stop + 7) // 8], bitorder="little")
        yield piece[start - lo * 8 : stop - lo * 8]


def _ones(length: int) -> Iterator[Any]:
    import numpy as np

    for start in range(0, length, _BITS_PIECE):
        yield np.ones(min(_BITS_PIECE, length - start), dtype=np.uint8)


def _kind(pa: Any, typ: Any) -> tuple[str, Any] | None:
    """How a type's values are laid out: ``("strings", offset dtype)``, ``("fixed", width)``,
    ``("bits", None)``, ``("null", None)``; None for the types left to the generic rule."""
    import numpy as np

    types = pa.types
    if types.is_string(typ) or types.is_binary(typ):
        return ("strings", np.dtype("<i4"))
    if types.is_large_string(typ) or types.is_large_binary(typ):
        return ("strings", np.dtype("<i8"))
    if types.is_boolean(typ):
        return ("bits", None)
    if types.is_null(typ):
        return ("null", None)
    fixed = (
        types.is_integer(typ)
        or types.is_floating(typ)
        or types.is_timestamp(typ)
        or types.is_date(typ)
        or types.is_time(typ)
        or types.is_duration(typ)
        or types.is_decimal(typ)
        or types.is_fixed_size_binary(typ)
    )
    if not fixed or isinstance(typ, pa.ExtensionType):
        return None
    width = typ.bit_width
    if width <= 0 or width % 8:
        return None
    return ("fixed", width // 8)


def arrow_digest(value: Any) -> bytes | None:
    """Digest of a ``pa.Array`` or ``pa.ChunkedArray`` from its buffers; None if unsupported.

    >>> import pyarrow as pa
    >>> one = pa.chunked_array([["a", "bc", None, "d"]])
    >>> two = pa.chunked_array([["a"], ["bc", None], ["d"]])
    >>> arrow_digest(one) == arrow_digest(two) != arrow_digest(pa.chunked_array([["a", "b"]]))
    True
    """
    import numpy as np

    pa = sys.modules["pyarrow"]
    chunks = value.chunks if isinstance(value, pa.ChunkedArray) else [value]
    typ = value.type
    kind = _kind(pa, typ)
    if kind is None:
        return None
    layout, param = kind
    length = sum(len(c) for c in chunks)
    nulls = sum(c.null_count for c in chunks)
    head = b"arrow\0" + str(typ).encode("utf-8", "surrogatepass") + b"\0"
    head += pack_u64(length) + pack_u64(nulls)
    validity = xxhash.xxh3_128(b"arrow.validity\0")
    ends = xxhash.xxh3_128(b"arrow.ends\0")
    data = xxhash.xxh3_128(b"arrow.data\0")
    if layout == "strings":
        spans: list[tuple[Any, Any, int, int]] = []
        total = 0
        for c in chunks:
            n = len(c)
            offsets = np.frombuffer(c.buffers()[1], dtype=param)[c.offset : c.offset + n + 1]
            if n:
                first, last = int(offsets[0]), int(offsets[-1])
                spans.append((c, offsets, first, last))
                total += last - first
        wide = param.itemsize == 8 or total > _NARROW_ENDS_MAX
        ends_dtype = np.dtype("<i8") if wide else param
        running = 0
        for c, offsets, first, last in spans:
            tail = offsets[1:]
            if first == running == 0 and tail.dtype == ends_dtype:
                ends.update(tail)  # in place: the common case of one chunk from 0
            else:
                ends.update((tail.astype(ends_dtype) - (first - running)).astype(ends_dtype))
            if last > first:
                data.update(memoryview(c.buffers()[2])[first:last])
            running += last - first
    elif layout == "fixed":
        for c in chunks:
            if len(c):
                start = c.offset * param
                data.update(memoryview(c.buffers()[1])[start : start + len(c) * param])
    elif layout == "bits":
        for c in chunks:
            if len(c):
                for piece in _bits(c.buffers()[1], c.offset, len(c)):
                    data.update(piece)
    if nulls and layout != "null":  # (every element of the null type is null)
        for c in chunks:
            bitmap = c.buffers()[0]
            if not len(c):
                continue
            if c.null_count and bitmap is not None:
                pieces = _bits(bitmap, c.offset, len(c))
            else:
                pieces = _ones(len(c))
            for piece in pieces:
                validity.update(piece)
    return hash128(head + validity.digest() + ends.digest() + data.digest())


def _c_arrow(fp: Fingerprinter, value: Any) -> bytes:
    digest = arrow_digest(value)
    if digest is None:
        from .reduce import c_reduce

        return c_reduce(fp, value)
    return hash128(b"pa.array\0" + fp.digest_child(type(value)) + digest)


def _arrow_rule(t: type) -> tuple[Handler, int] | None:
    pa = sys.modules["pyarrow"]
    for name in ("ChunkedArray", "Array"):
        base = getattr(pa, name, None)
        if isinstance(base, type) and issubclass(t, base):
            return (_c_arrow, CALL_MEMO)
    return None


add_provider(_arrow_rule, order=25, requires="pyarrow")
