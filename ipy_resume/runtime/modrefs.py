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
only cost a by-value copy, never a wrong object.  After a cell that imported modules,
:func:`index_soon` indexes them on a helper thread while the kernel waits for the next
cell; a lookup before it is done indexes what is left itself.

Limit: an object of a module that the notebook changes (sets an attribute on) is
restored as that module has it after import; keep such changes in names of your own.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["hold_off", "import_attribute", "index_soon", "lookup", "plain_class", "waiting"]

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
# Held while modules are indexed, by a lookup or by the helper thread of index_soon.
_lock = threading.Lock()
_helper: threading.Thread | None = None  # one per process, started by the first index_soon
_wanted = threading.Event()  # set by index_soon: the helper makes a pass
_again = threading.Event()  # set by index_soon: one more pass after the one under way
_done = threading.Event()  # set while no pass is due or under way
_done.set()
_idle = threading.Event()  # cleared while a cell runs: the helper waits between two modules
_idle.set()
_HELPER_DELAY = 0.005  # seconds the helper waits before it starts
_HELPER_STEP = 256  # attributes the helper indexes between two offers of the interpreter
# Objects the helper thread met whose class it could not read without running their code
# (a proxy's ``__class__`` may warn, and the thread cannot silence warnings for itself
# alone): (module name, attribute, object), settled by the next lookup.
_deferred: list[tuple[str, str, object]] = []
# type -> whether ``obj.__class__`` is ``type(obj)`` for its objects, read without running
# any code of theirs (no ``__class__`` or ``__getattribute__`` of their own)
_PLAIN_CLASS: dict[type, bool] = {}
_OBJECT_CLASS = object.__dict__["__class__"]
_SLOT_WRAPPER = type(object.__dict__["__getattribute__"])
_TYPE_MRO = type.__dict__["__mro__"]


def _index_modules() -> None:
    """Index the modules imported since the last call.

    Incremental, because a cell that imports anything grows ``sys.modules`` and a full
    scan of two thousand modules costs tens of milliseconds.

    Quietly: reading a module's objects is not the user using them, and some warn when
    their class is read (``torch.distributed.reduce_op`` printed a FutureWarning in the
    user's cell).
    """
    with _lock, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _settle_deferred()
        _index_new_modules()


def index_soon() -> None:
    """Index the modules imported since the last index on a helper thread, now: what a
    cell imported is then indexed while the kernel waits for the next cell, not in the
    first save that asks (tens of milliseconds after a cell that imports a library).

    The thread works one module at a time and stops between two while a cell runs (see
    :func:`hold_off`): a cell never waits for more than one module's worth.  A lookup
    meanwhile indexes what is left itself, so its answer is the same either way.

    >>> index_soon()
    """
    global _helper
    _idle.set()
    if _indexed_modules == len(sys.modules):
        return
    _again.set()  # (a pass under way took its list of modules before this cell's imports)
    if _wanted.is_set():
        return
    _done.clear()
    _wanted.set()
    if _helper is None or not _helper.is_alive():
        # (kept for the next cell that imports: a thread's start costs the cell ~0.2 ms)
        _helper = threading.Thread(target=_help, name="ipy-resume-modules", daemon=True)
        _helper.start()


def hold_off() -> None:
    """Stop the helper thread of :func:`index_soon` after the module it is indexing, until
    the next :func:`index_soon` (a cell starts: the kernel's thread needs the interpreter).

    >>> hold_off(); index_soon()
    """
    _idle.clear()


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """While the kernel's thread blocks (waiting for a save), the helper thread of
    :func:`index_soon` may index between two modules, as between cells; held off again
    after, if it was.

    >>> with waiting(): pass
    """
    held = not _idle.is_set()
    _idle.set()
    try:
        yield
    finally:
        if held:
            _idle.clear()


def _help() -> None:
    while True:
        _wanted.wait()
        try:
            while True:
                _again.clear()
                _index_on_helper()
                if not _again.is_set():
                    break
        finally:
            _wanted.clear()
            _done.set()


def _index_on_helper() -> None:
    """One pass of the helper thread over the modules not indexed yet."""
    global _indexed_modules
    # The kernel's thread first: it is sending the reply of the cell that just ended (and
    # a new thread holds the interpreter until it gives it up, up to 5 ms).
    time.sleep(_HELPER_DELAY)
    modules = list(sys.modules.items())
    left = False
    for name, module in modules:
        if name in _seen:
            continue
        if type(module) is not types.ModuleType:
            # (a lazy or proxy module may run its code, even import, when read: left to
            # the kernel's thread, which reads it at the next lookup, quietly)
            left = True
            continue
        _idle.wait()
        with _lock:
            if name not in _seen:
                _index_module(name, module, helper=True)
        time.sleep(0)  # (the interpreter to the kernel's thread, if it is waiting for it)
    with _lock:
        if not _deferred and not left:  # (else the next lookup finishes first)
            _indexed_modules = len(modules)


