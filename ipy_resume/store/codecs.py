"""Encoding of values: HDF5 files for top-level arrays, pickle protocol 5 for the rest.

Arrays
------
A top-level :class:`numpy.ndarray` (exact type, no object fields, at least
:data:`ARRAY_BLOB_MIN` bytes, a dtype HDF5 can describe) becomes one HDF5 file
with a single contiguous, uncompressed dataset ``data``.  h5py only lays out
the file: :func:`plan_array` builds a *skeleton* in memory (the dataset is
allocated early, its fill value is never written, timestamps are off, and the
data is aligned to 4096 bytes), keeps the bytes before the data (*head*) and
after it (*tail*), and the caller writes ``head | array bytes | tail`` itself,
straight from the array's memory.  Equal arrays therefore give byte-identical
files.  The result is an ordinary HDF5 file that h5py reads.

* C-contiguous arrays are written as they are.
* F-contiguous arrays are written as their transpose (a C-contiguous view, no
  copy); the dataset has the reversed shape and an attribute ``order = "F"``,
  and :func:`decode_array` transposes back, giving an F-contiguous array.
* Other strided arrays are copied with :func:`numpy.ascontiguousarray`.
* ``datetime64``/``timedelta64`` are stored as HDF5 opaque types tagged with
  the numpy dtype (h5py reads them back as such).  Dtypes HDF5 cannot hold
  (unicode strings, nested datetimes, ...) take the pickle route.

Loading needs no h5py: the manifest records the data offset, dtype, shape and
order, and :func:`decode_array` returns a view into the (already verified)
file buffer.

Pickles
-------
:func:`pickle_value` runs ``cloudpickle.dumps(protocol=5)``; out-of-band
buffers of at least :data:`OOB_MIN` bytes are returned separately (the store
writes them as raw blobs), smaller ones stay in the stream.

:func:`pickle_group` pickles several values of one checkpoint as one dict, so an
object two of them hold is stored once and comes back shared.  Two kinds of
object are written as references instead of their content: objects the caller
names in *links* (values of other checkpoints, or this checkpoint's HDF5
arrays), and numpy views whose base array is such an object or another value of
the group; a view is rebuilt over its restored base, so writes through it reach
the base again.
:func:`unpickle_value` and :func:`unpickle_group` are the only ways the store
unpickles; they call
:func:`_unpickle`, which tests patch to prove that no unverified byte reaches
the unpickler.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import functools
import gc
import importlib
import io
import json
import pickle
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np

from ipy_resume.runtime import modrefs
from ipy_resume.store import arrow_state, pandas_cow, tensor_codec
from ipy_resume.store.arrays import (  # noqa: F401 - re-exported: callers name them codecs.*
    ARRAY_BLOB_MIN,
    ATOMS,
    DATA_ALIGNMENT,
    ROOT_SLACK_MIN,
    ArrayPlan,
    array_blob_eligible,
    array_root,
    data_pointer,
    decode_array,
    dtype_from_json,
    dtype_to_json,
    flat,
    plan_array,
    sibling_roots,
    simple_layout,
    whole_view,
)

__all__ = [
    "ARRAY_BLOB_MIN",
    "DATA_ALIGNMENT",
    "OOB_MIN",
    "ArrayPlan",
    "EncodeError",
    "Pickled",
    "decode_array",
    "dtype_from_json",
    "dtype_to_json",
    "pickle_group",
    "pickle_value",
    "plan_array",
    "unpickle_group",
    "unpickle_value",
]

OOB_MIN = 64 * 1024
"""Out-of-band pickle buffers at least this large become raw blobs."""


class EncodeError(Exception):
    """A value cannot be serialised; the message is a one-line reason."""


# ---------------------------------------------------------------------------
# dtype <-> JSON


@dataclass
class Pickled:
    """A pickle stream plus its out-of-band buffers (in order)."""

    stream: bytes
    buffers: list[memoryview]


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def pickle_value(value: object) -> Pickled:
    """Serialise *value*; raises :class:`EncodeError` with a one-line reason."""
    buffers: list[memoryview] = []

    def callback(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < OOB_MIN:
            return True  # keep it in the stream
        buffers.append(raw)
        return False

    try:
        out = io.BytesIO()
        _Pickler(out, protocol=5, buffer_callback=callback).dump(value)
        stream = out.getvalue()
    except Exception as exc:
        raise EncodeError(f"cannot be pickled ({_reason(exc)})") from exc
    return Pickled(stream, buffers)


def as_dtype(array: np.ndarray, dtype: Any) -> np.ndarray:
    """*array* converted to the dtype described by *dtype* (:func:`dtype_to_json` form).

    Rebuilds the arrays :class:`_Pickler` repaired.

    >>> as_dtype(np.zeros(2, "<i2"), ">i2").dtype.str
    '>i2'
    """
    return array.astype(dtype_from_json(dtype), order="K")


def datetimes(buffer: Any, dtype: Any, shape: tuple[int, ...], order: str) -> np.ndarray:
    """A ``datetime64``/``timedelta64`` array over *buffer* (its 8-byte values, in memory order).

    Rebuilds the arrays :class:`_Pickler` writes out of band.

    >>> a = np.array(["2024-01-01", "NaT"], "M8[s]")
    >>> back = datetimes(a.view(np.int64).tobytes(), dtype_to_json(a.dtype), (2,), "C")
    >>> str(back.dtype), bool(np.isnat(back[1]))
    ('datetime64[s]', True)
    """
    flat = np.frombuffer(buffer, dtype=np.int64).view(dtype_from_json(dtype))
    if order == "F":
        return flat.reshape(tuple(reversed(shape))).T
    return flat.reshape(shape)


def _datetimes_reduced(obj: np.ndarray) -> Any:
    """The out-of-band reduction of a large native datetime64/timedelta64 array, or None.

    numpy writes these arrays into the stream itself (their dtype cannot be exported as a
    buffer), so a frame's date column was copied into the pickle and checksummed with it;
    their 8-byte values are plain int64 memory, which can leave the stream like any column.
    """
    if obj.nbytes < OOB_MIN or not _describable(obj.dtype):
        return None
    if obj.flags.c_contiguous:
        flat, order = obj.reshape(-1), "C"
    elif obj.flags.f_contiguous:
        flat, order = obj.T.reshape(-1), "F"  # the transpose is C-contiguous: a view
    else:
        return None
    buffer = pickle.PickleBuffer(flat.view(np.int64))  # type: ignore[arg-type]
    return (datetimes, (buffer, dtype_to_json(obj.dtype), tuple(obj.shape), order))


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, plus a repair of a numpy pickling fault that loses byte order, and two
    ways of keeping a DataFrame's columns out of the stream.

    numpy unpickles some arrays of non-native byte order (0-d ones, non-contiguous
    ones, every datetime64/timedelta64 one) in native order: the values are kept,
    the dtype is not.  Every non-native array is therefore pickled as its native
    copy plus a description of its dtype (the dtype object itself has the same
    fault), and converted back on load: same values, bits and dtype.

    Large datetime64/timedelta64 arrays are written out of band (:func:`datetimes`), and
    pandas' Arrow-backed arrays without the copy of their ``__getstate__`` when it would
    change nothing (:func:`.arrow_state.reduced`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # cloudpickle's table is a ChainMap of its reducers over copyreg's: the C pickler
        # asks it for the type of every object that has no reducer of its own, through
        # Python code raising a KeyError per map.  A dict of the same entries (cloudpickle's
        # first, as in the ChainMap) is looked up in C: pickling a figure or an estimator
        # takes about half the time.  Read by the pickler's __init__, so set before it.
        self.dispatch_table = {**copyreg.dispatch_table, **self._dispatch_table}
        # pandas' block managers, written with the blocks copy-on-write shares copied
        self.managers = pandas_cow.manager_types() if pandas_cow.active() else frozenset()
        # torch's tensors and storages (empty until torch is imported): see tensor_codec
        self.by_type = tensor_codec.reducers()
        super().__init__(*args, **kwargs)

    def reducer_override(self, obj: Any) -> Any:
        if self.by_type:
            reduce = self.by_type.get(type(obj))
            if reduce is not None and (reduced := reduce(obj, self)) is not None:
                return reduced
        if type(obj) is np.ndarray:
            dt = obj.dtype
            if not dt.isnative and not dt.hasobject:
                native = obj.astype(dt.newbyteorder("="), order="K")
                return (as_dtype, (native, dtype_to_json(dt)))
            if dt.kind in "mM":
                reduced = _datetimes_reduced(obj)
                if reduced is not None:
                    return reduced
        elif type(obj) in self.managers:
            reduced = pandas_cow.unshared_manager(obj)
            if reduced is not None:
                return reduced
        elif not arrow_state.known_not(type(obj)):
            reduced = arrow_state.reduced(obj)
            if reduced is not None:
                return reduced
        if isinstance(obj, type) and obj.__module__ not in sys.modules:
            _import_home(obj)
        return super().reducer_override(obj)


def _import_home(cls: type) -> None:
    """Import the module a library's class names as its home, when that was never done.

    ``np.recarray`` says it lives in ``numpy.rec``, a module numpy does not import
    until ``np.rec`` is read. cloudpickle writes a class whose module is not imported
    by value, and the class it rebuilds in another process is another class:
    ``isinstance(r, np.recarray)`` was False after a restore. Only a module of a
    package already imported is tried; cloudpickle then writes the class by reference
    when that module holds that very class, and by value otherwise, as before.
    """
    module = cls.__module__
    if isinstance(module, str) and module.partition(".")[0] in sys.modules:
        with contextlib.suppress(Exception):  # it stays pickled by value, as before
            importlib.import_module(module)


def _unpickle(
    stream: Any, buffers: list[Any], persistent_load: Callable[[Any], object] | None = None
) -> object:
    """The single place where bytes reach the unpickler (tests patch it)."""
    if persistent_load is None:
        return pickle.loads(stream, buffers=buffers)
    return _GroupUnpickler(stream, buffers, persistent_load).load()


def unpickle_value(stream: Any, buffers: list[Any]) -> object:
    """Unpickle a stream whose bytes and buffers the caller has verified."""
    return _unpickle(stream, buffers)


# ---------------------------------------------------------------------------
# groups: several values pickled together, with references to objects stored elsewhere

LINK_TAG = "ipy_resume.link"


@functools.lru_cache(maxsize=256)
def _describable(dtype: np.dtype[Any]) -> bool:
    """True when :func:`dtype_to_json` describes *dtype* exactly."""
    try:
        back = dtype_from_json(json.loads(json.dumps(dtype_to_json(dtype))))
    except (TypeError, ValueError):
        return False
    return back == dtype and back.isalignedstruct == dtype.isalignedstruct and not dtype.metadata


def _view_args(
    view: np.ndarray, root: np.ndarray
) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """(byte offset, shape, strides) of *view* inside *root*'s memory, or None when not exact."""
    if view.size == 0 or root.size == 0 or not (root.flags.c_contiguous or root.flags.f_contiguous):
        return None
    if view.dtype.hasobject or root.dtype.hasobject:
        return None  # references, not bytes: a byte view of them is not allowed
    if not _describable(view.dtype):
        return None  # rebuilt from a description that would lose something: copy it
    offset = int(view.__array_interface__["data"][0]) - int(root.__array_interface__["data"][0])
    low = offset + sum(min(0, (n - 1) * s) for n, s in zip(view.shape, view.strides, strict=True))
    high = offset + sum(max(0, (n - 1) * s) for n, s in zip(view.shape, view.strides, strict=True))
    if low < 0 or high + view.dtype.itemsize > root.nbytes:
        return None
    return offset, tuple(int(n) for n in view.shape), tuple(int(s) for s in view.strides)


