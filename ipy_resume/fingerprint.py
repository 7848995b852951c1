"""Process-independent fingerprints of Python values.

:func:`fingerprint` maps a value to a 16-byte ``xxh3_128`` digest.  Equal values give equal
digests in every process that runs the same interpreter and libraries, whatever its
``PYTHONHASHSEED``; values that differ give different digests.  The digest is part of a cache
key, so where equality is uncertain the rules below prefer a spurious difference (a cache miss)
to a spurious match (a stale result).

Encoding
--------
Every digest hashes a type tag followed by a body that is injective for that tag, so ``1``,
``1.0``, ``True``, ``"1"``, ``b"1"``, ``[1]`` and ``(1,)`` all differ.  Containers hash the
16-byte digests of their items, never ``hash()``, so nothing depends on the hash seed:

* ``list``/``tuple`` (and ``OrderedDict``, whose ``==`` is order-sensitive): items in order.
* ``dict``/``defaultdict``/``set``/``frozenset`` and dict views: sorted item (or key/value
  pair) digests, so insertion order does not matter.  ``defaultdict`` adds its factory.
* Subclasses of built-in types (named tuples, ``Counter``, ``IntEnum`` members, ...): the
  class, the built-in content, and the instance ``__dict__``/``__slots__``.
* numpy arrays: dtype, shape, an order flag and the raw buffer, hashed without copying when
  the array is C- or F-contiguous; other strided arrays are hashed in logical C order through
  bounded chunks (at most 16 MB at a time), so a strided view equals its contiguous copy.  An
  F-contiguous array is hashed in memory order with an ``F`` flag and therefore differs from
  its C-ordered copy (comparing them would need a transposing copy).  Object arrays recurse
  element by element.
* pandas objects (only when pandas is already imported): labels, index and column values;
  string columns go through :func:`pandas.util.hash_array` plus a missing-value mask.
* Functions and classes from ``__main__`` (notebook code, or a module that is not imported):
  their code objects (bytecode, constants, names; not source, file names or line numbers, so
  reformatting and comments do not matter), defaults, closure cells, ``__wrapped__``, and
  every global they read, transitively, so editing a helper a function calls changes the
  function's fingerprint.  The globals read are found from the bytecode: ``np.sum`` reads the
  global ``np`` but not ``sum``, and assigning a global is not reading it.  Function
  attributes and annotations are left out.  A class contributes its bases, metaclass and
  ``__dict__`` (minus caches that Python fills in lazily, such as ``__slotnames__``).
* Library functions, classes and modules: module, qualified name and the version of the
  top-level package (``__version__``, else the distribution metadata, else ``"unknown"``; the
  Python version for the standard library), never their code or contents.  Closures and
  lambdas made by library code add their code, defaults and closure cells, since their name
  does not identify them.  A module-level alias of a method of a hidden library instance,
  such as ``random.randint``, counts as library code too, not as that instance's state.
* Anything else: structurally through ``__reduce_ex__(5)`` (the class, then the state), then
  ``cloudpickle`` as a last resort.  Values that cannot be pickled (generators, locks, open
  files, frames...) raise :class:`Unfingerprintable`; nothing else escapes.

Reference cycles end in a back-reference marker that records how far up the current path the
repeated object sits.  Results are cached per :class:`Fingerprinter` (functions, classes and
modules for its lifetime, containers for one top-level call); a cached digest is reused only
when no member of its reference cycle is on the current path, so a digest never depends on
what was fingerprinted before it.  Each nesting level costs a few stack frames; on Python 3.11
and later the recursion limit is raised to 12 000 while a top-level call runs, and a value
nested too deeply for it raises :class:`Unfingerprintable`.

:func:`register` adds fingerprints for further types.
"""

from __future__ import annotations

import collections
import contextlib
import copyreg
import datetime
import decimal
import dis
import fractions
import functools
import importlib.metadata
import math
import os
import pathlib
import pickle
import platform
import site
import struct
import sys
import sysconfig
import types
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import xxhash

__all__ = [
    "Fingerprinter",
    "Unfingerprintable",
    "digest_bytes",
    "fingerprint",
    "fingerprint_hex",
    "register",
]

Callback = Callable[["Fingerprinter", Any], "bytes | Iterable[bytes | memoryview]"]
_Atomic = Callable[[Any], bytes]
_Handler = Callable[["Fingerprinter", Any], bytes]

_x = xxhash.xxh3_128_digest
_u64 = struct.Struct("<Q").pack
_f64 = struct.Struct("<d").pack
_q3 = struct.Struct("<qqq").pack

# Bodies above this size are fed to a streaming hasher instead of being concatenated: the
# digest is the same, but a 1 GB bytes value does not cost another 1 GB.
_STREAM_MIN = 1 << 20
# Strided arrays are copied to contiguous memory this many bytes at a time.
_CHUNK_BYTES = 16 << 20
# Container digests cached per top-level call; the cache keeps its keys alive, so it is capped.
_CALL_MEMO_MAX = 100_000

# Nesting depth costs two or three frames per level.  From Python 3.11 on, calls between
# Python functions use no C stack, so the recursion limit can safely be raised while digesting.
_RECURSION_LIMIT = 12_000 if sys.version_info >= (3, 11) else 0

_NO_MEMO, _CALL_MEMO, _LIFE_MEMO = 0, 1, 2
_INF = sys.maxsize
_MISSING = object()
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes created at run time, which may be collected


