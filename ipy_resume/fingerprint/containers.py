"""Built-in containers and subclasses of built-in types.

``list``/``tuple``/``OrderedDict`` hash their items' digests in order; ``dict``, ``set``,
``frozenset``, ``defaultdict``, ``mappingproxy`` and dict views hash them sorted, so insertion
order and ``PYTHONHASHSEED`` do not matter.  A subclass of a built-in type adds its class and
its instance ``__dict__``/``__slots__``.
"""

from __future__ import annotations

import array
import collections
import datetime
import itertools
import operator
import struct
import sys
import types
from collections.abc import Callable
from typing import Any

import xxhash

from .core import (
    CALL_MEMO,
    RESOLVED_ATOMIC,
    TOP_LEVEL_QUICK,
    Fingerprinter,
    Handler,
    Rule,
    add_exact,
    add_provider,
    composite_rule,
    resolve_rule,
)
from .primitives import (
    F64,
    MISSING,
    NAN_BYTES,
    NONE_DIGEST,
    atomic_bytearray,
    atomic_bytes,
    atomic_complex,
    atomic_float,
    atomic_int,
    atomic_str,
    hash128,
    pack_u64,
    tagged_digest,
)

# The loops below look up atomic values' rules themselves: it saves a call per item.

_FLOATS = {float}
_NAN = struct.unpack("<d", NAN_BYTES)[0]
_SWAP = sys.byteorder != "little"


def packed_floats(v: Any) -> bytes | None:
    """The items of a list or tuple made of floats only (exact type), as little-endian
    doubles, every NaN as the one NaN :func:`atomic_float` digests; None for any other.

    Since the key format after 0.1.0, such a sequence digests as ``hash128(tag + "f64" + NUL + these
    bytes)``: one hash instead of one per item.  That body is ``4 + 8n`` bytes, never a
    multiple of 16 as a body of item digests is, so the two forms never hash the same
    bytes.  (Keys of cells that read one changed with it: see docs/keys.md.)

    >>> packed_floats([1.0, -0.0]) == struct.pack("<2d", 1.0, -0.0)
    True
    >>> packed_floats([1.0, 2]) is None, packed_floats([]) is None
    (True, True)
    """
    if set(map(type, v)) != _FLOATS:
        return None
    return _float_bytes(v)


def _float_bytes(v: Any) -> bytes:
    """:func:`packed_floats` of items known to be exact floats."""
    arr = array.array("d", v)
    total = sum(arr)  # NaN when an item is (or when inf and -inf meet: the slow way then)
    if total != total:
        arr = array.array("d", [x if x == x else _NAN for x in arr])
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


_BUILTIN_ATOMIC: dict[type, Callable[[Any], bytes]] = {
    float: atomic_float,
    int: atomic_int,
    str: atomic_str,
}


def _builtin_rule(t: type) -> bool:
    """True while the rule for *t* (float, int or str) is the built-in one."""
    rule = RESOLVED_ATOMIC.get(t)
    if rule is None:  # not resolved since the rules last changed (or a registered one)
        resolve_rule(t)
        rule = RESOLVED_ATOMIC.get(t)
    return rule is _BUILTIN_ATOMIC[t]


_STRS = {str}
_INTS = {int}
# Below this many strs (or dict items) a digest per item costs less than packing them.
_PACK_MIN = 8
_ENCODE = operator.methodcaller("encode", "utf-8", "surrogatepass")
_CHUNK = 1024  # strings joined at a time: in cache, and a large list is never copied whole


