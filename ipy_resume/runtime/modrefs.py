"""Which objects are, by identity, attributes of imported modules.

``from scipy.stats import norm`` binds the module's own object.  Pickled by value it
would come back as a copy (``norm is scipy.stats.norm`` false after a restore), and
fingerprinted by value its key follows internal state that the library changes as it
is used.  Such objects are therefore stored as "module M, attribute A" (restored by
importing) and keyed by that reference plus the version of M's package.

The index covers the attributes of every module in ``sys.modules`` except
``__main__`` (the notebook's own names), and leaves out values whose identity means
nothing (numbers, strings, tuples...), modules, functions and classes (pickle and the
fingerprints already take those by reference).  It is rebuilt when modules have been
imported since, and a hit is checked against the module again, so a stale entry can
only cost a by-value copy, never a wrong object.

Limit: an object of a module that the notebook changes (sets an attribute on) is
restored as that module has it after import; keep such changes in names of your own.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import Any

__all__ = ["import_attribute", "lookup"]

_VALUE_TYPES = (str, bytes, int, float, complex, bool, type(None), range, tuple, frozenset)
_SKIP_TYPES = (
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    type,
)

_NOT_MODULE_OBJECTS = _VALUE_TYPES + _SKIP_TYPES  # (asked for every object a save pickles)
# Their exact types, which most module attributes have (functions, classes, constants): a
# set lookup settles those, isinstance the rest (subclasses: bool, enums, metaclasses).
_NOT_MODULE_EXACT = frozenset(_NOT_MODULE_OBJECTS)
_MAIN_NAMES = frozenset({"__main__", "__mp_main__"})
# Index keys are addresses as ``object.__hash__`` gives them (unique among live objects),
# not ``id()``: id raises an audit event, and with the hook of the files a cell reads
# installed each call runs it (80,000 attributes per full index, a lookup per object a
# save pickles).
_address = object.__hash__
_index: dict[int, tuple[str, str]] = {}
_seen: set[str] = set()  # module names indexed so far
_indexed_modules = -1
# type -> whether it is a subclass of one of _NOT_MODULE_OBJECTS (types are kept alive here:
# a few hundred library classes)
_SKIPPED_TYPE: dict[type, bool] = {}
# type -> whether lookup() answers None for its objects without looking (values without
# identity, the notebook's own classes); a notebook that redefines classes makes new types
_LOOKUP_SKIP: dict[type, bool] = {}
_LOOKUP_SKIP_MAX = 4096


def _index_modules() -> None:
    """Index the modules imported since the last call.

    Incremental, because a cell that imports anything grows ``sys.modules`` and a full
    scan of two thousand modules costs tens of milliseconds.

    Quietly: reading a module's objects is not the user using them, and some warn when
    their class is read (``torch.distributed.reduce_op`` printed a FutureWarning in the
    user's cell).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _index_new_modules()


def _index_new_modules() -> None:
    global _indexed_modules
    main = sys.modules.get("__main__")
    exact, skip = _NOT_MODULE_EXACT, _NOT_MODULE_OBJECTS  # (locals: read 80,000 times)
    index, address, skipped = _index, _address, _SKIPPED_TYPE
    for name, module in list(sys.modules.items()):
        if name in _seen:
            continue
        _seen.add(name)
        # The notebook's namespace is also registered under other names (multiprocessing
        # adds "__mp_main__"): its attributes are the user's values, never module objects.
        if module is main or name in _MAIN_NAMES or not isinstance(module, types.ModuleType):
            continue
        if getattr(module, "__name__", None) in _MAIN_NAMES:
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        # Two lists of objects that exist, not a list of (name, value) pairs: 80,000 new
        # tuples ran the cyclic collector a hundred times per index, each pass over the
        # young objects of a kernel that just imported its libraries.  (No code runs
        # between the two copies: they are in step.)
        names, objects = list(namespace), list(namespace.values())
        for attr, obj in zip(names, objects, strict=True):
            t = type(obj)
            if t in exact or attr[:2] == "__":
                continue
            # isinstance(obj, skip), with its answer for the type remembered: isinstance
            # asks the type, then a __class__ that differs from it (a proxy's) - asked here too.
            by_type = skipped.get(t)
            if by_type is None:
                by_type = skipped[t] = issubclass(t, skip)
            if by_type or (getattr(obj, "__class__", t) is not t and isinstance(obj, skip)):
                continue
            key = address(obj)
            known = index.get(key)
            # Prefer the shortest (most public) path: scipy.stats.norm over its private home.
            if known is None or len(name) < len(known[0]):
                index[key] = (name, attr)
    _indexed_modules = len(sys.modules)


def lookup(obj: object) -> tuple[str, str] | None:
    """``(module, attribute)`` when *obj* is that module's attribute, else None.

    >>> import logging
    >>> lookup(logging.root)
    ('logging', 'root')
    >>> lookup([1, 2]) is None
    True
    """
    t = type(obj)
    skip = _LOOKUP_SKIP.get(t)
    if skip is None:
        # by type, remembered: a save asks about every object it pickles and walks.  (An
        # object whose __class__ is not its type is looked up: the answer is checked.)
        skip = issubclass(t, _NOT_MODULE_OBJECTS) or t.__module__ == "__main__"
        if len(_LOOKUP_SKIP) >= _LOOKUP_SKIP_MAX:
            _LOOKUP_SKIP.clear()
        _LOOKUP_SKIP[t] = skip
    if skip:
        return None  # values without identity, or the notebook's own objects
    if _indexed_modules != len(sys.modules):
        _index_modules()
    found = _index.get(_address(obj))
    if found is None:
        return None
    module = sys.modules.get(found[0])
    if module is None or getattr(module, found[1], None) is not obj:
        # A stale entry: the attribute was rebound, and *obj* merely sits at the address
        # of the object it held (addresses are reused).  Dropped, not re-indexed: a full
        # walk of every module costs ~10 ms, and an object bound into a module since the
        # last walk is not in the index whatever its address (as for any other object).
        _index.pop(_address(obj), None)
        return None
    return found


def import_attribute(module: str, attribute: str) -> Any:
    """The object a stored module reference names (used when unpickling a verified stream).

    >>> import_attribute("logging", "root").name
    'root'
    """
    return getattr(importlib.import_module(module), attribute)