class Unfingerprintable(Exception):
    """A value that cannot be fingerprinted.

    ``str(exc)`` is one line naming the type and the reason; ``exc.type_name`` is the type.

    >>> try:
    ...     fingerprint(x for x in ())
    ... except Unfingerprintable as exc:
    ...     exc.type_name
    'generator'
    """

    type_name: str
    reason: str

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason
        super().__init__(f"cannot fingerprint a value of type {type_name!r}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.type_name, self.reason))


def digest_bytes(*parts: bytes | bytearray | memoryview) -> bytes:
    """Return the 16-byte ``xxh3_128`` digest of length-prefixed *parts*.

    Each part is preceded by its length, so ``(b"ab", b"c")`` and ``(b"a", b"bc")`` differ.
    Large contiguous buffers are hashed in place, without a copy.

    >>> digest_bytes(b"ab", b"c") != digest_bytes(b"a", b"bc")
    True
    >>> len(digest_bytes(b"key=", memoryview(b"value")))
    16
    """
    buf = bytearray()
    hasher = None
    for part in parts:
        if isinstance(part, memoryview):
            if not part.c_contiguous:
                part = part.tobytes()
            size = part.nbytes if isinstance(part, memoryview) else len(part)
        else:
            size = len(part)
        buf += _u64(size)
        if size >= _STREAM_MIN:
            if hasher is None:
                hasher = xxhash.xxh3_128()
            hasher.update(buf)
            buf.clear()
            hasher.update(part)
        else:
            buf += part
    if hasher is None:
        return _x(buf)
    hasher.update(buf)
    return hasher.digest()


def _tagged(tag: bytes, body: bytes | bytearray) -> bytes:
    """Digest of ``tag + body``; *tag* ends in a NUL byte."""
    if len(body) < _STREAM_MIN:
        return _x(tag + body)
    hasher = xxhash.xxh3_128(tag)
    hasher.update(body)
    return hasher.digest()


def _type_name(t: type) -> str:
    module = getattr(t, "__module__", None)
    qualname = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# ---- versions ---------------------------------------------------------------------------------

_PYTHON = f"{platform.python_implementation()}-{platform.python_version()}"
_STDLIB = frozenset(sys.stdlib_module_names) | {"builtins", "__main__"}
_DIST_VERSIONS: dict[str, str] = {}
_LOCAL_SOURCE_FILES_MAX = 500


def _package_version(module_name: str) -> str:
    """Version of the top-level package of *module_name*: ``__version__``, else metadata."""
    top = module_name.partition(".")[0]
    if top in _STDLIB:
        return _PYTHON
    module = sys.modules.get(top)
    try:
        version = getattr(module, "__version__", None)
    except Exception:
        version = None
    if isinstance(version, str):
        return version
    if isinstance(version, (int, float, tuple)):
        return repr(version)
    if _is_local_module(module):
        # A helper module next to the notebook has no distribution to ask; going straight to
        # its source also skips a scan of every installed distribution (~0.2 s per kernel).
        return _local_source_version(module) or "unknown"
    cached = _DIST_VERSIONS.get(top)
    if cached is None:
        cached = _DIST_VERSIONS[top] = _metadata_version(top)
    if cached == "unknown":
        # A helper module next to the notebook has no version: its source files stand in
        # for one, so editing it invalidates the cells that use it.
        return _local_source_version(module) or cached
    return cached


_SOURCE_DIGESTS: dict[tuple[str, int, int], str] = {}
_PACKAGE_FILES: dict[tuple[str, int], list[Path]] = {}


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    with contextlib.suppress(Exception):
        roots.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        roots.add(site.getusersitepackages())
    return tuple(os.path.realpath(r) for r in roots if r)


def _is_local_module(module: object) -> bool:
    """A module loaded from a file outside site-packages and the standard library."""
    filename = getattr(module, "__file__", None)
    if not isinstance(filename, str) or not filename.endswith(".py"):
        return False
    real = os.path.realpath(filename)
    return not any(real.startswith(root + os.sep) for root in _installed_roots())


def _local_source_version(module: object) -> str | None:
    """``local:<digest>`` of a module's .py files (a package: all of them), or None."""
    filename = getattr(module, "__file__", None)
    if not isinstance(filename, str) or not filename.endswith(".py"):
        return None
    path = Path(filename)
    files = [path]
    if path.name == "__init__.py":
        # Listing a package walks its tree; the listing is kept while its folder is unchanged.
        try:
            listing_key = (str(path.parent), path.parent.stat().st_mtime_ns)
        except OSError:
            return None
        cached_files = _PACKAGE_FILES.get(listing_key)
        if cached_files is None:
            cached_files = _PACKAGE_FILES[listing_key] = sorted(path.parent.rglob("*.py"))
        files = cached_files
    parts: list[bytes] = []
    for file in files[:_LOCAL_SOURCE_FILES_MAX]:
        try:
            stat = file.stat()
            cache_key = (str(file), stat.st_mtime_ns, stat.st_size)
            digest = _SOURCE_DIGESTS.get(cache_key)
            if digest is None:
                digest = _SOURCE_DIGESTS[cache_key] = xxhash.xxh3_128_hexdigest(file.read_bytes())
        except OSError:
            continue
        parts.append(f"{file.relative_to(path.parent)}={digest}".encode())
    return "local:" + xxhash.xxh3_128_hexdigest(b"\n".join(parts)) if parts else None


@functools.cache
def _import_names_to_distributions() -> dict[str, list[str]]:
    # scans every installed distribution: done once, and only for a module whose name is not
    # that of its distribution (sklearn, from scikit-learn)
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:
        return {}


def _metadata_version(top: str) -> str:
    try:
        return importlib.metadata.version(top)
    except Exception:
        pass
    found = set()
    for dist in _import_names_to_distributions().get(top, []):
        try:
            found.add(f"{dist}=={importlib.metadata.version(dist)}")
        except Exception:
            continue
    return ",".join(sorted(found)) or "unknown"


def _is_user_module(module: object) -> bool:
    # Code from __main__ (a notebook) or from a module we cannot version is fingerprinted by
    # what it is, not by name.
    return not isinstance(module, str) or module == "__main__" or module not in sys.modules


def _importable(obj: object, module: str, qualname: str) -> bool:
    """Whether ``module.qualname`` names *obj*, the test pickle applies to find it again.

    A function or class made at run time (by a factory, or redefined under the same name) is
    not importable, so its name says nothing about what it is.
    """
    target: object = sys.modules.get(module, _MISSING)
    if target is _MISSING or "<" in qualname:
        return False
    try:
        for part in qualname.split("."):
            target = getattr(target, part, _MISSING)
            if target is _MISSING:
                return False
    except Exception:
        return False
    return target is obj


def _libref(tag: bytes, module: str, qualname: str) -> bytes:
    return digest_bytes(
        tag,
        module.encode("utf-8", "surrogatepass"),
        qualname.encode("utf-8", "surrogatepass"),
        _package_version(module).encode("utf-8", "surrogatepass"),
    )


# ---- atomic values: no references to other objects -------------------------------------------

_NAN_BYTES = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"


def _f64_bytes(v: float) -> bytes:
    return _NAN_BYTES if math.isnan(v) else _f64(v)


def _a_int(v: int) -> bytes:
    return _x(b"int\0" + int.to_bytes(v, (int.bit_length(v) + 8) >> 3, "little", signed=True))


def _a_float(v: float) -> bytes:
    return _x(b"float\0" + _f64_bytes(v))


def _a_complex(v: complex) -> bytes:
    return _x(b"complex\0" + _f64_bytes(v.real) + _f64_bytes(v.imag))


def _a_str(v: str) -> bytes:
    data = str.encode(v, "utf-8", "surrogatepass")
    if len(data) < _STREAM_MIN:
        return _x(b"str\0" + data)
    return _tagged(b"str\0", data)


def _a_bytes(v: bytes) -> bytes:
    return _tagged(b"bytes\0", v)


def _a_bytearray(v: bytearray) -> bytes:
    return _tagged(b"bytearray\0", v)


def _a_memoryview(v: memoryview) -> bytes:
    head = digest_bytes(v.format.encode(), b"".join(_u64(n) for n in v.shape or ()))
    hasher = xxhash.xxh3_128(b"memoryview\0" + head)
    hasher.update(v if v.c_contiguous else v.tobytes())
    return hasher.digest()


def _a_range(v: range) -> bytes:
    return _x(b"range\0" + _a_int(v.start) + _a_int(v.stop) + _a_int(v.step))


def _a_decimal(v: decimal.Decimal) -> bytes:
    return _x(b"decimal\0" + str(v).encode())


def _a_fraction(v: fractions.Fraction) -> bytes:
    return _x(b"fraction\0" + _a_int(v.numerator) + _a_int(v.denominator))


def _a_date(v: datetime.date) -> bytes:
    return _x(b"date\0" + v.isoformat().encode())


def _a_timedelta(v: datetime.timedelta) -> bytes:
    return _x(b"timedelta\0" + _q3(v.days, v.seconds, v.microseconds))


def _a_uuid(v: uuid.UUID) -> bytes:
    return _x(b"uuid\0" + v.bytes)


def _a_path(v: pathlib.PurePath) -> bytes:
    return digest_bytes(
        b"path", type(v).__qualname__.encode(), str(v).encode("utf-8", "surrogatepass")
    )


def _constant(name: bytes) -> _Atomic:
    value = _x(b"const\0" + name)
    return lambda _: value


_NONE_DIGEST = _x(b"const\0None")
_TRUE_DIGEST = _x(b"bool\0\x01")
_FALSE_DIGEST = _x(b"bool\0\x00")
_EMPTY_CELL = _x(b"const\0empty-cell")

_EXACT_ATOMIC: dict[type, _Atomic] = {
    type(None): lambda _: _NONE_DIGEST,
    bool: lambda v: _TRUE_DIGEST if v else _FALSE_DIGEST,
    int: _a_int,
    float: _a_float,
    complex: _a_complex,
    str: _a_str,
    bytes: _a_bytes,
    bytearray: _a_bytearray,
    memoryview: _a_memoryview,
    range: _a_range,
    type(...): _constant(b"Ellipsis"),
    type(NotImplemented): _constant(b"NotImplemented"),
    decimal.Decimal: _a_decimal,
    fractions.Fraction: _a_fraction,
    datetime.date: _a_date,
    datetime.timedelta: _a_timedelta,
    uuid.UUID: _a_uuid,
    pathlib.PurePosixPath: _a_path,
    pathlib.PureWindowsPath: _a_path,
    pathlib.PosixPath: _a_path,
    pathlib.WindowsPath: _a_path,
}


def _backref(distance: int) -> bytes:
    return _x(b"backref\0" + _u64(distance))


# ---- the fingerprinter ------------------------------------------------------------------------

_MemoEntry = tuple[object, bytes, "frozenset[int] | None"]


class Fingerprinter:
    """Fingerprints several values, sharing work between them.

    Functions, classes and modules are cached by ``id()`` for the fingerprinter's lifetime
    (the cache keeps them alive), so use one instance per key computation, while the values
    do not change.  Not thread-safe.

    >>> fp = Fingerprinter()
    >>> fp.digest({"a": 1}) == fp.digest({"a": 1}) == fingerprint({"a": 1})
    True
    """

    __slots__ = ("_active", "_call", "_life", "_low", "_members", "_stack")

    def __init__(self) -> None:
        self._life: dict[int, _MemoEntry] = {}
        self._call: dict[int, _MemoEntry] = {}
        # id -> depth of every object whose digest is being computed (the current path)
        self._stack: dict[int, int] = {}
        # lowest depth a back-reference reached in the subtree being computed
        self._low = _INF
        # ids in the current subtree that sit on a cycle through an ancestor
        self._members: list[int] | None = None
        self._active = 0

    def digest(self, value: object) -> bytes:
        """Return the 16-byte fingerprint of *value*; raise :class:`Unfingerprintable`.

        Callbacks passed to :func:`register` call this for the parts of their value.

        >>> len(Fingerprinter().digest([1, "two", 3.0]))
        16
        """
        limit = sys.getrecursionlimit()
        if not self._active and limit < _RECURSION_LIMIT:
            sys.setrecursionlimit(_RECURSION_LIMIT)
        self._active += 1
        try:
            return self._digest(value)
        except Unfingerprintable:
            raise
        except RecursionError as exc:
            raise Unfingerprintable(_type_name(type(value)), "it is nested too deeply") from exc
        except Exception as exc:
            raise Unfingerprintable(_type_name(type(value)), _reason(exc)) from exc
        finally:
            self._active -= 1
            if not self._active:
                if sys.getrecursionlimit() != limit:
                    sys.setrecursionlimit(limit)
                self._call.clear()
                self._stack.clear()
                self._low = _INF
                self._members = None

    def _digest(self, value: object) -> bytes:
        # One frame per nesting level on this path (plus the handler's): deep structures
        # must fit in the recursion limit.
        t = type(value)
        atomic = _ATOMIC.get(t)
        if atomic is not None:
            return atomic(value)
        entry = _COMPOSITE.get(t)
        if entry is None:
            entry = _HEAP.get(t) if t.__flags__ & _HEAPTYPE else None
            if entry is None:
                resolved = _resolve(t)
                if not isinstance(resolved, tuple):
                    return resolved(value)
                entry = resolved
        handler, memo_kind = entry
        vid = id(value)
        stack = self._stack
        memo = self._life if memo_kind == _LIFE_MEMO else self._call
        if memo_kind:
            hit = memo.get(vid)
            # A cached digest of a cycle member is only valid while no other member of that
            # cycle is on the path: a fresh computation would stop there with a back-reference.
            if hit is not None and (hit[2] is None or stack.keys().isdisjoint(hit[2])):
                return hit[1]
        depth = stack.get(vid)
        if depth is not None:
            if depth < self._low:
                self._low = depth
            return _backref(len(stack) - depth)
        my_depth = len(stack)
        stack[vid] = my_depth
        outer_low, outer_members = self._low, self._members
        self._low, self._members = _INF, None
        ok = False
        try:
            result = handler(self, value)
            ok = True
        except Unfingerprintable:
            raise
        except RecursionError as exc:
            raise Unfingerprintable(_type_name(t), "it is nested too deeply") from exc
        except Exception as exc:
            raise Unfingerprintable(_type_name(t), _reason(exc)) from exc
        finally:
            del stack[vid]
            low, members = self._low, self._members
            if low < my_depth:
                # On a cycle through an ancestor: the digest depends on the path, so it is not
                # cached, and the ancestor that closes the cycle inherits this id.
                if outer_members is None:
                    outer_members = []
                outer_members.append(vid)
                if members:
                    outer_members.extend(members)
                self._low = min(outer_low, low)
                self._members = outer_members
            else:
                self._low, self._members = outer_low, outer_members
                if ok and memo_kind and (memo_kind == _LIFE_MEMO or len(memo) < _CALL_MEMO_MAX):
                    scc = frozenset(members).union((vid,)) if members else None
                    memo[vid] = (value, result, scc)
        return result

    # Helpers for handlers.  They loop instead of using comprehensions, which are extra
    # frames before Python 3.12.

    def _ordered(self, items: Iterable[Any]) -> bytes:
        """Digest of the digests of *items*, in order."""
        dg = self._digest
        buf = bytearray()
        for item in items:
            buf += dg(item)
        return _x(buf)

    def _unordered(self, items: Iterable[Any]) -> bytes:
        """Digest of the sorted digests of *items*."""
        dg = self._digest
        digests = []
        for item in items:
            digests.append(dg(item))
        digests.sort()
        return _x(b"".join(digests))

    def _pairs(self, items: Iterable[tuple[Any, Any]], *, ordered: bool = False) -> bytes:
        """Digest of the (key, value) digest pairs of *items*, sorted unless *ordered*."""
        dg = self._digest
        pairs = []
        for key, value in items:
            pairs.append(dg(key) + dg(value))
        if not ordered:
            pairs.sort()
        return _x(b"".join(pairs))


# ---- registry and type resolution -------------------------------------------------------------

_REGISTRY: dict[type, Callback] = {}
_ATOMIC: dict[type, _Atomic] = {}
_COMPOSITE: dict[type, tuple[_Handler, int]] = {}
_HEAP: weakref.WeakKeyDictionary[type, tuple[_Handler, int]] = weakref.WeakKeyDictionary()


def register(type_: type, fn: Callback) -> None:
    """Fingerprint instances of *type_* (and its subclasses) with *fn*.

    ``fn(fingerprinter, value)`` returns ``bytes`` or an iterable of ``bytes``/``memoryview``
    parts that identify the value; call ``fingerprinter.digest(part)`` for nested values.
    The parts are framed by :func:`digest_bytes` together with the value's qualified type
    name, so they only need to be unambiguous for that type.  The nearest registration along
    the value's MRO wins and takes precedence over every built-in rule.

    >>> class Celsius:
    ...     def __init__(self, degrees):
    ...         self.degrees = degrees
    >>> register(Celsius, lambda fp, c: [fp.digest(round(c.degrees, 6))])
    >>> fingerprint(Celsius(20.0000001)) == fingerprint(Celsius(20.0))
    True
    """
    if not isinstance(type_, type):
        raise TypeError(f"register() needs a type, not {type(type_).__name__}")
    if not callable(fn):
        raise TypeError("register() needs a callable")
    _REGISTRY[type_] = fn
    _clear_rule_caches()


def _clear_rule_caches() -> None:
    _ATOMIC.clear()
    _COMPOSITE.clear()
    _HEAP.clear()


def _registered(fn: Callback) -> _Handler:
    def handler(fp: Fingerprinter, value: Any) -> bytes:
        out = fn(fp, value)
        parts: list[bytes | bytearray | memoryview]
        if isinstance(out, (bytes, bytearray, memoryview)):
            parts = [out]
        else:
            parts = list(out)
            for part in parts:
                if not isinstance(part, (bytes, bytearray, memoryview)):
                    raise TypeError(
                        f"registered fingerprint returned {type(part).__name__}, not bytes"
                    )
        return digest_bytes(b"registered", _type_name(type(value)).encode(), *parts)

    return handler


def _resolve(t: type) -> _Atomic | tuple[_Handler, int]:
    """Find and cache the rule for exact type *t*."""
    result = _find_rule(t)
    if isinstance(result, tuple):
        if t.__flags__ & _HEAPTYPE:
            _HEAP[t] = result
        else:
            _COMPOSITE[t] = result
    else:
        _ATOMIC[t] = result
    return result


def _find_rule(t: type) -> _Atomic | tuple[_Handler, int]:
    for klass in t.__mro__:
        fn = _REGISTRY.get(klass)
        if fn is not None:
            return (_registered(fn), _CALL_MEMO)
    atomic = _EXACT_ATOMIC.get(t)
    if atomic is not None:
        return atomic
    exact = _EXACT_COMPOSITE.get(t)
    if exact is not None:
        return exact
    if issubclass(t, type):
        return (_c_class, _LIFE_MEMO)
    if "numpy" in sys.modules:
        rule = _numpy_rule(t)
        if rule is not None:
            return rule
    if "pandas" in sys.modules:
        rule = _pandas_rule(t)
        if rule is not None:
            return rule
    if issubclass(t, _BUILTIN_BASES):
        return (_c_builtin_subclass, _CALL_MEMO)
    if issubclass(t, types.ModuleType):
        return (_c_module, _LIFE_MEMO)
    for base, rule in _SUBCLASS_RULES:
        if issubclass(t, base):
            return rule
    return (_c_reduce, _CALL_MEMO)


# ---- containers -------------------------------------------------------------------------------


# The loops below look up atomic values' rules themselves: it saves a call per item.


def _c_list(fp: Fingerprinter, v: Any) -> bytes:
    dg, atomic = fp._digest, _ATOMIC.get
    buf = bytearray(b"list\0")
    for item in v:
        a = atomic(type(item))
        buf += dg(item) if a is None else a(item)
    return _x(buf)


def _c_tuple(fp: Fingerprinter, v: Any) -> bytes:
    dg, atomic = fp._digest, _ATOMIC.get
    buf = bytearray(b"tuple\0")
    for item in v:
        a = atomic(type(item))
        buf += dg(item) if a is None else a(item)
    return _x(buf)


def _c_dict(fp: Fingerprinter, v: Any) -> bytes:
    dg, atomic = fp._digest, _ATOMIC.get
    pairs = []
    for key, value in dict.items(v):
        a = atomic(type(key))
        b = atomic(type(value))
        pairs.append((dg(key) if a is None else a(key)) + (dg(value) if b is None else b(value)))
    pairs.sort()
    return _x(b"dict\0" + b"".join(pairs))


def _sorted_items(fp: Fingerprinter, v: Any) -> bytes:
    dg, atomic = fp._digest, _ATOMIC.get
    digests = []
    for item in v:
        a = atomic(type(item))
        digests.append(dg(item) if a is None else a(item))
    digests.sort()
    return b"".join(digests)


def _c_set(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"set\0" + _sorted_items(fp, v))


def _c_frozenset(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"frozenset\0" + _sorted_items(fp, v))


def _c_ordereddict(fp: Fingerprinter, v: Any) -> bytes:
    # OrderedDict equality depends on order, so the digest does too.
    return _x(b"OrderedDict\0" + fp._pairs(collections.OrderedDict.items(v), ordered=True))


def _c_defaultdict(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"defaultdict\0" + fp._digest(v.default_factory) + fp._pairs(dict.items(v)))


def _c_mappingproxy(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"mappingproxy\0" + fp._pairs(v.items()))


def _c_dict_keys(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"dict_keys\0" + fp._unordered(v))


def _c_dict_values(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"dict_values\0" + fp._ordered(v))


def _c_dict_items(fp: Fingerprinter, v: Any) -> bytes:
    return _x(b"dict_items\0" + fp._pairs(v))


def _c_slice(fp: Fingerprinter, v: slice) -> bytes:
    return _x(b"slice\0" + fp._digest(v.start) + fp._digest(v.stop) + fp._digest(v.step))


def _c_datetime(fp: Fingerprinter, v: datetime.datetime) -> bytes:
    naive = v.replace(tzinfo=None).isoformat().encode()
    return _x(b"datetime\0" + fp._digest(v.tzinfo) + bytes([v.fold]) + naive)


def _c_time(fp: Fingerprinter, v: datetime.time) -> bytes:
    naive = v.replace(tzinfo=None).isoformat().encode()
    return _x(b"time\0" + fp._digest(v.tzinfo) + bytes([v.fold]) + naive)


def _c_union(fp: Fingerprinter, v: Any) -> bytes:
    # int | str == str | int
    return _x(b"union\0" + fp._unordered(v.__args__))


_BASE_CONTENT: dict[type, _Handler] = {
    int: lambda fp, v: _a_int(v),
    float: lambda fp, v: _a_float(v),
    complex: lambda fp, v: _a_complex(complex(v.real, v.imag)),
    str: lambda fp, v: _a_str(v),
    bytes: lambda fp, v: _a_bytes(v),
    bytearray: lambda fp, v: _a_bytearray(v),
    list: _c_list,
    tuple: _c_tuple,
    dict: _c_dict,
    set: _c_set,
    frozenset: _c_frozenset,
    collections.OrderedDict: _c_ordereddict,
    collections.defaultdict: _c_defaultdict,
}
_BUILTIN_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _instance_state(v: Any) -> dict[str, Any] | None:
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
            value = getattr(v, attr, _MISSING)
            if value is not _MISSING:
                state[f"slot:{attr}"] = value
    return state or None


def _c_builtin_subclass(fp: Fingerprinter, v: Any) -> bytes:
    t = type(v)
    content = next(_BASE_CONTENT[k] for k in t.__mro__ if k in _BASE_CONTENT)
    state = _instance_state(v)
    state_digest = _NONE_DIGEST if state is None else _c_dict(fp, state)
    return _x(b"subclass\0" + fp._digest(t) + content(fp, v) + state_digest)


# ---- code, functions, classes, modules --------------------------------------------------------

# Instructions whose co_names argument is not a global being read: attribute access, and
# writes (a function that only assigns a global does not depend on its value).
_NOT_GLOBAL_READS = frozenset(
    {
        "STORE_GLOBAL",
        "DELETE_GLOBAL",
        "STORE_NAME",
        "DELETE_NAME",
        "LOAD_ATTR",
        "STORE_ATTR",
        "DELETE_ATTR",
        "LOAD_METHOD",
        "IMPORT_FROM",
        "LOAD_SUPER_ATTR",
        "LOAD_SUPER_METHOD",
        "LOAD_ZERO_SUPER_ATTR",
        "LOAD_ZERO_SUPER_METHOD",
    }
)
_HASNAME = frozenset(dis.hasname)


def _names_read(code: types.CodeType) -> tuple[set[str], set[str]]:
    """Global names and imported modules used by *code* and the code nested in it.

    Attribute names share ``co_names`` with globals (``np.sum`` lists both), so the
    instructions decide which is which; an unknown instruction counts as a global read.
    """
    names: set[str] = set()
    imports: set[str] = set()
    pending = [code]
    while pending:
        co = pending.pop()
        try:
            for ins in dis.get_instructions(co):
                if ins.opcode not in _HASNAME or not isinstance(ins.argval, str):
                    continue
                if ins.opname == "IMPORT_NAME":
                    imports.add(ins.argval)
                elif ins.opname not in _NOT_GLOBAL_READS:
                    names.add(ins.argval)
        except Exception:
            names.update(co.co_names)
        pending.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
    return names, imports


def _names_digest(names: tuple[str, ...]) -> bytes:
    return digest_bytes(*(n.encode("utf-8", "surrogatepass") for n in names))


def _c_code(fp: Fingerprinter, co: types.CodeType) -> bytes:
    # Everything that decides behaviour; not co_filename, co_firstlineno or the line table,
    # so reformatting or moving a function keeps its fingerprint.
    counts = (
        co.co_argcount,
        co.co_posonlyargcount,
        co.co_kwonlyargcount,
        co.co_nlocals,
        co.co_stacksize,
        co.co_flags,
    )
    return digest_bytes(
        b"code",
        b"".join(_u64(n) for n in counts),
        co.co_code,
        getattr(co, "co_exceptiontable", b""),
        fp._digest(co.co_consts),
        _names_digest(co.co_names),
        _names_digest(co.co_varnames),
        _names_digest(co.co_freevars),
        _names_digest(co.co_cellvars),
        co.co_name.encode("utf-8", "surrogatepass"),
        getattr(co, "co_qualname", co.co_name).encode("utf-8", "surrogatepass"),
    )


def _closure_digest(fp: Fingerprinter, fn: types.FunctionType) -> bytes:
    cells = fn.__closure__ or ()
    out = bytearray(_u64(len(cells)))
    for cell in cells:
        try:
            contents = cell.cell_contents
        except ValueError:
            out += _EMPTY_CELL
        else:
            out += fp._digest(contents)
    return bytes(out)


def _c_function(fp: Fingerprinter, fn: types.FunctionType) -> bytes:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", fn.__name__)
    if not _is_user_module(module):
        assert isinstance(module, str)
        ref = _libref(b"libfunction", module, qualname)
        if _importable(fn, module, qualname):
            return ref
        # A closure or lambda made by library code is not identified by its name alone:
        # two calls of a decorator factory give different functions with the same name.
        return digest_bytes(
            b"libclosure",
            ref,
            fp._digest(fn.__code__),
            fp._digest(fn.__defaults__),
            fp._digest(fn.__kwdefaults__),
            _closure_digest(fp, fn),
        )
    code = fn.__code__
    parts: list[bytes] = [
        b"function",
        qualname.encode("utf-8", "surrogatepass"),
        fp._digest(code),
        fp._digest(fn.__defaults__),
        fp._digest(fn.__kwdefaults__),
        _closure_digest(fp, fn),
        fp._digest(fn.__dict__.get("__wrapped__")),
    ]
    # The globals the function reads, transitively: editing a helper it calls, or data it
    # reads, changes its fingerprint.
    names, imports = _names_read(code)
    found = sorted(name for name in names if name in fn.__globals__)
    parts.append(_u64(len(found)))
    for name in found:
        parts += [name.encode("utf-8", "surrogatepass"), fp._digest(fn.__globals__[name])]
    modules = sorted(name for name in imports if name in sys.modules)
    parts.append(_u64(len(modules)))
    for name in modules:
        parts += [name.encode(), fp._digest(sys.modules[name])]
    return digest_bytes(*parts)


# Class attributes that are caches filled in lazily, or positions in the source.
_CLASS_SKIP = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__module__",
        "__slotnames__",
        "_abc_impl",
        "__firstlineno__",
        "__static_attributes__",
        "__annotations_cache__",
        "_value2member_map_",  # Enum: grows as Flag combinations are looked up
    }
)