class _Packed:
    """A packed body hashed as it is built, ended so that its length is 8 modulo 16.

    The item-by-item forms hash a multiple of 16 bytes after their tag (one digest per
    item or two per pair) and the packed floats 4 + 8n: a body of this form never has the
    length of either.  It ends with zero bytes and their count, so the padding is read
    back unambiguously.
    """

    def __init__(self, tag: bytes) -> None:
        self._hasher = xxhash.xxh3_128(tag)
        self._size = 0

    def add(self, data: bytes) -> None:
        self._hasher.update(data)
        self._size += len(data)

    def strs(self, items: Any) -> None:
        """Exact strs: their count, their UTF-8 bytes (each run of up to ``_CHUNK`` after
        its size), then each one's length in bytes."""
        self.add(b"str\0" + pack_u64(len(items)))
        lengths = array.array("Q")
        for start in range(0, len(items), _CHUNK):
            run = items[start : start + _CHUNK]
            text = "".join(run)
            if text.isascii():  # (a flag of the string: no scan) one byte per character
                lengths.extend(map(len, run))
                joined = text.encode("ascii")
            else:
                encoded = list(map(_ENCODE, run))
                lengths.extend(map(len, encoded))
                joined = b"".join(encoded)
            self.add(pack_u64(len(joined)))
            self.add(joined)
        if _SWAP:
            lengths.byteswap()
        self.add(lengths.tobytes())

    def digest(self) -> bytes:
        pad = (7 - self._size) % 16
        self._hasher.update(bytes(pad) + bytes([pad]))
        return self._hasher.digest()


def _int_bytes(v: Any) -> bytes | None:
    """Items known to be exact ints as little-endian 8-byte integers; None when one is past
    64 bits.  Such a sequence digests as ``hash128(tag + "i64" + NUL + these bytes)``, as
    floats do.

    >>> _int_bytes([1, -2]) == struct.pack("<2q", 1, -2), _int_bytes([1 << 63]) is None
    (True, True)
    """
    try:
        arr = array.array("q", v)
    except OverflowError:
        return None
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _packed_values(body: _Packed, values: list[Any], kind: type) -> bool:
    """Add *values*, all exact ints, floats or strs (*kind*), to *body*; False when the
    rule for *kind* is not the built-in one or an int is past 64 bits."""
    if not _builtin_rule(kind):
        return False
    if kind is str:
        body.strs(values)
        return True
    packed = _int_bytes(values) if kind is int else _float_bytes(values)
    if packed is None:
        return False
    body.add((b"i64\0" if kind is int else b"f64\0") + packed)
    return True


def _items(fp: Fingerprinter, v: Any, tag: bytes) -> bytes:
    dg, atomic = fp.digest_child, RESOLVED_ATOMIC.get
    if atomic(float) is not atomic_float and not _builtin_rule(float):
        # a rule registered for float: used as is
        buf = bytearray(tag)
        for item in v:
            a = atomic(type(item))
            buf += dg(item) if a is None else a(item)
        return hash128(buf)
    # floats only (the common input of small cells), ints only, strs only (labels, tokens,
    # file names): their bytes, hashed once
    fast = _packed_sequence(v, tag)
    if fast is not None:
        return fast
    # atomic_float inlined: the two calls per item were most of a mixed list's digest time
    # (the bytes are the same)
    buf = bytearray(tag)
    pack, nan = F64, NAN_BYTES
    for item in v:
        if type(item) is float:
            buf += hash128(b"float\0" + (pack(item) if item == item else nan))
            continue
        a = atomic(type(item))
        buf += dg(item) if a is None else a(item)
    return hash128(buf)


def _packed_sequence(v: Any, tag: bytes) -> bytes | None:
    """The digest of a list or tuple made of exact floats only, exact ints only or (8 or
    more) exact strs only, packed; None for any other (one look at the items' types)."""
    kinds = set(map(type, v))
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is float:
        return tagged_digest(tag + b"f64\0", _float_bytes(v)) if _builtin_rule(float) else None
    if kind is int:
        if not _builtin_rule(int):
            return None
        packed = _int_bytes(v)
        return None if packed is None else tagged_digest(tag + b"i64\0", packed)
    if kind is not str or len(v) < _PACK_MIN or not _builtin_rule(str):
        return None
    body = _Packed(tag)
    body.strs(v)
    return body.digest()


def _c_list(fp: Fingerprinter, v: Any) -> bytes:
    return _items(fp, v, b"list\0")