def view_of(
    root: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any
) -> np.ndarray:
    """Rebuild a view over *root*'s memory (the inverse of how :func:`pickle_group` stores it).

    >>> base = np.arange(6.0); v = view_of(base, 16, (2,), (8,), dtype_to_json(base.dtype))
    >>> v[0] = 99.0; float(base[2])
    99.0
    """
    memory = root.ravel(order="K").view(np.uint8)  # contiguous, so this is a view
    return np.ndarray(shape, dtype_from_json(dtype), memory, offset, strides)


# ndarray subclasses that hold nothing but the array (no state of their own to lose): a
# view of a stored array as one of them (``data.view(np.recarray)``) is stored as a view.
# By name: cloudpickle writes ``np.recarray`` by value when ``numpy.rec`` (its
# ``__module__``) was never imported, and a class rebuilt so is another class.
_VIEW_CLASSES: dict[str, type[np.ndarray]] = {"recarray": np.recarray}
_VIEW_CLASS_NAMES = {cls: name for name, cls in _VIEW_CLASSES.items()}


# type -> whether its objects reduce as pickle's default does, whatever this module's
# picklers and cloudpickle check (not an array, an Arrow array, a class or a function; its
# class its type): then only the links and the module lookup are asked of each object.
_PLAIN_REDUCE: dict[type, bool] = {}
_PLAIN_REDUCE_MAX = 4096