def _c_class(fp: Fingerprinter, cls: type) -> bytes:
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    if not _is_user_module(module):
        assert isinstance(module, str)
        # Classes written in C cannot be redefined; Python classes must be importable by name.
        if not cls.__flags__ & _HEAPTYPE or _importable(cls, module, qualname):
            return _libref(b"libclass", module, qualname)
    parts: list[bytes] = [
        b"class",
        str(qualname).encode("utf-8", "surrogatepass"),
        fp._digest(type(cls)),
        fp._ordered(cls.__bases__),
    ]
    members = sorted(
        ((k, v) for k, v in cls.__dict__.items() if k not in _CLASS_SKIP), key=lambda kv: kv[0]
    )
    for name, member in members:
        parts += [str(name).encode("utf-8", "surrogatepass"), fp._digest(member)]
    return digest_bytes(*parts)


def _c_module(fp: Fingerprinter, module: types.ModuleType) -> bytes:
    name = getattr(module, "__name__", None)
    if not isinstance(name, str):
        name = "?"
    return digest_bytes(b"module", name.encode(), _package_version(name).encode())


def _exported_as(obj: object, module: object, name: object) -> bool:
    """Whether *obj* is the object bound to *name* in *module* (``random.randint``)."""
    if not isinstance(module, str) or not isinstance(name, str):
        return False
    mod = sys.modules.get(module)
    return mod is not None and getattr(mod, "__dict__", {}).get(name) is obj


