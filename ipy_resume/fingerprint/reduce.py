"""Everything else: structurally through ``__reduce_ex__(5)``, then ``cloudpickle``.

A value is digested as what pickle would store: the reconstructor, its arguments, the state,
list and dict items and the state setter.  A value pickled by reference (``module.name``) is
a library reference, or for ``__main__`` its class and instance state.  When ``__reduce_ex__``
fails, ``cloudpickle``'s bytes stand in; a value neither can pickle raises
:class:`Unfingerprintable`.
"""

from __future__ import annotations

import copyreg
import pickle
from typing import Any

from ..runtime import modrefs
from .code import is_user_module, libref
from .containers import c_dict, c_tuple, instance_state
from .core import CALL_MEMO, Fingerprinter, Rule, Unfingerprintable, add_provider
from .primitives import (
    NONE_DIGEST,
    atomic_str,
    exception_reason,
    hash128,
    qualified_name,
    tagged_digest,
)


def c_reduce(fp: Fingerprinter, v: Any) -> bytes:
    where = modrefs.lookup(v)
    if where is not None:
        # A module's own object (``scipy.stats.norm``): keyed by reference and version, like
        # the module's functions, not by internal state that the library changes as it works.
        return libref(b"modattr", *where)
    t = type(v)
    reducer = copyreg.dispatch_table.get(t)
    try:
        rv = reducer(v) if reducer is not None else v.__reduce_ex__(5)
    except Exception as exc:
        return _cloudpickled(v, exc)
    if isinstance(rv, str):
        return _global_reference(fp, v, rv)
    if not isinstance(rv, tuple) or not 2 <= len(rv) <= 6:
        return _cloudpickled(v, TypeError("__reduce_ex__ returned an invalid value"))
    rv = rv + (None,) * (6 - len(rv))
    func, args, state, list_items, dict_items, setter = rv
    try:
        items = None if list_items is None else list(list_items)
        pairs = None if dict_items is None else list(dict_items)
    except Exception as exc:
        return _cloudpickled(v, exc)
    return hash128(
        b"reduce\0"
        + fp.digest_child(func)
        # args is a new tuple, and the usual state the instance __dict__: digesting them here
        # saves bookkeeping, and a level of recursion per object in linked structures
        + (c_tuple(fp, args) if type(args) is tuple else fp.digest_child(args))
        + (c_dict(fp, state) if type(state) is dict else fp.digest_child(state))
        + (NONE_DIGEST if items is None else fp.ordered(items))
        + (NONE_DIGEST if pairs is None else fp.pairs(pairs))
        + fp.digest_child(setter)
    )


def _global_reference(fp: Fingerprinter, v: Any, name: str) -> bytes:
    """A value pickled by reference: ``module.name``."""
    module = getattr(v, "__module__", None)
    if not isinstance(module, str):
        module = pickle.whichmodule(v, name)  # type: ignore[attr-defined]
    if not is_user_module(module):
        return libref(b"global", module, name)
    state = instance_state(v)
    wrapped = getattr(v, "__wrapped__", None)
    return hash128(
        b"mainglobal\0"
        + atomic_str(name)
        + fp.digest_child(type(v))
        + fp.digest_child(wrapped)
        + (NONE_DIGEST if state is None else c_dict(fp, state))
    )


def _cloudpickled(v: Any, cause: BaseException) -> bytes:
    try:
        import cloudpickle

        data = cloudpickle.dumps(v, protocol=5)
    except Exception:
        raise Unfingerprintable(
            qualified_name(type(v)), f"it cannot be pickled ({exception_reason(cause)})"
        ) from cause
    return tagged_digest(b"cloudpickle\0", data)


def _fallback_rule(t: type) -> Rule:
    return (c_reduce, CALL_MEMO)


# Last: every type has a rule.
add_provider(_fallback_rule, order=1000)