def c_tuple(fp: Fingerprinter, v: Any) -> bytes:
    return _items(fp, v, b"tuple\0")


def _quick(kind: type, handler: Handler, tag: bytes) -> Callable[[Any], bytes | None]:
    def quick(v: Any) -> bytes | None:
        # a key's input that is a list of floats: its digest without a traversal, while the
        # rules for its type and for float are the built-in ones (the same bytes as _items)
        entry = composite_rule(kind)
        if (
            entry is None
            or entry[0] is not handler
            or RESOLVED_ATOMIC.get(float) is not atomic_float
        ):
            return None
        return _packed_sequence(v, tag)

    return quick


TOP_LEVEL_QUICK.update(
    {list: _quick(list, _c_list, b"list\0"), tuple: _quick(tuple, c_tuple, b"tuple\0")}
)


def c_dict(fp: Fingerprinter, v: Any) -> bytes:
    fast = _packed_dict(v)
    if fast is not None:
        return fast
    dg, atomic = fp.digest_child, RESOLVED_ATOMIC.get
    pairs = []
    for key, value in dict.items(v):
        a = atomic(type(key))
        b = atomic(type(value))
        pairs.append((dg(key) if a is None else a(key)) + (dg(value) if b is None else b(value)))
    pairs.sort()
    return hash128(b"dict\0" + b"".join(pairs))


def _packed_dict(v: Any) -> bytes | None:
    """The digest of a dict whose keys are all exact strs (or all exact ints) and whose
    values are all exact ints, floats or strs, packed in the keys' sorted order (a
    vocabulary, a word count, a mapping of labels); None for any other."""
    if len(v) < _PACK_MIN:
        return None
    value_kinds = set(map(type, dict.values(v)))  # (before the sort: a mixed dict costs no more)
    if len(value_kinds) != 1:
        return None
    value_kind = value_kinds.pop()
    if value_kind not in _BUILTIN_ATOMIC:
        return None
    keys = dict.keys(v)
    kinds = set(map(type, keys))
    if kinds != _STRS and kinds != _INTS:
        return None
    key_kind = kinds.pop()
    if not _builtin_rule(key_kind):
        return None
    ordered = sorted(keys)  # (one type, no two equal: a total order, whatever the insertion)
    body = _Packed(b"dict\0packed\0")
    if key_kind is str:
        body.strs(ordered)
    else:
        packed = _int_bytes(ordered)
        if packed is None:
            return None
        body.add(b"i64\0" + packed)
    values = list(map(dict.__getitem__, itertools.repeat(v, len(ordered)), ordered))
    if not _packed_values(body, values, value_kind):
        return None
    return body.digest()


def _sorted_items(fp: Fingerprinter, v: Any) -> bytes:
    dg, atomic = fp.digest_child, RESOLVED_ATOMIC.get
    digests = []
    for item in v:
        a = atomic(type(item))
        digests.append(dg(item) if a is None else a(item))
    digests.sort()
    return b"".join(digests)


def _c_set(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"set\0" + _sorted_items(fp, v))


def _c_frozenset(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"frozenset\0" + _sorted_items(fp, v))


def _c_ordereddict(fp: Fingerprinter, v: Any) -> bytes:
    # OrderedDict equality depends on order, so the digest does too.
    return hash128(b"OrderedDict\0" + fp.pairs(collections.OrderedDict.items(v), ordered=True))


def _c_defaultdict(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"defaultdict\0" + fp.digest_child(v.default_factory) + fp.pairs(dict.items(v)))


def _c_mappingproxy(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"mappingproxy\0" + fp.pairs(v.items()))


def _c_dict_keys(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"dict_keys\0" + fp.unordered(v))


def _c_dict_values(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"dict_values\0" + fp.ordered(v))


def _c_dict_items(fp: Fingerprinter, v: Any) -> bytes:
    return hash128(b"dict_items\0" + fp.pairs(v))