def _c_method(fp: Fingerprinter, m: types.MethodType) -> bytes:
    func = m.__func__
    owner = type(m.__self__).__module__
    name = getattr(func, "__name__", None)
    if not _is_user_module(owner) and _exported_as(m, owner, name):
        # A module-level alias of a library singleton's method: its state (a hidden RNG,
        # say) is not part of the function's identity.
        assert isinstance(owner, str) and isinstance(name, str)
        return _libref(b"libmethod", owner, name)
    return _x(b"method\0" + fp._digest(m.__self__) + fp._digest(func))


def _c_builtin_function(fp: Fingerprinter, f: Any) -> bytes:
    owner = getattr(f, "__self__", None)
    name = getattr(f, "__name__", "?")
    qualname = getattr(f, "__qualname__", name)
    module = getattr(f, "__module__", None)
    if owner is None or isinstance(owner, types.ModuleType):
        if not isinstance(module, str):
            module = getattr(owner, "__name__", None) or "builtins"
        return _libref(b"libbuiltin", module, qualname)
    owner_module = type(owner).__module__
    for candidate in (module, owner_module):
        if not _is_user_module(candidate) and _exported_as(f, candidate, name):
            assert isinstance(candidate, str)
            return _libref(b"libbuiltin", candidate, name)
    return digest_bytes(b"boundbuiltin", fp._digest(owner), str(qualname).encode())


