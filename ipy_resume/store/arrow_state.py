"""pandas' Arrow-backed arrays pickled without the copy their ``__getstate__`` makes.

Used by the store's picklers (:mod:`ipy_resume.store.codecs`): a single-chunk array is
written as pandas' own state with that chunk, the same bytes its ``__setstate__`` reads.

>>> known_not(int), state_type(int)
(False, False)
"""

from __future__ import annotations

import copyreg
import sys
from typing import Any

__all__ = ["known_not", "reduced", "state_type"]

# Types of pandas' Arrow-backed arrays whose pickled state can skip ``combine_chunks``
_STATE: dict[type, bool] = {}
_STATE_MAX = 4096
_NEWOBJ = copyreg.__newobj__  # type: ignore[attr-defined]  # (pickle writes it as NEWOBJ)


def state_type(cls: type) -> bool:
    """True for a pandas Arrow-backed array type pickled by ArrowExtensionArray's state.

    Only when nothing else of the type's pickling is its own: the default reduction, the
    base class's ``__getstate__``, no ``__getnewargs__``.

    >>> state_type(dict)
    False
    """
    module = sys.modules.get("pandas.core.arrays.arrow.array")
    base = getattr(module, "ArrowExtensionArray", None)
    if base is None or not isinstance(base, type) or not issubclass(cls, base):
        return False
    getstate = getattr(base, "__getstate__", None)
    return (
        getstate is not None
        and getattr(cls, "__getstate__", None) is getstate
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and not hasattr(cls, "__getnewargs_ex__")
        and not hasattr(cls, "__getnewargs__")
        and not hasattr(cls, "__slots__")
    )


def reduced(obj: Any) -> Any:
    """What pickle writes for a pandas Arrow-backed array, without copying its data, or None.

    pandas' ``__getstate__`` replaces the array's ``ChunkedArray`` by ``combine_chunks()``,
    which copies every buffer even when there is a single chunk (a 5-million-row string
    column: 90 MB).  A single chunk that starts at offset 0 and whose buffers hold nothing
    beyond it is written as that chunk instead: the state pandas would write, the same
    bytes, built by the same ``__setstate__``.

    >>> reduced([1, 2]) is None
    True
    """
    cls = type(obj)
    usable = _STATE.get(cls)
    if usable is None:
        if len(_STATE) >= _STATE_MAX:
            _STATE.clear()  # (classes a notebook defines again and again)
        usable = _STATE[cls] = state_type(cls)
    if not usable:
        return None
    own = getattr(obj, "__dict__", None)
    if not isinstance(own, dict):
        return None
    chunked = own.get("_pa_array")
    try:
        if chunked is None or chunked.num_chunks != 1:
            return None
        chunk = chunked.chunk(0)
        # (a slice's buffers are its parent's: the copy keeps only the slice)
        if chunk.offset != 0 or chunk.get_total_buffer_size() > chunk.nbytes + 64:
            return None
    except (AttributeError, TypeError, ValueError, NotImplementedError):
        return None
    state = dict(own)
    state["_pa_array"] = chunk
    state["_cache"] = {}  # (as pandas writes it: cached properties are recomputed)
    return (_NEWOBJ, (cls,), state)


def known_not(cls: type) -> bool:
    """True once :func:`reduced` found that objects of *cls* are no such arrays.

    >>> reduced(0.5) is None and known_not(float)
    True
    """
    return _STATE.get(cls) is False
