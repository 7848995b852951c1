"""Arrays in the store: the HDF5 layout of an array blob, and where an array's memory is.

A top-level array that owns its memory is stored as an HDF5 file of one contiguous
dataset whose data starts at an aligned offset (:func:`plan_array`), so a restore maps
it instead of reading it (:func:`decode_array`).  The other helpers say which memory an
array views (:func:`array_root`, :func:`data_pointer`), so that values sharing a memory
share it again after a load; :mod:`.codecs` builds on them for pickled values.
"""

from __future__ import annotations

import functools
import io
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ARRAY_BLOB_MIN",
    "ATOMS",
    "DATA_ALIGNMENT",
    "ROOT_SLACK_MIN",
    "ArrayPlan",
    "array_blob_eligible",
    "array_root",
    "data_pointer",
    "decode_array",
    "dtype_from_json",
    "dtype_to_json",
    "flat",
    "plan_array",
    "sibling_roots",
    "simple_layout",
    "whole_view",
]

ARRAY_BLOB_MIN = 64 * 1024
"""Top-level arrays at least this large get their own HDF5 blob."""


DATA_ALIGNMENT = 4096
"""File offset alignment of an HDF5 blob's data."""
_DATASET = "data"


def _descr_to_json(descr: Any) -> Any:
    if isinstance(descr, str):
        return descr
    out = []
    for field in descr:
        name, sub, *shape = field
        item: list[Any] = [list(name) if isinstance(name, tuple) else name, _descr_to_json(sub)]
        if shape:
            item.append(list(shape[0]))
        out.append(item)
    return out


def _descr_from_json(obj: Any) -> Any:
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, list):
        raise ValueError(f"bad dtype description {obj!r}")
    fields: list[tuple[Any, ...]] = []
    for item in obj:
        if not isinstance(item, list) or len(item) not in (2, 3):
            raise ValueError(f"bad dtype field {item!r}")
        name = tuple(item[0]) if isinstance(item[0], list) else item[0]
        field: tuple[Any, ...] = (name, _descr_from_json(item[1]))
        if len(item) == 3:
            field += (tuple(item[2]),)
        fields.append(field)
    return fields


def dtype_to_json(dtype: np.dtype[Any]) -> Any:
    """A JSON form of *dtype* (numpy's ``.npy`` header description)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # metadata is dropped; callers check the round trip
        return _descr_to_json(np.lib.format.dtype_to_descr(dtype))


def dtype_from_json(obj: Any) -> np.dtype[Any]:
    """Inverse of :func:`dtype_to_json`; raises ValueError on a malformed description."""
    try:
        return np.lib.format.descr_to_dtype(_descr_from_json(obj))
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"bad dtype description {obj!r}: {exc}") from exc


# ---------------------------------------------------------------------------
# arrays as HDF5


@dataclass(frozen=True)
class ArrayPlan:
    """How to write one array as an HDF5 file: ``head | data | tail``."""

    head: bytes
    data: memoryview  # format "B", C-contiguous, a view of the array when possible
    tail: bytes
    offset: int  # file offset of the data (== len(head))
    dtype: Any  # JSON form of the dtype
    shape: tuple[int, ...]  # shape of the original array
    order: str  # "C" or "F"

    @property
    def size(self) -> int:
        return len(self.head) + self.data.nbytes + len(self.tail)

    def chunks(self) -> tuple[Any, ...]:
        return (self.head, self.data, self.tail)


class _SparseFile(io.RawIOBase):
    """An in-memory file that records writes and reads holes as zeros.

    h5py writes the skeleton into it; the unwritten dataset region costs nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[int, bytes]] = []
        self.pos = 0
        self.size = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = base + pos
        return self.pos

    def tell(self) -> int:
        return self.pos

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.writes.append((self.pos, data))
        self.pos += len(data)
        self.size = max(self.size, self.pos)
        return len(data)

    def truncate(self, size: int | None = None) -> int:
        self.size = self.pos if size is None else size
        return self.size

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        n = max(0, min(len(out), self.size - self.pos))
        out[:n] = self.extract(self.pos, self.pos + n)
        self.pos += n
        return n

    def extract(self, start: int, stop: int) -> bytes:
        buf = bytearray(stop - start)
        for off, data in self.writes:  # later writes overlay earlier ones
            lo, hi = max(off, start), min(off + len(data), stop)
            if lo < hi:
                buf[lo - start : hi - start] = data[lo - off : hi - off]
        return bytes(buf)


def _h5_type(dtype: np.dtype[Any]) -> Any:
    import h5py

    try:
        return h5py.h5t.py_create(dtype, logical=True)
    except TypeError:
        if dtype.kind in "mM":
            return h5py.h5t.py_create(h5py.opaque_dtype(dtype), logical=True)
        raise