def _c_descriptor(fp: Fingerprinter, d: Any) -> bytes:
    owner = getattr(d, "__objclass__", None)
    if owner is None:
        owner = getattr(d, "__self__", None)
    return digest_bytes(
        b"descriptor", type(d).__name__.encode(), str(d.__name__).encode(), fp._digest(owner)
    )


def _c_partial(fp: Fingerprinter, p: Any) -> bytes:
    extra = getattr(p, "__dict__", None)
    return _x(
        b"partial\0"
        + fp._digest(type(p))
        + fp._digest(p.func)
        + fp._digest(p.args)
        + fp._digest(p.keywords)
        + (_c_dict(fp, extra) if extra else _NONE_DIGEST)
    )


def _c_property(fp: Fingerprinter, p: property) -> bytes:
    return _x(
        b"property\0"
        + fp._digest(type(p))
        + fp._digest(p.fget)
        + fp._digest(p.fset)
        + fp._digest(p.fdel)
        + fp._digest(p.__doc__)
    )


def _c_wrapper(fp: Fingerprinter, w: Any) -> bytes:
    return _x(b"wrapper\0" + fp._digest(type(w)) + fp._digest(w.__func__))


def _c_cached_property(fp: Fingerprinter, p: Any) -> bytes:
    return _x(b"cached_property\0" + fp._digest(p.func) + fp._digest(p.attrname))


