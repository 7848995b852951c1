"""numpy: arrays by dtype, shape, order and raw buffer; scalars; random generators by state.

Consulted only while numpy is imported.  Contiguous arrays are hashed in place, without a
copy; other strided arrays in logical C order through bounded chunks (at most 16 MB at a
time), so a strided view equals its contiguous copy.  An F-contiguous array is hashed in memory
order with an ``F`` flag.  Object arrays recurse element by element.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import xxhash

from ..runtime import modrefs, pages
from .containers import c_dict, instance_state
from .core import CALL_MEMO, Fingerprinter, Rule, add_provider
from .core import address as _object_address
from .primitives import NONE_DIGEST, hash128, pack_u64
from .reduce import c_reduce

# Strided arrays are copied to contiguous memory this many bytes at a time.
_CHUNK_BYTES = 16 << 20

# Kinds whose raw bytes are the value (no pointers): bool, ints, floats, complex, datetimes,
# bytes, unicode and void/structured.
_RAW_KINDS = frozenset("biufcmMSUV")


def _dtype_token(dt: Any) -> bytes:
    if dt.fields is None and dt.subdtype is None:
        text = dt.str if dt.kind in _RAW_KINDS or dt.kind == "O" else f"{dt.str}|{dt!r}"
    else:
        text = f"{dt.str}|{dt.descr!r}|{dt.itemsize}|{dt.isalignedstruct}"
    return text.encode()


# structured dtype -> the same fields without gaps, or None when it has no gaps
_PACKED: dict[Any, Any] = {}
_PACKED_MAX = 1_000


def _without_padding(dt: Any) -> Any:
    """*dt* repacked without the bytes no field covers, or None when nothing is left out.

    Padding bytes are not part of a structured value: numpy leaves them as they were in
    memory, and a copy, a pickle or an HDF5 round trip may set them to anything. Hashing
    them would give a restored value another key than the one it was saved with.
    """
    if dt.fields is None and dt.subdtype is None:
        return None
    if dt in _PACKED:
        return _PACKED[dt]
    packed = _packed(dt)
    result = None if packed == dt else packed
    if len(_PACKED) < _PACKED_MAX:
        _PACKED[dt] = result
    return result


def _packed(dt: Any) -> Any:
    import numpy as np

    if dt.subdtype is not None:
        base, shape = dt.subdtype
        inner = _packed(base)
        return dt if inner == base else np.dtype((inner, shape))
    if dt.names is None:
        return dt
    formats = [_packed(dt.fields[name][0]) for name in dt.names]
    return np.dtype({"names": list(dt.names), "formats": formats})


def _c_order_chunks(arr: Any) -> Iterator[Any]:
    """Contiguous pieces of *arr* in logical C order, each at most about 16 MB."""
    import numpy as np

    if arr.flags.c_contiguous:
        yield arr
        return
    row_bytes = arr.itemsize * math.prod(arr.shape[1:])
    if arr.ndim == 1 or row_bytes <= _CHUNK_BYTES:
        step = max(1, _CHUNK_BYTES // max(row_bytes, 1))
        for start in range(0, arr.shape[0], step):
            yield np.ascontiguousarray(arr[start : start + step])
    else:
        for i in range(arr.shape[0]):
            yield from _c_order_chunks(arr[i])


# Arrays up to this size are hashed from one copy of their bytes: the same digest as hashing
# them in place (xxh3 does not depend on how the input is split), at a fraction of the cost of
# setting that up, which dominates for the small arrays of a figure's artists and transforms.
_SMALL_BYTES = 1 << 16
# address(dtype) -> (dtype, digest of its token) for dtypes without fields or sub-arrays,
# whose token cannot change (only a structured dtype's field names can be set); None for
# dtypes whose arrays are not raw bytes.  The dtype is kept so its address is not reused.
# (The address as the traversal's memo takes it: id() runs the process's audit hooks.)
_DTYPE_HEADS: dict[int, tuple[Any, bytes | None]] = {}
_DTYPE_HEADS_MAX = 1_000
# shape -> its encoding in the digest (ndim and sizes): a figure's arrays have few shapes
_SHAPES: dict[tuple[int, ...], bytes] = {}
_SHAPES_MAX = 10_000


def small_array_digest(arr: Any) -> bytes | None:
    """:func:`c_ndarray`'s digest of a small C-contiguous array of raw values, else None.

    Such an array refers to no other object, so a caller may digest it inline, like an atomic
    value, without the fingerprinter's bookkeeping.
    """
    dt = arr.dtype
    cached = _DTYPE_HEADS.get(_object_address(dt))
    if cached is None:
        if dt.fields is not None or dt.subdtype is not None:
            return None
        token = None if dt.hasobject or dt.kind not in _RAW_KINDS else hash128(_dtype_token(dt))
        if len(_DTYPE_HEADS) < _DTYPE_HEADS_MAX:
            _DTYPE_HEADS[_object_address(dt)] = (dt, token)
    else:
        token = cached[1]
    if token is None or arr.nbytes > _SMALL_BYTES or not arr.flags.c_contiguous:
        return None
    shape = arr.shape
    dims = _SHAPES.get(shape)
    if dims is None:
        dims = pack_u64(len(shape)) + b"".join(map(pack_u64, shape))
        if len(_SHAPES) < _SHAPES_MAX:
            _SHAPES[shape] = dims
    return hash128(b"ndarray\0" + token + dims + b"C" + arr.tobytes())


def c_ndarray(fp: Fingerprinter, arr: Any) -> bytes:
    small = small_array_digest(arr)
    if small is not None:
        return small
    dt = arr.dtype
    head = hash128(_dtype_token(dt)) + pack_u64(arr.ndim) + b"".join(pack_u64(n) for n in arr.shape)
    if dt.hasobject or dt.kind not in _RAW_KINDS:
        return hash128(b"ndarray-items\0" + head + fp.ordered(arr.flat))
    packed = _without_padding(dt)
    if packed is not None:  # the fields' bytes, in order (the dtype token names the layout)
        arr = arr.astype(packed, order="C")
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        # The transpose of an F-contiguous array is a C-contiguous view of the same memory.
        order, flat = (b"C", arr) if arr.flags.c_contiguous else (b"F", arr.T)
        tag = _tag(head, order)
        if pages.active() and arr.nbytes >= pages.MEMO_MIN:
            # A restored array mapped from the store: hashed again only if a page was written.
            address = arr.__array_interface__["data"][0]
            return pages.digest(address, arr.nbytes, tag, lambda: _hash_chunks(tag, (flat,)))
        return _hash_chunks(tag, (flat,))
    return _hash_chunks(b"ndarray\0" + head + b"C", _c_order_chunks(arr))


def _tag(head: bytes, order: bytes) -> bytes:
    return b"ndarray\0" + head + order


def remember(arr: Any, digest: bytes) -> bool:
    """Let *digest* stand for the fingerprint of *arr*, an array restored as a map of a verified
    blob, for as long as its pages are not written; False when it cannot (then it is hashed).

    A checkpoint records each value's fingerprint; once its blob has been verified against the
    same checkpoint's checksum, the map holds the bytes that fingerprint was computed over, so
    hashing them again for the next cell's key would only repeat it.  Only plain,
    contiguous arrays of raw values get this (the others are hashed as usual).

    >>> remember(restored_array, bytes.fromhex(manifest.info["output_digests"]["raw"]))  # doctest: +SKIP
    True
    """
    import numpy as np

    if type(arr) is not np.ndarray or len(digest) != 16:
        return False
    if arr.nbytes < pages.MEMO_MIN or not pages.active():
        return False
    dt = arr.dtype
    if dt.hasobject or dt.kind not in _RAW_KINDS or _without_padding(dt) is not None:
        return False
    if small_array_digest(arr) is not None:
        return False  # (small arrays are digested inline, never through the map's memo)
    if arr.flags.c_contiguous:
        order = b"C"
    elif arr.flags.f_contiguous:
        order = b"F"
    else:
        return False
    head = hash128(_dtype_token(dt)) + pack_u64(arr.ndim) + b"".join(pack_u64(n) for n in arr.shape)
    address = arr.__array_interface__["data"][0]
    return pages.remember(address, arr.nbytes, _tag(head, order), digest)


def _hash_chunks(tag: bytes, chunks: Iterable[Any]) -> bytes:
    import numpy as np

    hasher = xxhash.xxh3_128(tag)
    for chunk in chunks:
        if chunk.nbytes:
            hasher.update(chunk.reshape(-1).view(np.uint8))
        del chunk
    return hasher.digest()


def _c_ndarray_subclass(fp: Fingerprinter, arr: Any) -> bytes:
    import numpy as np

    state = instance_state(arr)
    return hash128(
        b"ndarray-subclass\0"
        + fp.digest_child(type(arr))
        + c_ndarray(fp, arr.view(np.ndarray))
        + (NONE_DIGEST if state is None else c_dict(fp, state))
    )


def _c_masked_array(fp: Fingerprinter, arr: Any) -> bytes:
    import numpy as np

    ma = sys.modules["numpy.ma"]
    return hash128(
        b"masked-array\0"
        + fp.digest_child(type(arr))
        + c_ndarray(fp, arr.view(np.ndarray))
        + fp.digest_child(ma.getmask(arr))
        + fp.digest_child(arr.fill_value)
        + fp.digest_child(bool(arr.hardmask))
    )


_SCALAR_TOKENS: dict[str, bytes] = {}


def _a_numpy_scalar(v: Any) -> bytes:
    dt = v.dtype
    # for these kinds dtype.str is the whole token
    token = _SCALAR_TOKENS.get(dt.str) if dt.kind in _RAW_KINDS else None
    if token is None:
        token = hash128(_dtype_token(dt))
        if dt.kind in _RAW_KINDS and dt.fields is None and dt.subdtype is None:
            _SCALAR_TOKENS[dt.str] = token
    return hash128(b"npscalar\0" + token + v.tobytes())


def _c_numpy_void(fp: Fingerprinter, v: Any) -> bytes:
    token = hash128(_dtype_token(v.dtype))
    if v.dtype.hasobject:
        return hash128(b"npvoid-items\0" + token + fp.digest_child(v.item()))
    packed = _without_padding(v.dtype)
    if packed is not None:
        import numpy as np

        v = np.asarray(v).astype(packed)
    return hash128(b"npscalar\0" + token + v.tobytes())


def _c_np_generator(fp: Fingerprinter, g: Any) -> bytes:
    return hash128(b"np.Generator\0" + fp.digest_child(type(g)) + fp.digest_child(g.bit_generator))


def _c_np_bit_generator(fp: Fingerprinter, bg: Any) -> bytes:
    seed_seq = getattr(bg, "seed_seq", getattr(bg, "_seed_seq", None))
    return hash128(
        b"np.BitGenerator\0"
        + fp.digest_child(type(bg))
        + fp.digest_child(bg.state)
        + fp.digest_child(seed_seq)
    )


def _c_np_random_state(fp: Fingerprinter, rs: Any) -> bytes:
    if modrefs.lookup(rs) is not None:
        # numpy's global RandomState (a scipy distribution holds it): numpy's own object, keyed
        # by reference as such objects are (see c_reduce), not by the state every draw and every
        # cell's seeding changes; otherwise whatever holds it would count as changed by each cell
        return c_reduce(fp, rs)
    return hash128(
        b"np.RandomState\0"
        + fp.digest_child(type(rs))
        + fp.digest_child(rs.get_state(legacy=False))
    )


def _c_np_seed_sequence(fp: Fingerprinter, s: Any) -> bytes:
    return hash128(
        b"np.SeedSequence\0"
        + fp.digest_child(type(s))
        + fp.digest_child(s.entropy)
        + fp.digest_child(tuple(s.spawn_key))
        + fp.digest_child(s.pool_size)
        + fp.digest_child(s.n_children_spawned)
    )


def _numpy_rule(t: type) -> Rule | None:
    np = sys.modules["numpy"]
    # Only classes that exist: a module still being imported lacks some of them, and a value
    # cannot be an instance of a class that does not exist yet.
    ndarray = getattr(np, "ndarray", None)
    if ndarray is not None and issubclass(t, ndarray):
        if t is ndarray or issubclass(t, np.memmap):
            return (c_ndarray, CALL_MEMO)
        ma = sys.modules.get("numpy.ma")
        masked = getattr(ma, "masked", None)
        if masked is not None and issubclass(t, type(masked)):
            return (c_reduce, CALL_MEMO)
        masked_array = getattr(ma, "MaskedArray", None)
        if masked_array is not None and issubclass(t, masked_array):
            return (_c_masked_array, CALL_MEMO)
        return (_c_ndarray_subclass, CALL_MEMO)
    void = getattr(np, "void", None)
    if void is not None and issubclass(t, void):
        return (_c_numpy_void, CALL_MEMO)
    generic = getattr(np, "generic", None)
    if generic is not None and issubclass(t, generic):
        return _a_numpy_scalar
    random = sys.modules.get("numpy.random")
    rules = [
        ("Generator", _c_np_generator),
        ("BitGenerator", _c_np_bit_generator),
        ("RandomState", _c_np_random_state),
        ("SeedSequence", _c_np_seed_sequence),
    ]
    for name, handler in rules:
        base = getattr(random, name, None)
        if isinstance(base, type) and issubclass(t, base):
            return (handler, CALL_MEMO)
    return None


add_provider(_numpy_rule, order=20, requires="numpy")