def _c_slice(fp: Fingerprinter, v: slice) -> bytes:
    return hash128(
        b"slice\0" + fp.digest_child(v.start) + fp.digest_child(v.stop) + fp.digest_child(v.step)
    )


def _c_datetime(fp: Fingerprinter, v: datetime.datetime) -> bytes:
    naive = v.replace(tzinfo=None).isoformat().encode()
    return hash128(b"datetime\0" + fp.digest_child(v.tzinfo) + bytes([v.fold]) + naive)


def _c_time(fp: Fingerprinter, v: datetime.time) -> bytes:
    naive = v.replace(tzinfo=None).isoformat().encode()
    return hash128(b"time\0" + fp.digest_child(v.tzinfo) + bytes([v.fold]) + naive)


def _c_union(fp: Fingerprinter, v: Any) -> bytes:
    # int | str == str | int
    return hash128(b"union\0" + fp.unordered(v.__args__))


_BASE_CONTENT: dict[type, Handler] = {
    int: lambda fp, v: atomic_int(v),
    float: lambda fp, v: atomic_float(v),
    complex: lambda fp, v: atomic_complex(complex(v.real, v.imag)),
    str: lambda fp, v: atomic_str(v),
    bytes: lambda fp, v: atomic_bytes(v),
    bytearray: lambda fp, v: atomic_bytearray(v),
    list: _c_list,
    tuple: c_tuple,
    dict: c_dict,
    set: _c_set,
    frozenset: _c_frozenset,
    collections.OrderedDict: _c_ordereddict,
    collections.defaultdict: _c_defaultdict,
}
_BUILTIN_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def instance_state(v: Any) -> dict[str, Any] | None:
    """``__dict__`` and ``__slots__`` values of an instance, or None if it has neither."""
    state: dict[str, Any] = {}
    d = getattr(v, "__dict__", None)
    if isinstance(d, dict):
        state.update(d)
    for klass in type(v).__mro__:
        slots = klass.__dict__.get("__slots__")
        if slots is None:
            continue
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            attr = f"_{klass.__name__.lstrip('_')}{name}" if name.startswith("__") else name
            value = getattr(v, attr, MISSING)
            if value is not MISSING:
                state[f"slot:{attr}"] = value
    return state or None


def _c_builtin_subclass(fp: Fingerprinter, v: Any) -> bytes:
    t = type(v)
    content = next(_BASE_CONTENT[k] for k in t.__mro__ if k in _BASE_CONTENT)
    state = instance_state(v)
    state_digest = NONE_DIGEST if state is None else c_dict(fp, state)
    return hash128(b"subclass\0" + fp.digest_child(t) + content(fp, v) + state_digest)


def _builtin_subclass_rule(t: type) -> Rule | None:
    if issubclass(t, _BUILTIN_BASES):
        return (_c_builtin_subclass, CALL_MEMO)
    return None


add_exact(
    {
        list: (_c_list, CALL_MEMO),
        tuple: (c_tuple, CALL_MEMO),
        dict: (c_dict, CALL_MEMO),
        set: (_c_set, CALL_MEMO),
        frozenset: (_c_frozenset, CALL_MEMO),
        collections.OrderedDict: (_c_ordereddict, CALL_MEMO),
        collections.defaultdict: (_c_defaultdict, CALL_MEMO),
        types.MappingProxyType: (_c_mappingproxy, CALL_MEMO),
        type({}.keys()): (_c_dict_keys, CALL_MEMO),
        type({}.values()): (_c_dict_values, CALL_MEMO),
        type({}.items()): (_c_dict_items, CALL_MEMO),
        slice: (_c_slice, CALL_MEMO),
        datetime.datetime: (_c_datetime, CALL_MEMO),
        datetime.time: (_c_time, CALL_MEMO),
        types.UnionType: (_c_union, CALL_MEMO),
    }
)
# After library rules (numpy arrays, pandas frames, matplotlib containers subclass built-ins).
add_provider(_builtin_subclass_rule, order=50)