def _c_lru_cache(fp: Fingerprinter, w: Any) -> bytes:
    return _x(b"lru_cache\0" + fp._digest(w.__wrapped__) + fp._digest(w.cache_parameters()))


def _unpicklable(kind: str) -> _Handler:
    def handler(fp: Fingerprinter, value: Any) -> bytes:
        raise Unfingerprintable(_type_name(type(value)), f"{kind} cannot be pickled")

    return handler


# ---- everything else: __reduce_ex__, then cloudpickle ------------------------------------------


def _c_reduce(fp: Fingerprinter, v: Any) -> bytes:
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
    return _x(
        b"reduce\0"
        + fp._digest(func)
        # args is a new tuple, and the usual state the instance __dict__: digesting them here
        # saves bookkeeping, and a level of recursion per object in linked structures
        + (_c_tuple(fp, args) if type(args) is tuple else fp._digest(args))
        + (_c_dict(fp, state) if type(state) is dict else fp._digest(state))
        + (_NONE_DIGEST if items is None else fp._ordered(items))
        + (_NONE_DIGEST if pairs is None else fp._pairs(pairs))
        + fp._digest(setter)
    )


def _global_reference(fp: Fingerprinter, v: Any, name: str) -> bytes:
    """A value pickled by reference: ``module.name``."""
    module = getattr(v, "__module__", None)
    if not isinstance(module, str):
        module = pickle.whichmodule(v, name)  # type: ignore[attr-defined]
    if not _is_user_module(module):
        return _libref(b"global", module, name)
    state = _instance_state(v)
    wrapped = getattr(v, "__wrapped__", None)
    return _x(
        b"mainglobal\0"
        + _a_str(name)
        + fp._digest(type(v))
        + fp._digest(wrapped)
        + (_NONE_DIGEST if state is None else _c_dict(fp, state))
    )


def _cloudpickled(v: Any, cause: BaseException) -> bytes:
    try:
        import cloudpickle

        data = cloudpickle.dumps(v, protocol=5)
    except Exception:
        raise Unfingerprintable(
            _type_name(type(v)), f"it cannot be pickled ({_reason(cause)})"
        ) from cause
    return _tagged(b"cloudpickle\0", data)


# ---- numpy ------------------------------------------------------------------------------------

# Kinds whose raw bytes are the value (no pointers): bool, ints, floats, complex, datetimes,
# bytes, unicode and void/structured.
_RAW_KINDS = frozenset("biufcmMSUV")


def _dtype_token(dt: Any) -> bytes:
    if dt.fields is None and dt.subdtype is None:
        text = dt.str if dt.kind in _RAW_KINDS or dt.kind == "O" else f"{dt.str}|{dt!r}"
    else:
        text = f"{dt.str}|{dt.descr!r}|{dt.itemsize}|{dt.isalignedstruct}"
    return text.encode()


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


def _c_ndarray(fp: Fingerprinter, arr: Any) -> bytes:
    import numpy as np

    dt = arr.dtype
    head = _x(_dtype_token(dt)) + _u64(arr.ndim) + b"".join(_u64(n) for n in arr.shape)
    if dt.hasobject or dt.kind not in _RAW_KINDS:
        return _x(b"ndarray-items\0" + head + fp._ordered(arr.flat))
    chunks: Iterable[Any]
    if arr.flags.c_contiguous:
        order, chunks = b"C", (arr,)
    elif arr.flags.f_contiguous:
        # The transpose of an F-contiguous array is a C-contiguous view of the same memory.
        order, chunks = b"F", (arr.T,)
    else:
        order, chunks = b"C", _c_order_chunks(arr)
    hasher = xxhash.xxh3_128(b"ndarray\0" + head + order)
    for chunk in chunks:
        if chunk.nbytes:
            hasher.update(chunk.reshape(-1).view(np.uint8))
        del chunk
    return hasher.digest()