@functools.lru_cache(maxsize=64)
def _skeleton(
    dtype: np.dtype[Any], shape: tuple[int, ...], fortran: bool
) -> tuple[bytes, bytes, int]:
    """(head, tail, data offset) of the HDF5 file holding an array of this type and shape."""
    import h5py
    from h5py import h5d, h5p, h5s

    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    f = _SparseFile()
    with h5py.File(
        f,
        "w",
        libver="earliest",
        alignment_threshold=ARRAY_BLOB_MIN,
        alignment_interval=DATA_ALIGNMENT,
    ) as h5:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5d.FILL_TIME_NEVER)
        dcpl.set_obj_track_times(False)
        space = h5s.create_simple(shape) if shape else h5s.create(h5s.SCALAR)
        dsid = h5d.create(h5.id, _DATASET.encode(), _h5_type(dtype), space, dcpl=dcpl)
        if fortran:
            h5py.Dataset(dsid).attrs["order"] = "F"
        offset = dsid.get_offset()
    if offset is None or any(
        off < offset + nbytes and off + len(d) > offset for off, d in f.writes
    ):
        raise RuntimeError("HDF5 skeleton has metadata inside the data region")
    return f.extract(0, offset), f.extract(offset + nbytes, f.size), offset


def array_blob_eligible(value: object) -> bool:
    """True when *value* is a top-level array large enough for its own HDF5 blob."""
    return (
        type(value) is np.ndarray
        and not value.dtype.hasobject
        and value.dtype.itemsize > 0
        and value.nbytes >= ARRAY_BLOB_MIN
    )


# dtypes every HDF5 build describes, whose file layout needs no h5py to be known ahead
_SIMPLE_KINDS = frozenset("biufc")


def simple_layout(value: object) -> bool:
    """Whether *value* is an array :func:`plan_array` lays out as HDF5 for certain, without
    a copy: contiguous, of a plain numeric dtype in native order.  Such an array's plan may
    be made later, elsewhere (the forked writer, see :mod:`.late`) without h5py here.

    >>> simple_layout(np.zeros((300, 300))), simple_layout(np.zeros((300, 300))[:, ::2])
    (True, False)
    """
    if not array_blob_eligible(value):
        return False
    assert isinstance(value, np.ndarray)
    dtype = value.dtype
    return (
        dtype.kind in _SIMPLE_KINDS
        and dtype.isnative
        and dtype.fields is None
        and dtype.subdtype is None
        and not dtype.metadata
        and dtype.itemsize <= 16
        and dtype != np.longdouble
        and (value.flags.c_contiguous or value.flags.f_contiguous)
    )


def plan_array(value: object) -> ArrayPlan | None:
    """An :class:`ArrayPlan` for *value*, or None when it should be pickled instead."""
    if not array_blob_eligible(value):
        return None
    assert isinstance(value, np.ndarray)
    dtype = value.dtype
    dtype_json = dtype_to_json(dtype)
    try:
        back = dtype_from_json(json.loads(json.dumps(dtype_json)))
    except ValueError:
        return None
    if back != dtype or back.isalignedstruct != dtype.isalignedstruct or dtype.metadata:
        return None  # the description loses something: let pickle keep it exactly
    if value.flags.c_contiguous:
        stored, order = value, "C"
    elif value.flags.f_contiguous:
        stored, order = value.T, "F"
    else:
        stored, order = np.ascontiguousarray(value), "C"
    try:
        head, tail, offset = _skeleton(dtype, tuple(int(n) for n in stored.shape), order == "F")
    except Exception:  # HDF5 cannot describe this dtype: pickle it
        return None
    data = stored.reshape(-1).view(np.uint8).data
    return ArrayPlan(
        head=head,
        data=data,
        tail=tail,
        offset=offset,
        dtype=dtype_json,
        shape=tuple(int(n) for n in value.shape),
        order=order,
    )