def _settle_deferred() -> None:
    """Index what the helper thread left to the kernel's thread (see ``_deferred``)."""
    skip = _NOT_MODULE_OBJECTS
    while _deferred:
        name, attr, obj = _deferred.pop()
        if isinstance(obj, skip):
            continue
        known = _index.get(_address(obj))
        if known is None or len(name) < len(known[0]):
            _index[_address(obj)] = (name, attr)


def plain_class(t: type) -> bool:
    """True when ``obj.__class__`` is *t* for every object of type *t*, found without running
    Python code of theirs (or of their metaclass): no ``__class__`` of their own, and no
    ``__getattribute__`` but a C type's.

    >>> plain_class(dict), plain_class(type("Proxy", (), {"__class__": property(lambda s: int)}))
    (True, False)
    """
    for klass in _TYPE_MRO.__get__(t):
        namespace = type.__dict__["__dict__"].__get__(klass)
        found = namespace.get("__class__")
        if found is not None and found is not _OBJECT_CLASS:
            return False
        found = namespace.get("__getattribute__")
        # (a C type's own slot, as dict's or a ufunc's, runs no Python code)
        if found is not None and type(found) is not _SLOT_WRAPPER:
            return False
    return True


def _index_new_modules() -> None:
    global _indexed_modules
    for name, module in list(sys.modules.items()):
        if name not in _seen:
            _index_module(name, module)
    _indexed_modules = len(sys.modules)


def _index_module(name: str, module: object, helper: bool = False) -> None:
    """Index one module's objects, then count it as indexed (a fork in between leaves a
    child that indexes it again, harmlessly).  On the helper thread (*helper*), without
    running any code of the objects indexed: proxies are left to ``_settle_deferred``."""
    main = sys.modules.get("__main__")
    exact, skip = _NOT_MODULE_EXACT, _NOT_MODULE_OBJECTS  # (locals: read 80,000 times)
    index, address, skipped, plain = _index, _address, _SKIPPED_TYPE, _PLAIN_CLASS
    # The notebook's namespace is also registered under other names (multiprocessing
    # adds "__mp_main__"): its attributes are the user's values, never module objects.
    if (
        module is main
        or name in _MAIN_NAMES
        or not isinstance(module, types.ModuleType)
        or getattr(module, "__name__", None) in _MAIN_NAMES
    ):
        _seen.add(name)
        return
    try:
        namespace = vars(module)
    except TypeError:
        _seen.add(name)
        return
    if helper:  # (a copy made in one step: the kernel's thread may be importing into it)
        namespace = dict(namespace)
    # Two lists of objects that exist, not a list of (name, value) pairs: 80,000 new
    # tuples ran the cyclic collector a hundred times per index, each pass over the
    # young objects of a kernel that just imported its libraries.  (No code runs
    # between the two copies: they are in step.)
    names, objects = list(namespace), list(namespace.values())
    for at, (attr, obj) in enumerate(zip(names, objects, strict=True)):
        if helper and at % _HELPER_STEP == _HELPER_STEP - 1:
            time.sleep(0)  # (a large module: the kernel's thread waits no longer than this)
        t = type(obj)
        if t in exact or attr[:2] == "__":
            continue
        # isinstance(obj, skip), with its answer for the type remembered: isinstance
        # asks the type, then a __class__ that differs from it (a proxy's) - asked here too.
        by_type = skipped.get(t)
        if by_type is None:
            by_type = skipped[t] = issubclass(t, skip)
        if by_type:
            continue
        if helper:
            simple = plain.get(t)
            if simple is None:
                simple = plain[t] = plain_class(t)
            if not simple:
                _deferred.append((name, attr, obj))
                continue
        elif getattr(obj, "__class__", t) is not t and isinstance(obj, skip):
            continue
        key = address(obj)
        known = index.get(key)
        # Prefer the shortest (most public) path: scipy.stats.norm over its private home.
        if known is None or len(name) < len(known[0]):
            index[key] = (name, attr)
    _seen.add(name)


def _after_fork_in_child() -> None:
    # A helper thread does not survive a fork: its lock is made anew (it may be held).
    global _lock, _helper, _idle, _wanted, _done, _again
    _lock = threading.Lock()
    _helper = None
    _idle, _wanted, _done = threading.Event(), threading.Event(), threading.Event()
    _again = threading.Event()
    _idle.set()
    _done.set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
    if _indexed_modules != len(sys.modules) or _deferred:
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