def _c_ndarray_subclass(fp: Fingerprinter, arr: Any) -> bytes:
    import numpy as np

    state = _instance_state(arr)
    return _x(
        b"ndarray-subclass\0"
        + fp._digest(type(arr))
        + _c_ndarray(fp, arr.view(np.ndarray))
        + (_NONE_DIGEST if state is None else _c_dict(fp, state))
    )


def _c_masked_array(fp: Fingerprinter, arr: Any) -> bytes:
    import numpy as np

    ma = sys.modules["numpy.ma"]
    return _x(
        b"masked-array\0"
        + fp._digest(type(arr))
        + _c_ndarray(fp, arr.view(np.ndarray))
        + fp._digest(ma.getmask(arr))
        + fp._digest(arr.fill_value)
        + fp._digest(bool(arr.hardmask))
    )


_SCALAR_TOKENS: dict[str, bytes] = {}


def _a_numpy_scalar(v: Any) -> bytes:
    dt = v.dtype
    # for these kinds dtype.str is the whole token
    token = _SCALAR_TOKENS.get(dt.str) if dt.kind in _RAW_KINDS else None
    if token is None:
        token = _x(_dtype_token(dt))
        if dt.kind in _RAW_KINDS and dt.fields is None and dt.subdtype is None:
            _SCALAR_TOKENS[dt.str] = token
    return _x(b"npscalar\0" + token + v.tobytes())


def _c_numpy_void(fp: Fingerprinter, v: Any) -> bytes:
    token = _x(_dtype_token(v.dtype))
    if v.dtype.hasobject:
        return _x(b"npvoid-items\0" + token + fp._digest(v.item()))
    return _x(b"npscalar\0" + token + v.tobytes())


def _c_np_generator(fp: Fingerprinter, g: Any) -> bytes:
    return _x(b"np.Generator\0" + fp._digest(type(g)) + fp._digest(g.bit_generator))


def _c_np_bit_generator(fp: Fingerprinter, bg: Any) -> bytes:
    seed_seq = getattr(bg, "seed_seq", getattr(bg, "_seed_seq", None))
    return _x(
        b"np.BitGenerator\0" + fp._digest(type(bg)) + fp._digest(bg.state) + fp._digest(seed_seq)
    )


def _c_np_random_state(fp: Fingerprinter, rs: Any) -> bytes:
    return _x(b"np.RandomState\0" + fp._digest(type(rs)) + fp._digest(rs.get_state(legacy=False)))


def _c_np_seed_sequence(fp: Fingerprinter, s: Any) -> bytes:
    return _x(
        b"np.SeedSequence\0"
        + fp._digest(type(s))
        + fp._digest(s.entropy)
        + fp._digest(tuple(s.spawn_key))
        + fp._digest(s.pool_size)
        + fp._digest(s.n_children_spawned)
    )


def _numpy_rule(t: type) -> _Atomic | tuple[_Handler, int] | None:
    np = sys.modules["numpy"]
    # Only classes that exist: a module still being imported lacks some of them, and a value
    # cannot be an instance of a class that does not exist yet.
    ndarray = getattr(np, "ndarray", None)
    if ndarray is not None and issubclass(t, ndarray):
        if t is ndarray or issubclass(t, np.memmap):
            return (_c_ndarray, _CALL_MEMO)
        ma = sys.modules.get("numpy.ma")
        masked = getattr(ma, "masked", None)
        if masked is not None and issubclass(t, type(masked)):
            return (_c_reduce, _CALL_MEMO)
        masked_array = getattr(ma, "MaskedArray", None)
        if masked_array is not None and issubclass(t, masked_array):
            return (_c_masked_array, _CALL_MEMO)
        return (_c_ndarray_subclass, _CALL_MEMO)
    void = getattr(np, "void", None)
    if void is not None and issubclass(t, void):
        return (_c_numpy_void, _NO_MEMO)
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
            return (handler, _CALL_MEMO)
    return None


# ---- pandas -----------------------------------------------------------------------------------


# Strings joined per piece: bounds the text copied at once for a column of long documents.
_JOIN_CHUNK = 16_384


def _joined_strings(items: list[Any]) -> bytes | None:
    """Digest of a list of ``str`` in one pass over their UTF-8 bytes; None if not all are str.

    The strings are joined with NUL; that is only unambiguous when no string holds a NUL, which
    one count of the separators proves (else the caller falls back to hashing element by element).
    The digest is that of the whole joined text, however it is cut into pieces.
    """
    hasher = xxhash.xxh3_128(b"strings.joined\0" + _u64(len(items)))
    for start in range(0, len(items), _JOIN_CHUNK):
        piece = items[start : start + _JOIN_CHUNK]
        try:
            joined = "\0".join(piece)
        except TypeError:
            return None
        if joined.count("\0") != len(piece) - 1:
            return None
        if start:
            hasher.update(b"\0")
        hasher.update(joined.encode("utf-8", "surrogatepass"))
    return hasher.digest()


def _pd_object_values(fp: Fingerprinter, arr: Any) -> bytes:
    """An object ndarray from pandas: all-string data is hashed as one buffer of UTF-8 bytes."""
    import numpy as np

    pd = sys.modules["pandas"]
    if arr.ndim == 1:
        joined = _joined_strings(arr.tolist())
        if joined is not None:
            return _x(b"pd.strings\0" + joined)
        try:
            mask = np.asarray(pd.isna(arr), dtype=bool)
        except Exception:
            mask = None
        if mask is not None and mask.shape == arr.shape and mask.any():
            # Where the values are is the mask; what they are (None, nan, NA, NaT: all "missing"
            # to pandas) is their one type; the strings between them are joined as above.
            kinds = set(map(type, arr[mask].tolist()))
            joined = _joined_strings(arr[~mask].tolist()) if len(kinds) == 1 else None
            if joined is not None:
                kind = fp._digest(kinds.pop())
                return _x(b"pd.strings.masked\0" + kind + _c_ndarray(fp, mask) + joined)
    return _c_ndarray(fp, arr)


def _pd_values(fp: Fingerprinter, values: Any) -> bytes:
    """The values of a Series, Index or column: an ndarray or an ExtensionArray."""
    import numpy as np

    pd = sys.modules["pandas"]
    if isinstance(values, np.ndarray):
        if values.dtype.hasobject:
            return _pd_object_values(fp, values)
        return _c_ndarray(fp, values)
    numpy_backed = getattr(pd.arrays, "NumpyExtensionArray", None) or pd.arrays.PandasArray
    if isinstance(values, numpy_backed):
        return _pd_values(fp, values.to_numpy())
    dtype = values.dtype
    if isinstance(values, pd.Categorical):
        return _x(
            b"pd.Categorical\0"
            + fp._digest(values.categories)
            + (b"\1" if values.ordered else b"\0")
            + _c_ndarray(fp, np.asarray(values.codes))
        )
    token = _x(str(dtype).encode("utf-8", "surrogatepass"))
    asi8 = getattr(values, "asi8", None)
    if isinstance(asi8, np.ndarray):
        return _x(b"pd.datetimelike\0" + token + _c_ndarray(fp, asi8))
    data, mask = getattr(values, "_data", None), getattr(values, "_mask", None)
    if (
        isinstance(data, np.ndarray)
        and isinstance(mask, np.ndarray)
        and mask.dtype == bool
        and data.shape == mask.shape
        and not data.dtype.hasobject
    ):
        if mask.any():
            # what sits under the mask is arbitrary
            data = np.where(mask, np.zeros((), dtype=data.dtype), data)
        return _x(b"pd.masked\0" + token + _c_ndarray(fp, data) + _c_ndarray(fp, mask))
    if isinstance(dtype, pd.StringDtype):
        # The python-backed StringArray keeps its object ndarray; others convert (a copy).
        raw = getattr(values, "_ndarray", None)
        if not (isinstance(raw, np.ndarray) and raw.dtype.hasobject):
            raw = values.to_numpy(dtype=object)
        return _x(b"pd.string\0" + token + _pd_object_values(fp, raw))
    return _x(b"pd.extension\0" + token + fp._ordered(values))