def _note_plain_reduce(kind: type) -> None:
    if len(_PLAIN_REDUCE) >= _PLAIN_REDUCE_MAX:
        _PLAIN_REDUCE.clear()  # (classes a notebook defines again and again)
    _PLAIN_REDUCE[kind] = (
        not issubclass(kind, (np.ndarray, type, types.FunctionType))
        and kind not in _VIEW_CLASS_NAMES
        and not arrow_state.state_type(kind)
        and modrefs.plain_class(kind)  # (isinstance asks the type alone, for every object)
    )


def subclass_view_of(
    cls: str,
    root: np.ndarray,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: Any,
) -> np.ndarray:
    """:func:`view_of`, as an array of the plain subclass named *cls* (``"recarray"``).

    >>> base = np.zeros(2, dtype=[("a", "i4")]); d = dtype_to_json(base.dtype)
    >>> r = subclass_view_of("recarray", base, 0, (2,), (4,), d); r.a[1] = 5; int(base["a"][1])
    5
    """
    if cls not in _VIEW_CLASSES:
        raise ValueError(f"not a plain ndarray subclass: {cls!r}")
    return view_of(root, offset, shape, strides, dtype).view(_VIEW_CLASSES[cls])


class _GroupPickler(_Pickler):
    """The pickler of :func:`pickle_group`: references for *links*, views over known bases."""

    def __init__(
        self,
        out: io.BytesIO,
        links: dict[int, str],
        check: Callable[[str], bool],
        bases: dict[int, np.ndarray],
        callback: Callable[[pickle.PickleBuffer], bool],
        watch: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(out, protocol=5, buffer_callback=callback)
        self.links = links
        # ids whose objects this pickle is to say it wrote (not as links): see pickle_group
        self.watch = watch
        self.met: set[int] = set()
        self.check = check
        # Arrays whose views stay views, by the address of their memory: a restored base
        # and the arrays numpy derives from it share an address, not an identity.
        self.bases = bases
        self.used: set[str] = set()
        self._usable: dict[str, bool] = {}
        # memory that views copied here point into: address -> (root, views, their bytes)
        self.view_roots: dict[int, tuple[np.ndarray, int, int]] = {}
        self.owners: dict[int, np.ndarray] = {}  # arrays of the group owning their memory

    def linkable(self, token: str) -> bool:
        """Whether the object of *token* may be written as a link (asked once per token)."""
        usable = self._usable.get(token)
        if usable is None:
            usable = self._usable[token] = self.check(token)
        return usable

    def reducer_override(self, obj: Any) -> Any:
        # Links first, here rather than in persistent_id: pickle asks persistent_id about
        # every object, numbers and strings too (a Python call each, most of a large group's
        # pickling time), and this only about objects of other types than those and plain
        # containers.  Plain containers are left to a second pass (see pickle_group).
        token = self.links.get(id(obj))
        if token is not None and self.linkable(token):
            self.used.add(token)
            return (_link, (token,))
        if self.watch and id(obj) in self.watch:
            self.met.add(id(obj))  # (asked once per object: later ones are memo hits)
        kind = type(obj)
        if _PLAIN_REDUCE.get(kind) and kind not in self.by_type and kind not in self.managers:
            # (most of a figure's objects: nothing below applies but the module lookup)
            where = modrefs.lookup(obj)
            return NotImplemented if where is None else (modrefs.import_attribute, where)
        if kind is np.ndarray and not obj.dtype.hasobject and obj.size:
            if isinstance(obj.base, np.ndarray):
                root = array_root(obj)
                address = data_pointer(root)
                base = self.bases.get(address)
                # (read-only memory is a library's shared cache: left alone)
                shareable = (
                    type(root) is np.ndarray and root.flags.writeable and not root.dtype.hasobject
                )
                if base is None and shareable and root.nbytes <= ROOT_SLACK_MIN:
                    # A small memory is stored whole at the first view of it, and every view
                    # as a view of it: whether another view or its owner comes later is not
                    # known yet, and finding out cost a second pickle of the group.
                    base = root
                if base is not None and base is not obj:
                    args = _view_args(obj, base)
                    if args is not None:
                        return (view_of, (base, *args, dtype_to_json(obj.dtype)))
                if base is None and shareable:
                    _, count, total = self.view_roots.get(address, (root, 0, 0))
                    self.view_roots[address] = (root, count + 1, total + obj.nbytes)
            elif obj.flags.writeable and (obj.flags.c_contiguous or obj.flags.f_contiguous):
                # An owner whose memory another value stands for (``features = iris.data.T``
                # stored as an array of its own, ``iris`` here) is written as a view of that
                # value, so the two share their memory after a restore as they did before.
                base = self.bases.get(data_pointer(obj))
                if base is not None and base is not obj and base.nbytes == obj.nbytes:
                    args = _view_args(obj, base)
                    if args is not None:
                        return (view_of, (base, *args, dtype_to_json(obj.dtype)))
                self.owners.setdefault(data_pointer(obj), obj)
        else:
            name = _VIEW_CLASS_NAMES.get(type(obj))
            if name is not None and not obj.dtype.hasobject and obj.size:
                base = self.bases.get(data_pointer(array_root(obj)))
                if base is not None and not getattr(obj, "__dict__", None):
                    args = _view_args(obj, base)
                    if args is not None:
                        view = (name, base, *args, dtype_to_json(obj.dtype))
                        return (subclass_view_of, view)
            where = modrefs.lookup(obj)
            if where is not None:  # a module's own object: restored by importing it
                return (modrefs.import_attribute, where)
            if kind not in _PLAIN_REDUCE:
                _note_plain_reduce(kind)
        return super().reducer_override(obj)


class ModuleAttribute:
    """Stands in a group for a value that is a module's attribute (see :mod:`ipy_resume.runtime.modrefs`).

    Containers such as a module-level dict never reach ``reducer_override``, so the
    store wraps them in this before pickling.
    """

    def __init__(self, module: str, attribute: str) -> None:
        self.where = (module, attribute)

    def __reduce__(self) -> tuple[Any, ...]:
        return (modrefs.import_attribute, self.where)


class _LinkingPickler(_GroupPickler):
    """A group pickler that also links plain lists, dicts and sets, which never reach
    ``reducer_override`` (a Python call per object: only when one of them is to be linked)."""

    def persistent_id(self, obj: Any) -> Any:
        token = self.links.get(id(obj))
        if token is None or type(obj) not in _PLAIN_CONTAINERS or not self.linkable(token):
            return None
        self.used.add(token)
        return (LINK_TAG, token)


def _link(token: str) -> object:
    """Stands for an object stored elsewhere in a group's stream; :func:`unpickle_group`
    supplies the object (see :class:`_GroupUnpickler`), anything else fails here."""
    raise pickle.UnpicklingError(f"a link ({token!r}) read outside its group")


class _ViewReader:
    """A file over a verified stream's memory for the unpickler, which reads it a frame at a
    time: ``io.BytesIO`` of a view copies all of it first (7 ms of a forest's 13 MB, most
    of it faulting in the copy's new pages)."""

    __slots__ = ("_pos", "_view")

    def __init__(self, stream: Any) -> None:
        self._view = memoryview(stream).cast("B")
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        end = len(self._view) if size is None or size < 0 else min(len(self._view), start + size)
        self._pos = end
        return self._view[start:end].tobytes()

    def readinto(self, into: Any) -> int:
        start = self._pos
        target = memoryview(into).cast("B")
        n = min(len(target), len(self._view) - start)
        target[:n] = self._view[start : start + n]
        self._pos = start + n
        return n

    def readline(self, size: int = -1) -> bytes:
        # (protocol 0's opcodes end in a newline: short lines, searched in growing windows)
        start, end = self._pos, len(self._view)
        if size is not None and size >= 0:
            end = min(end, start + size)
        stop, window = start, 256
        while stop < end:
            upto = min(end, stop + window)
            found = self._view[stop:upto].tobytes().find(b"\n")
            if found >= 0:
                stop += found + 1
                break
            stop, window = upto, window * 2
        self._pos = stop
        return self._view[start:stop].tobytes()


class _GroupUnpickler(pickle.Unpickler):
    """Resolves a group's links: persistent ids, and the calls of :func:`_link`."""

    def __init__(
        self, stream: Any, buffers: list[Any], persistent_load: Callable[[Any], object]
    ) -> None:
        super().__init__(_ViewReader(stream), buffers=buffers)
        self.persistent_load = persistent_load  # type: ignore[method-assign]

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == "_link":
            load = self.persistent_load
            return lambda token: load((LINK_TAG, token))
        return super().find_class(module, name)


@dataclass
class PickledGroup(Pickled):
    """A pickled group, the link tokens its stream refers to, and the objects it holds."""

    links: set[str]
    members: set[int]  # ids of the objects with an identity (see :func:`identities`)
    reached: set[int]  # ids of every object the stream holds
    roots: list[np.ndarray]  # bases of views stored as copies (their base is not in the group)
    # ids of the objects written as links: not evidence of what this group changed (they are
    # unchanged), but of what its values hold, for a later cell that changes one of them
    linked: set[int] = dataclasses.field(default_factory=set)


# Objects whose identity means nothing, or that every group shares (types, functions,
# modules, dtypes): never evidence that two values hold one object.
_NO_IDENTITY = (str, bytes, int, float, complex, bool, type(None), tuple, frozenset, range, type)
_PLAIN_CONTAINERS = frozenset({list, dict, set, bytearray})
# (a slice is a value: frames copied from one another share pandas' cached ones)
_WALK_SKIPS = (*_NO_IDENTITY, slice, np.dtype, np.generic, pickle.PickleBuffer, types.ModuleType)
_MEMBERS_MAX = 20_000  # objects walked per save or restore to find what values share (~0.1 s)


# exact types only
def _mpl_artist() -> type | None:
    module = sys.modules.get("matplotlib.artist")
    return getattr(module, "Artist", None)


# What an Index holds besides its name: its values, which no operation changes in place
# (copies of an Index share them, so every frame copied from one would hold "shared"
# objects with all the others and be linked to them), caches derived from the values (its
# engine, hash tables, a RangeIndex's materialised array), a token views share, and the
# copy-on-write bookkeeping.  None of it is state a write could show through another name.
_INDEX_DERIVED = frozenset({"_data", "_cache", "_id", "_references"})


def _pandas_rules() -> tuple[tuple[type, ...], type | None]:
    """(types that are no evidence, the Index type), for a pandas already imported.

    Dtypes (``CategoricalDtype`` with its categories, ``StringDtype``) are immutable values
    pandas caches and hands to every column of that type; ``BlockValuesRefs`` is
    copy-on-write bookkeeping that links views of one block, and with copy-on-write no
    write shows through such a view; a ``BlockPlacement`` (which columns a block holds) is
    immutable, and a frame's copies share it, as they share the immutable pyarrow arrays
    of an Arrow-backed column (pyarrow's arrays, tables, scalars and types; not its
    buffers, which may be mutable).
    """
    extensions = sys.modules.get("pandas.api.extensions")
    internals = sys.modules.get("pandas._libs.internals")
    pandas = sys.modules.get("pandas")
    arrow = sys.modules.get("pyarrow")
    arrow_names = ("Array", "ChunkedArray", "Table", "RecordBatch", "Scalar", "DataType")
    skip = tuple(
        t
        for t in (
            getattr(extensions, "ExtensionDtype", None),
            getattr(internals, "BlockValuesRefs", None),
            getattr(internals, "BlockPlacement", None),
            *(getattr(arrow, name, None) for name in arrow_names),
        )
        if isinstance(t, type)
    )
    index = getattr(pandas, "Index", None)
    return skip, index if isinstance(index, type) else None


def _cow_block_type() -> type | None:
    """pandas' block class while copy-on-write keeps a shared block's memory apart."""
    return pandas_cow.block_type() if pandas_cow.active() else None


def identities(values: Any, skip: set[int] | None = None, hits: set[int] | None = None) -> set[int]:
    """Evidence of what *values* hold: ids of the objects in them that have an identity.

    A walk of the object graph (``gc.get_referents``, at most 20,000 objects) that neither
    counts nor enters what every value shares: numbers, strings, types, functions, modules'
    own objects, read-only arrays, and matplotlib's internals below an artist (transforms,
    paths, fonts).  Tuples are entered but not counted; plain lists and dicts inside an
    artist are not counted (they are often rc values every artist shares).  Nor are pandas's
    dtypes, its copy-on-write bookkeeping, or an Index's caches (an Index itself counts).  A
    writeable array also counts by the address of the memory it views.

    The objects of *skip* are neither counted nor entered; those the walk met are added
    to *hits*.

    >>> shared = [1]; box = type("Box", (), {})(); box.items = shared
    >>> identities([box, "text", 3]) == {id(box), id(shared)}  # not the string, not 3
    True
    """
    out: set[int] = set()
    artist = _mpl_artist()
    pandas_skip, pandas_index = _pandas_rules()
    cow_block = _cow_block_type()
    skipped = skip or set()
    seen: set[int] = set(skipped)  # (objects written as links: their insides are theirs)
    # (the objects walked count, not those skipped: a walk that skips more links walks the
    # same objects as one that skips fewer, up to the first it meets of those)
    budget = _MEMBERS_MAX + len(seen)
    # What each type is to the walk, settled at its first object: most of what a walk meets
    # is numbers and strings (an object's attribute names, again and again), and a type
    # lookup settles those before their identity is looked at.
    kinds: dict[type, int] = dict.fromkeys(ATOMS, _W_SKIP)
    # Two stacks in step, the objects and whether each sits inside an artist (a tuple per
    # object cost a quarter of the walk).
    todo: list[Any] = list(values)
    inside: list[bool] = [False] * len(todo)
    while todo:
        obj = todo.pop()
        in_artist = inside.pop()
        kind = type(obj)
        what = kinds.get(kind)
        if what is None:
            what = _walk_kind(obj, kind, artist, pandas_skip, pandas_index, cow_block)
            if _own_class(obj, kind):  # (a proxy's class is its referent's: asked each time)
                kinds[kind] = what
        if what == _W_SKIP:
            continue
        key = id(obj)
        if key in seen:
            if hits is not None and key in skipped:
                hits.add(key)
            continue
        seen.add(key)
        if len(seen) > budget:
            break
        if what == _W_TUPLE:  # no identity of its own; its items may
            todo.extend(obj)
            inside.extend([in_artist] * len(obj))
            continue
        if what == _W_INDEX:
            out.add(key)  # its name can be set in place: shared, it stays shared
            state = getattr(obj, "__dict__", None)
            if isinstance(state, dict):
                kept = [v for k, v in state.items() if k not in _INDEX_DERIVED]
                todo.extend(kept)
                inside.extend([in_artist] * len(kept))
                continue
        elif what == _W_ARRAY:
            if obj.flags.writeable:  # read-only: a cache a library hands to everyone
                out.add(key)
                out.add(data_pointer(array_root(obj)))
            sample = _object_items(obj)
            todo.extend(sample)
            inside.extend([in_artist] * len(sample))
            continue
        elif what == _W_ARTIST:
            in_artist = True
        elif what == _W_BLOCK:
            out.add(key)
            children = gc.get_referents(obj)
            if pandas_cow.shared_block(obj):
                # Memory copy-on-write shares with another frame's block is no evidence: no
                # write shows through it, and it is stored as a copy (see pandas_cow).  A
                # column of objects still holds them.
                held = getattr(obj, "values", None)
                children = [c for c in children if c is not held]
                if type(held) is np.ndarray:
                    children.extend(_object_items(held))
            todo.extend(children)
            inside.extend([in_artist] * len(children))
            continue
        if modrefs.lookup(obj) is not None:
            continue
        if what == _W_PLAIN:
            # Inside an artist, lists and dicts are often rc values every artist shares.
            if not in_artist:
                out.add(key)
            if kind is dict:
                keys = set(map(type, obj)) <= ATOMS
                if keys and set(map(type, obj.values())) <= ATOMS:
                    continue  # nothing in it has an identity (see flat)
                children = list(obj.values()) if keys else gc.get_referents(obj)
            elif kind is bytearray:
                continue  # (bytes: nothing to enter)
            elif set(map(type, obj)) <= ATOMS:
                continue  # a list of floats: not worth a step each
            else:
                children = list(obj)
        else:
            out.add(key)
            children = gc.get_referents(obj)
        todo.extend(children)
        inside.extend([in_artist] * len(children))
    return out


def _object_items(arr: np.ndarray) -> list[Any]:
    """The items of an array of objects that :func:`identities` walks: none for an array
    of numbers, or of objects whose first items are strings or numbers (nothing to share,
    and a column of them is long)."""
    if not (arr.dtype.hasobject and arr.size):
        return []
    items = arr.ravel(order="K")
    if all(isinstance(x, _NO_IDENTITY) for x in items[:64]):
        return []
    return list(items[:_MEMBERS_MAX])


# What a type is to identities (see _walk_kind)
_W_SKIP, _W_TUPLE, _W_INDEX, _W_ARRAY, _W_ARTIST, _W_PLAIN, _W_OTHER, _W_BLOCK = range(8)


def _own_class(obj: object, kind: type) -> bool:
    try:
        return getattr(obj, "__class__", kind) is kind
    except Exception:  # (a dead weak proxy)
        return False


def _walk_kind(
    obj: object,
    kind: type,
    artist: type | None,
    pandas_skip: tuple[type, ...],
    pandas_index: type | None,
    cow_block: type | None,
) -> int:
    """How :func:`identities` treats *obj*: by its type alone, so for every object of it
    (unless its class is not its type)."""
    if isinstance(obj, (tuple, frozenset)):
        return _W_TUPLE
    if isinstance(obj, _WALK_SKIPS) or callable(obj):  # (callable: a property of the type)
        return _W_SKIP
    if pandas_skip and isinstance(obj, pandas_skip):
        return _W_SKIP
    if pandas_index is not None and isinstance(obj, pandas_index):
        return _W_INDEX
    if kind is np.ndarray:
        return _W_ARRAY
    if cow_block is not None and isinstance(obj, cow_block):
        return _W_BLOCK
    if artist is not None and kind.__module__.startswith("matplotlib"):
        # transforms, paths, fonts, colormaps: shared by every figure
        return _W_ARTIST if isinstance(obj, artist) else _W_SKIP
    return _W_PLAIN if kind in _PLAIN_CONTAINERS else _W_OTHER


@dataclass
class Walk:
    """What :func:`identities` found in *values*, skipping *skip*, and the skipped objects it
    met (*hits*): :func:`pickle_group` takes it for its own walk when the two are the same."""

    values: list[object]
    skip: set[int]
    hits: set[int]
    held: set[int]

    @classmethod
    def of(cls, values: list[object], skip: set[int]) -> Walk:
        """Walk *values*.

        >>> box = type("Box", (), {})(); Walk.of([box], set()).held == {id(box)}
        True
        """
        hits: set[int] = set()
        return cls(values, skip, hits, identities(values, skip, hits))

    def stands_for(self, values: list[object], skip: set[int]) -> bool:
        """True when a walk of *values* skipping *skip* meets exactly what this one met:
        the same values, and of the objects one skips and the other does not, none met."""
        return (
            len(values) == len(self.values)
            and all(a is b for a, b in zip(values, self.values, strict=True))
            and skip <= self.skip
            and self.hits <= skip
        )


def pickle_group(
    values: dict[str, object],
    links: dict[int, str] | None = None,
    check: Callable[[str], bool] | None = None,
    bases: list[np.ndarray] | None = None,
    walked: Walk | None = None,
    watch: frozenset[int] | None = None,
) -> PickledGroup:
    """Pickle *values* as one dict; raises :class:`EncodeError` when any cannot be pickled.

    *links* maps ``id(obj)`` to a token for objects stored elsewhere: each is written
    as a reference, after ``check(token)`` confirms it (once per token) is still the
    object that was stored.  Views of the arrays in *bases* stay views of them.  *walked*
    is a walk of these values the caller made already, taken when it is the walk needed.

    ``reached`` is every object the stream holds inline, read from the pickler's memo; with
    *watch* (ids of objects that are neither plain containers nor numbers or strings, and
    no such container among the links) it is only those of *watch* the stream holds, as the
    pickler met them: a copy of the memo of a large group costs milliseconds.

    >>> g = pickle_group({"a": [1], "b": 2})
    >>> unpickle_group(g.stream, g.buffers, lambda pid: None)["a"]
    [1]
    """
    by_address: dict[int, np.ndarray] = {}
    plain = [
        arr
        for arr in bases or ()
        if type(arr) is np.ndarray
        and arr.size
        and not arr.dtype.hasobject
        and (arr.flags.c_contiguous or arr.flags.f_contiguous)
    ]
    # Only arrays that own their memory, then those that are all of a memory no base owns
    # (``features = iris.data.T``): a view is matched through the memory it views, and a
    # reshape of an earlier checkpoint's array is a view of that array.
    for arr in plain:
        if not isinstance(arr.base, np.ndarray):
            by_address.setdefault(data_pointer(arr), arr)
    for arr in plain:
        if isinstance(arr.base, np.ndarray) and whole_view(arr):
            by_address.setdefault(data_pointer(arr), arr)
    watching = watch or frozenset()
    first = _dump_group(values, links, check, by_address, watch=watching)
    # Arrays of the group that view one memory larger than ROOT_SLACK_MIN (a smaller one the
    # pickler stores whole at its first view): a second pass stores that memory once and
    # each array as a view of it, unless the memory is much larger than the views.
    pickler = first[0]
    wanted = {
        address: root
        for address, (root, count, total) in pickler.view_roots.items()
        if address not in by_address
        and (count >= 2 or address in pickler.owners)
        and root.nbytes <= max(ROOT_SLACK_MIN, 2 * total)
    }
    if wanted:
        by_address = {**by_address, **wanted}
        by_address.update((a, o) for a, o in pickler.owners.items() if a in wanted)
        first = _dump_group(values, links, check, by_address, watch=watching)
    pickler, stream, buffers = first
    if watch is not None:
        # (no plain container among the links: nothing for a second pass to write as one)
        linked = {i for i, token in (links or {}).items() if token in pickler.used}
        return _group_of(values, pickler, stream, buffers, pickler.met, linked, walked)
    memo = pickler.memo.copy()
    # A plain list, dict or set that another checkpoint stored was written out here: only
    # persistent_id sees those, so the group is pickled again with one.
    if links and any(
        type(memo[i][1]) in _PLAIN_CONTAINERS and pickler.linkable(token)
        for i, token in links.items()
        if i in memo
    ):
        pickler, stream, buffers = _dump_group(values, links, check, by_address, persist=True)
        memo = pickler.memo.copy()
    linked = {i for i, token in (links or {}).items() if token in pickler.used}
    # (a link written by reducer_override is in the memo too: it is not held inline; the
    # memo's keys are the ids of its objects)
    reached = set(memo).difference(linked)
    del memo
    return _group_of(values, pickler, stream, buffers, reached, linked, walked)


def _group_of(
    values: dict[str, object],
    pickler: _GroupPickler,
    stream: bytes,
    buffers: list[memoryview],
    reached: set[int],
    linked: set[int],
    walked: Walk | None,
) -> PickledGroup:
    pickler.clear_memo()
    tops = list(values.values())
    if walked is not None and walked.stands_for(tops, linked):
        held = set(walked.held)
    else:
        held = identities(tops, linked)
    held.update(pickler.view_roots)  # addresses of the memory views elsewhere point into
    roots = [root for root, _, _ in pickler.view_roots.values()]
    return PickledGroup(stream, buffers, pickler.used, held, reached, roots, linked)


def _dump_group(
    values: dict[str, object],
    links: dict[int, str] | None,
    check: Callable[[str], bool] | None,
    by_address: dict[int, np.ndarray],
    persist: bool = False,
    watch: frozenset[int] = frozenset(),
) -> tuple[_GroupPickler, bytes, list[memoryview]]:
    buffers: list[memoryview] = []

    def callback(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < OOB_MIN:
            return True
        buffers.append(raw)
        return False

    out = io.BytesIO()
    kind = _LinkingPickler if persist else _GroupPickler
    pickler = kind(out, links or {}, check or (lambda token: True), by_address, callback, watch)
    try:
        pickler.dump(values)
    except Exception as exc:
        raise EncodeError(f"cannot be pickled ({_reason(exc)})") from exc
    return pickler, out.getvalue(), buffers


def unpickle_group(
    stream: Any, buffers: list[Any], resolve: Callable[[str], object]
) -> dict[str, object]:
    """Unpickle a verified group stream; ``resolve(token)`` supplies each linked object."""

    def persistent_load(pid: Any) -> object:
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == LINK_TAG):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return resolve(str(pid[1]))

    group = _unpickle(stream, buffers, persistent_load)
    if not isinstance(group, dict):
        raise ValueError(f"a value group must be a dict, not {type(group).__name__}")
    return group


def held_by(values: list[object]) -> set[int]:
    """:func:`identities` of restored values, without the walk when every value is
    :func:`flat` (a restored list of floats): then only the plain containers among them
    count, as the walk counts them (the walk's set-up costs more than such a value's load).

    >>> box = [1.5, 2.5]; held_by([box, 3, (1, 2)]) == {id(box)}
    True
    """
    if not all(map(flat, values)):
        return identities(values)
    return {id(v) for v in values if type(v) in _PLAIN_CONTAINERS and modrefs.lookup(v) is None}