def decode_array(
    buffer: np.ndarray, offset: int, dtype: Any, shape: tuple[int, ...], order: str
) -> np.ndarray:
    """The array stored at *offset* of a verified HDF5 file *buffer* (a uint8 array): a view."""
    dt = dtype_from_json(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if offset < 0 or offset + count * dt.itemsize > buffer.nbytes:
        raise ValueError("array data lies outside its file")
    flat = np.frombuffer(buffer, dtype=dt, count=count, offset=offset)
    if order == "F":
        return flat.reshape(tuple(reversed(shape))).T
    return flat.reshape(shape)


# ---------------------------------------------------------------------------
# pickles


def array_root(arr: np.ndarray) -> np.ndarray:
    """The array that owns the memory *arr* views (following ``.base`` through arrays).

    >>> base = np.arange(4.0); array_root(base[1:3]) is base
    True
    """
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root


def _ctypes_pointer(arr: np.ndarray) -> int:
    return int(arr.ctypes.data)  # (a third of the cost of __array_interface__)


def _pointer_reader() -> Callable[[np.ndarray], int]:
    """The fastest sound way to read an array's data pointer on this build.

    numpy's array object starts with the object header and then its data pointer (the
    public ``PyArrayObject_fields`` layout, unchanged since numpy 1.7): read in place, that
    is an eighth of the cost of ``arr.ctypes.data``, which builds an object per call (a
    save asks for every array it pickles and walks).  Checked here on views, empty and
    subclass arrays; any other layout falls back to ``ctypes``.
    """
    import ctypes

    read = ctypes.c_void_p.from_address
    ndarray = np.ndarray
    offset = 2 * ctypes.sizeof(ctypes.c_void_p)

    def in_place(arr: np.ndarray) -> int:
        if not isinstance(arr, ndarray):  # (read only an array's own layout)
            return _ctypes_pointer(arr)
        return read(id(arr) + offset).value or 0

    base = np.arange(12.0)
    samples = [base, base[3:], base.reshape(3, 4).T, np.zeros(0), base.view(np.recarray)]
    if all(in_place(a) == int(a.ctypes.data) for a in samples):
        return in_place
    return _ctypes_pointer


_data_pointer = _pointer_reader()


def data_pointer(arr: np.ndarray) -> int:
    """The address of *arr*'s first byte: arrays that view one memory share it.

    >>> a = np.arange(4.0); data_pointer(a[1:]) - data_pointer(a)
    8
    """
    return _data_pointer(arr)


def whole_view(arr: object) -> bool:
    """True when *arr* views all of the memory it views, contiguously: it can stand for it.

    ``rng.standard_normal(n).reshape(a, b)`` owns nothing, yet is all of its memory; the
    other views of that memory are stored as views of it.

    >>> whole_view(np.arange(6.0).reshape(2, 3)), whole_view(np.arange(6.0)[1:])
    (True, False)
    """
    if not isinstance(arr, np.ndarray) or type(arr) is not np.ndarray:
        return False
    if not isinstance(arr.base, np.ndarray) or not arr.size:
        return False
    root = array_root(arr)
    return (
        (arr.flags.c_contiguous or arr.flags.f_contiguous)
        and arr.nbytes == root.nbytes
        and data_pointer(arr) == data_pointer(root)
    )


def sibling_roots(values: Any) -> set[int]:
    """Addresses of the memories that two or more of *values* view and none of them owns.

    ``x, y = draws.T`` leaves two rows of an array no name holds: stored as arrays of their
    own they would come back as two memories.  :func:`~ipy_resume.store.codecs.pickle_group` stores such a memory
    once, and each of them as a view of it, on the same terms as views inside a group's
    values (a writeable, contiguous memory not much larger than the views).

    >>> x, y = np.zeros((10, 2)).T
    >>> sibling_roots([x, y]) == {data_pointer(x.base)}
    True
    """
    views: dict[int, tuple[np.ndarray, int, int]] = {}
    owned: set[int] = set()
    for value in values:
        if type(value) is not np.ndarray or value.dtype.hasobject or not value.size:
            continue
        if not isinstance(value.base, np.ndarray) or whole_view(value):
            owned.add(data_pointer(value))
            continue
        root = array_root(value)
        address = data_pointer(root)
        _, count, total = views.get(address, (root, 0, 0))
        views[address] = (root, count + 1, total + value.nbytes)
    return {
        address
        for address, (root, count, total) in views.items()
        if count >= 2
        and address not in owned
        and type(root) is np.ndarray
        and root.flags.writeable
        and not root.dtype.hasobject
        and (root.flags.c_contiguous or root.flags.f_contiguous)
        and root.nbytes <= max(ROOT_SLACK_MIN, 2 * total)
    }


ATOMS: frozenset[type] = frozenset({str, bytes, int, float, complex, bool, type(None)})
_FLAT = frozenset({list, tuple, set, frozenset})


def flat(value: Any) -> bool:
    """True for an atom (a number, a string, bytes, None) or one list, tuple, set or dict
    of atoms: a value that holds nothing with an identity of its own, and that a pickle
    round trip gives back equal, item for item.

    >>> flat([1.5, "a", None]), flat({"a": 1}), flat([[1]]), flat(True)
    (True, True, False, True)
    """
    kind = type(value)
    if kind in ATOMS:
        return True
    if kind in _FLAT:
        return set(map(type, value)) <= ATOMS
    if kind is dict:
        return set(map(type, value)) <= ATOMS and set(map(type, value.values())) <= ATOMS
    return False


ROOT_SLACK_MIN = 1 << 20  # a shared memory up to this size is stored whole, however small the views