def _c_pd_index(fp: Fingerprinter, idx: Any) -> bytes:
    pd = sys.modules["pandas"]
    kind = fp._digest(type(idx))
    names = fp._digest(list(idx.names))
    if isinstance(idx, pd.MultiIndex):
        import numpy as np

        levels = fp._ordered(idx.levels)
        codes = b"".join(_c_ndarray(fp, np.asarray(c)) for c in idx.codes)
        return _x(b"pd.MultiIndex\0" + kind + names + levels + codes)
    if isinstance(idx, pd.RangeIndex):
        bounds = _a_int(idx.start) + _a_int(idx.stop) + _a_int(idx.step)
        return _x(b"pd.RangeIndex\0" + kind + names + bounds)
    freq = fp._digest(getattr(idx, "freqstr", None))
    return _x(b"pd.Index\0" + kind + names + freq + _pd_values(fp, idx.array))


def _c_pd_series(fp: Fingerprinter, s: Any) -> bytes:
    return _x(
        b"pd.Series\0"
        + fp._digest(type(s))
        + fp._digest(s.name)
        + fp._digest(s.index)
        + fp._digest(s.attrs)
        + _pd_values(fp, s.array)
    )


def _c_pd_frame(fp: Fingerprinter, df: Any) -> bytes:
    parts = [
        b"pd.DataFrame\0",
        fp._digest(type(df)),
        fp._digest(df.columns),
        fp._digest(df.index),
        fp._digest(df.attrs),
    ]
    columns = df.iloc
    for i in range(df.shape[1]):
        parts.append(_pd_values(fp, columns[:, i].array))
    return _x(b"".join(parts))


def _c_pd_array(fp: Fingerprinter, arr: Any) -> bytes:
    return _x(b"pd.array\0" + fp._digest(type(arr)) + _pd_values(fp, arr))


def _pandas_rule(t: type) -> tuple[_Handler, int] | None:
    pd = sys.modules["pandas"]
    extensions = getattr(getattr(pd, "api", None), "extensions", None)
    rules = [
        (getattr(pd, "DataFrame", None), _c_pd_frame),
        (getattr(pd, "Series", None), _c_pd_series),
        (getattr(pd, "Index", None), _c_pd_index),
        (getattr(extensions, "ExtensionArray", None), _c_pd_array),
    ]
    for base, handler in rules:
        if isinstance(base, type) and issubclass(t, base):
            return (handler, _CALL_MEMO)
    return None


# ---- rule tables ------------------------------------------------------------------------------

_EXACT_COMPOSITE: dict[type, tuple[_Handler, int]] = {
    list: (_c_list, _CALL_MEMO),
    tuple: (_c_tuple, _CALL_MEMO),
    dict: (_c_dict, _CALL_MEMO),
    set: (_c_set, _CALL_MEMO),
    frozenset: (_c_frozenset, _CALL_MEMO),
    collections.OrderedDict: (_c_ordereddict, _CALL_MEMO),
    collections.defaultdict: (_c_defaultdict, _CALL_MEMO),
    types.MappingProxyType: (_c_mappingproxy, _CALL_MEMO),
    type({}.keys()): (_c_dict_keys, _NO_MEMO),
    type({}.values()): (_c_dict_values, _NO_MEMO),
    type({}.items()): (_c_dict_items, _NO_MEMO),
    slice: (_c_slice, _NO_MEMO),
    datetime.datetime: (_c_datetime, _NO_MEMO),
    datetime.time: (_c_time, _NO_MEMO),
    types.UnionType: (_c_union, _NO_MEMO),
    types.FunctionType: (_c_function, _LIFE_MEMO),
    types.CodeType: (_c_code, _LIFE_MEMO),
    types.MethodType: (_c_method, _CALL_MEMO),
    types.BuiltinFunctionType: (_c_builtin_function, _CALL_MEMO),
    types.ModuleType: (_c_module, _LIFE_MEMO),
    functools.partial: (_c_partial, _CALL_MEMO),
    property: (_c_property, _CALL_MEMO),
    staticmethod: (_c_wrapper, _CALL_MEMO),
    classmethod: (_c_wrapper, _CALL_MEMO),
    functools.cached_property: (_c_cached_property, _CALL_MEMO),
    type(functools.lru_cache()(lambda: None)): (_c_lru_cache, _LIFE_MEMO),
    types.MemberDescriptorType: (_c_descriptor, _NO_MEMO),
    types.GetSetDescriptorType: (_c_descriptor, _NO_MEMO),
    types.MethodDescriptorType: (_c_descriptor, _NO_MEMO),
    types.WrapperDescriptorType: (_c_descriptor, _NO_MEMO),
    types.ClassMethodDescriptorType: (_c_descriptor, _NO_MEMO),
    types.MethodWrapperType: (_c_descriptor, _NO_MEMO),
    types.GeneratorType: (_unpicklable("generators"), _NO_MEMO),
    types.CoroutineType: (_unpicklable("coroutines"), _NO_MEMO),
    types.AsyncGeneratorType: (_unpicklable("async generators"), _NO_MEMO),
    types.FrameType: (_unpicklable("frames"), _NO_MEMO),
    types.TracebackType: (_unpicklable("tracebacks"), _NO_MEMO),
}

# Subclasses that keep their base's meaning (a property subclass is still a property).
_SUBCLASS_RULES: list[tuple[type, tuple[_Handler, int]]] = [
    (property, (_c_property, _CALL_MEMO)),
    (staticmethod, (_c_wrapper, _CALL_MEMO)),
    (classmethod, (_c_wrapper, _CALL_MEMO)),
    (functools.partial, (_c_partial, _CALL_MEMO)),
]


# ---- public shortcuts -------------------------------------------------------------------------


def fingerprint(value: object) -> bytes:
    """Return the 16-byte fingerprint of *value*; raise :class:`Unfingerprintable`.

    >>> fingerprint({"b": 2, "a": 1}) == fingerprint({"a": 1, "b": 2})
    True
    >>> fingerprint(1) == fingerprint(1.0)
    False
    """
    return Fingerprinter().digest(value)


def fingerprint_hex(value: object) -> str:
    """Return :func:`fingerprint` of *value* as 32 hexadecimal digits.

    >>> len(fingerprint_hex([1, 2, 3]))
    32
    """
    return fingerprint(value).hex()
