"""The primitives a fingerprint rule is built from: the hash, byte packing, tags and atoms.

Every rule module (``containers``, ``code``, ``numpy_rules``, ``pandas_rules``, ``reduce``,
``rules``) builds its digests from these, so two rules that mean the same bytes get the same
digest.  A digest is 16 bytes of ``xxh3_128``; a composite's digest is
``hash128(tag + children's digests)``, where the tag names the kind of value and ends in a NUL
byte.  Changing any of these changes every stored key: they are part of the store format.

- :data:`hash128` -- ``xxh3_128`` of one buffer; :func:`digest_bytes` of length-prefixed parts;
  :func:`tagged_digest` of a tag and a body of any size (streamed when large).
- :data:`pack_u64` -- a length or count as 8 little-endian bytes.
- ``atomic_*`` -- the digests of values that refer to no other object (``atomic_int(3)``);
  :data:`EXACT_ATOMIC` maps each exact type to its atomic rule.
- :data:`NONE_DIGEST`, :data:`EMPTY_CELL_DIGEST` -- digests of ``None`` and of an empty closure
  cell; :data:`MISSING` -- a sentinel for "no such attribute"; :data:`HEAPTYPE` -- the type flag
  of classes created at run time.
- :func:`qualified_name` -- ``module.qualname`` of a type, as tags and messages spell it;
  :func:`exception_reason` -- an exception as one short line.

Handlers of composite values are named ``c_<kind>`` (``containers.c_dict``) and take
``(fingerprinter, value)``; see :mod:`ipy_resume.fingerprint.core` for how they are called.

>>> hash128(b"str\\0" + b"a") == atomic_str("a")
True
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import math
import pathlib
import struct
import uuid
from collections.abc import Callable
from typing import Any

import xxhash

Atomic = Callable[[Any], bytes]

hash128 = xxhash.xxh3_128_digest
pack_u64 = struct.Struct("<Q").pack
F64 = struct.Struct("<d").pack  # a float's bytes in a digest (containers inline it)
_q3 = struct.Struct("<qqq").pack

# Bodies above this size are fed to a streaming hasher instead of being concatenated: the
# digest is the same, but a 1 GB bytes value does not cost another 1 GB.
_STREAM_MIN = 1 << 20

_BYTES_ONLY = {bytes}

MISSING = object()
HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes created at run time, which may be collected


def digest_bytes(*parts: bytes | bytearray | memoryview) -> bytes:
    """Return the 16-byte ``xxh3_128`` digest of length-prefixed *parts*.

    Each part is preceded by its length, so ``(b"ab", b"c")`` and ``(b"a", b"bc")`` differ.
    Large contiguous buffers are hashed in place, without a copy.

    >>> digest_bytes(b"ab", b"c") != digest_bytes(b"a", b"bc")
    True
    >>> len(digest_bytes(b"key=", memoryview(b"value")))
    16
    """
    if parts and set(map(type, parts)) == _BYTES_ONLY:  # (a key's parts: small bytes)
        sizes = list(map(len, parts))
        if max(sizes) < _STREAM_MIN:
            return hash128(b"".join(map(bytes.__add__, map(pack_u64, sizes), parts)))
    buf = bytearray()
    hasher = None
    for part in parts:
        if isinstance(part, memoryview):
            if not part.c_contiguous:
                part = part.tobytes()
            size = part.nbytes if isinstance(part, memoryview) else len(part)
        else:
            size = len(part)
        buf += pack_u64(size)
        if size >= _STREAM_MIN:
            if hasher is None:
                hasher = xxhash.xxh3_128()
            hasher.update(buf)
            buf.clear()
            hasher.update(part)
        else:
            buf += part
    if hasher is None:
        return hash128(buf)
    hasher.update(buf)
    return hasher.digest()


def tagged_digest(tag: bytes, body: bytes | bytearray) -> bytes:
    """Digest of ``tag + body``; *tag* ends in a NUL byte."""
    if len(body) < _STREAM_MIN:
        return hash128(tag + body)
    hasher = xxhash.xxh3_128(tag)
    hasher.update(body)
    return hasher.digest()


def qualified_name(t: type) -> str:
    module = getattr(t, "__module__", None)
    qualname = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def exception_reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# ---- atomic values: no references to other objects -------------------------------------------

NAN_BYTES = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"  # every NaN digests as this one


def _f64_bytes(v: float) -> bytes:
    return NAN_BYTES if math.isnan(v) else F64(v)


def atomic_int(v: int) -> bytes:
    return hash128(b"int\0" + int.to_bytes(v, (int.bit_length(v) + 8) >> 3, "little", signed=True))


def atomic_float(v: float) -> bytes:
    return hash128(b"float\0" + _f64_bytes(v))


def atomic_complex(v: complex) -> bytes:
    return hash128(b"complex\0" + _f64_bytes(v.real) + _f64_bytes(v.imag))


def atomic_str(v: str) -> bytes:
    data = str.encode(v, "utf-8", "surrogatepass")
    if len(data) < _STREAM_MIN:
        return hash128(b"str\0" + data)
    return tagged_digest(b"str\0", data)


def atomic_bytes(v: bytes) -> bytes:
    return tagged_digest(b"bytes\0", v)


def atomic_bytearray(v: bytearray) -> bytes:
    return tagged_digest(b"bytearray\0", v)


def atomic_memoryview(v: memoryview) -> bytes:
    head = digest_bytes(v.format.encode(), b"".join(pack_u64(n) for n in v.shape or ()))
    hasher = xxhash.xxh3_128(b"memoryview\0" + head)
    hasher.update(v if v.c_contiguous else v.tobytes())
    return hasher.digest()


def atomic_range(v: range) -> bytes:
    return hash128(b"range\0" + atomic_int(v.start) + atomic_int(v.stop) + atomic_int(v.step))


def atomic_decimal(v: decimal.Decimal) -> bytes:
    return hash128(b"decimal\0" + str(v).encode())


def atomic_fraction(v: fractions.Fraction) -> bytes:
    return hash128(b"fraction\0" + atomic_int(v.numerator) + atomic_int(v.denominator))


def atomic_date(v: datetime.date) -> bytes:
    return hash128(b"date\0" + v.isoformat().encode())


def atomic_timedelta(v: datetime.timedelta) -> bytes:
    return hash128(b"timedelta\0" + _q3(v.days, v.seconds, v.microseconds))


def atomic_uuid(v: uuid.UUID) -> bytes:
    return hash128(b"uuid\0" + v.bytes)


def atomic_path(v: pathlib.PurePath) -> bytes:
    return digest_bytes(
        b"path", type(v).__qualname__.encode(), str(v).encode("utf-8", "surrogatepass")
    )


def _constant(name: bytes) -> Atomic:
    value = hash128(b"const\0" + name)
    return lambda _: value


NONE_DIGEST = hash128(b"const\0None")
_TRUE_DIGEST = hash128(b"bool\0\x01")
_FALSE_DIGEST = hash128(b"bool\0\x00")
EMPTY_CELL_DIGEST = hash128(b"const\0empty-cell")

EXACT_ATOMIC: dict[type, Atomic] = {
    type(None): lambda _: NONE_DIGEST,
    bool: lambda v: _TRUE_DIGEST if v else _FALSE_DIGEST,
    int: atomic_int,
    float: atomic_float,
    complex: atomic_complex,
    str: atomic_str,
    bytes: atomic_bytes,
    bytearray: atomic_bytearray,
    memoryview: atomic_memoryview,
    range: atomic_range,
    type(...): _constant(b"Ellipsis"),
    type(NotImplemented): _constant(b"NotImplemented"),
    decimal.Decimal: atomic_decimal,
    fractions.Fraction: atomic_fraction,
    datetime.date: atomic_date,
    datetime.timedelta: atomic_timedelta,
    uuid.UUID: atomic_uuid,
    pathlib.PurePosixPath: atomic_path,
    pathlib.PureWindowsPath: atomic_path,
    pathlib.PosixPath: atomic_path,
    pathlib.WindowsPath: atomic_path,
}
