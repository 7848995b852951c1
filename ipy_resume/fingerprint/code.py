"""Code and library references: functions, classes, modules, methods, descriptors.

Functions and classes from ``__main__`` (or from a module that cannot be imported by name) are
fingerprinted by what they are: code objects (bytecode, constants, names; not source, file
names or line numbers), defaults, closure cells, ``__wrapped__`` and the globals they read,
transitively.  Library functions, classes and modules are fingerprinted by module, qualified
name and the version of their top-level package, never by their code or contents.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import importlib.util
import os
import platform
import site
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

import xxhash

from .containers import c_dict
from .core import (
    CALL_MEMO,
    LIFE_MEMO,
    Fingerprinter,
    Handler,
    Rule,
    Unfingerprintable,
    add_exact,
    add_provider,
)
from .primitives import (
    EMPTY_CELL_DIGEST,
    HEAPTYPE,
    MISSING,
    NONE_DIGEST,
    digest_bytes,
    hash128,
    pack_u64,
    qualified_name,
)

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
    if _is_local_module(module):
        # A helper module next to the notebook has no distribution to ask; going straight to
        # its source also skips a scan of every installed distribution (~0.2 s per kernel).
        # Its source, not its ``__version__`` (mglearn says 0.2.0 whatever is edited in it).
        return _loaded_source_version(module) or "unknown"
    try:
        version = getattr(module, "__version__", None)
    except Exception:
        version = None
    if isinstance(version, str):
        return version
    if isinstance(version, (int, float, tuple)):
        return repr(version)
    cached = _DIST_VERSIONS.get(top)
    if cached is None:
        cached = _DIST_VERSIONS[top] = _metadata_version(top)
    if cached == "unknown":
        # A helper module next to the notebook has no version: its source files stand in
        # for one, so editing it invalidates the cells that use it.
        return _loaded_source_version(module) or cached
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


def prepare() -> None:
    """Settle what a kernel's first key reads from the environment once: where installed
    packages live (which tells a notebook's helper modules from libraries).

    >>> prepare()
    """
    _installed_roots()


def _is_local_module(module: object) -> bool:
    """A module loaded from a file outside site-packages and the standard library."""
    filename = getattr(module, "__file__", None)
    if not isinstance(filename, str) or not filename.endswith(".py"):
        return False
    return _is_local_file(filename)


@functools.lru_cache(maxsize=4096)  # (asked at every fingerprint of a module: numpy's too)
def _is_local_file(filename: str) -> bool:
    real = os.path.realpath(filename)
    return not any(real.startswith(root + os.sep) for root in _installed_roots())


def import_version(name: str) -> str | None:
    """What a cell's ``import NAME`` runs, as a part of its key: the source digest of a
    helper module or package next to the notebook (imported or not yet), else None
    (an installed library's objects are keyed by its version where a cell reads them).

    >>> import_version("json") is None
    True
    """
    top = name.partition(".")[0]
    if top in _STDLIB or top in sys.builtin_module_names:
        return None
    module: object = sys.modules.get(top)
    if module is None:
        try:
            spec = importlib.util.find_spec(top)  # (a top-level name: nothing is imported)
        except (ImportError, ValueError):
            return None
        origin = getattr(spec, "origin", None)
        if not isinstance(origin, str):
            return None
        module = types.SimpleNamespace(__file__=origin)
    if not _is_local_module(module):
        return None
    if isinstance(module, types.ModuleType):
        return _loaded_source_version(module)
    return _local_source_version(module)


# id(module) -> (the module, its ``__spec__`` then, the digest): the source a loaded helper
# module was first seen with.  A helper edited while the kernel has it imported keeps running
# its old code until it is reloaded (which gives it a new ``__spec__``): keyed by the file
# instead, a cell run with that old code would be saved under the new source's key, and the
# next kernel, running the new code, would restore it.
_AS_LOADED: dict[int, tuple[object, object, str | None]] = {}


def _loaded_source_version(module: object) -> str | None:
    """:func:`_local_source_version` of a loaded module as it was when first seen."""
    spec = getattr(module, "__spec__", None)
    entry = _AS_LOADED.get(id(module))
    if entry is not None and entry[0] is module and entry[1] is spec:
        return entry[2]
    version = _local_source_version(module)
    _AS_LOADED[id(module)] = (module, spec, version)
    return version


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
    import importlib.metadata  # (not at import: it costs as much as the rest of the extension)

    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:
        return {}


def _metadata_version(top: str) -> str:
    import importlib.metadata

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


def is_user_module(module: object) -> bool:
    # Code from __main__ (a notebook) or from a module we cannot version is fingerprinted by
    # what it is, not by name.
    return not isinstance(module, str) or module == "__main__" or module not in sys.modules


def _importable(obj: object, module: str, qualname: str) -> bool:
    """Whether ``module.qualname`` names *obj*, the test pickle applies to find it again.

    A function or class made at run time (by a factory, or redefined under the same name) is
    not importable, so its name says nothing about what it is.
    """
    target: object = sys.modules.get(module, MISSING)
    if target is MISSING or "<" in qualname:
        return False
    try:
        for part in qualname.split("."):
            target = getattr(target, part, MISSING)
            if target is MISSING:
                return False
    except Exception:
        return False
    return target is obj


def libref(tag: bytes, module: str, qualname: str) -> bytes:
    return digest_bytes(
        tag,
        module.encode("utf-8", "surrogatepass"),
        qualname.encode("utf-8", "surrogatepass"),
        _package_version(module).encode("utf-8", "surrogatepass"),
    )


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


@functools.lru_cache(maxsize=4096)
def _names_read(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """Global names and imported modules used by *code* and the code nested in it.

    Attribute names share ``co_names`` with globals (``np.sum`` lists both), so the
    instructions decide which is which; an unknown instruction counts as a global read.
    Cached by code object (equal code reads equal names): a function on a reference cycle is
    digested more than once.
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
    return frozenset(names), frozenset(imports)


def globals_read(code: types.CodeType) -> frozenset[str]:
    """The global names *code* (and the code nested in it) reads, attributes left out.

    >>> sorted(globals_read((lambda x: np.sum(x) + offset).__code__))
    ['np', 'offset']
    """
    return _names_read(code)[0]


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
        b"".join(pack_u64(n) for n in counts),
        co.co_code,
        getattr(co, "co_exceptiontable", b""),
        fp.digest_child(co.co_consts),
        _names_digest(co.co_names),
        _names_digest(co.co_varnames),
        _names_digest(co.co_freevars),
        _names_digest(co.co_cellvars),
        co.co_name.encode("utf-8", "surrogatepass"),
        getattr(co, "co_qualname", co.co_name).encode("utf-8", "surrogatepass"),
    )


def _closure_digest(fp: Fingerprinter, fn: types.FunctionType) -> bytes:
    cells = fn.__closure__ or ()
    out = bytearray(pack_u64(len(cells)))
    for cell in cells:
        try:
            contents = cell.cell_contents
        except ValueError:
            out += EMPTY_CELL_DIGEST
        else:
            out += fp.digest_child(contents)
    return bytes(out)


def _c_function(fp: Fingerprinter, fn: types.FunctionType) -> bytes:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", fn.__name__)
    if not is_user_module(module):
        assert isinstance(module, str)
        ref = libref(b"libfunction", module, qualname)
        if _importable(fn, module, qualname):
            return ref
        # A closure or lambda made by library code is not identified by its name alone:
        # two calls of a decorator factory give different functions with the same name.
        return digest_bytes(
            b"libclosure",
            ref,
            fp.digest_child(fn.__code__),
            fp.digest_child(fn.__defaults__),
            fp.digest_child(fn.__kwdefaults__),
            _closure_digest(fp, fn),
        )
    code = fn.__code__
    parts: list[bytes] = [
        b"function",
        qualname.encode("utf-8", "surrogatepass"),
        fp.digest_child(code),
        fp.digest_child(fn.__defaults__),
        fp.digest_child(fn.__kwdefaults__),
        _closure_digest(fp, fn),
        fp.digest_child(fn.__dict__.get("__wrapped__")),
    ]
    # The globals the function reads, transitively: editing a helper it calls, or data it
    # reads, changes its fingerprint.
    names, imports = _names_read(code)
    found = sorted(name for name in names if name in fn.__globals__)
    parts.append(pack_u64(len(found)))
    for name in found:
        parts += [name.encode("utf-8", "surrogatepass"), fp.digest_child(fn.__globals__[name])]
    modules = sorted(name for name in imports if name in sys.modules)
    parts.append(pack_u64(len(modules)))
    for name in modules:
        parts += [name.encode(), fp.digest_child(sys.modules[name])]
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
    if not is_user_module(module):
        assert isinstance(module, str)
        # Classes written in C cannot be redefined; Python classes must be importable by name.
        if not cls.__flags__ & HEAPTYPE or _importable(cls, module, qualname):
            return libref(b"libclass", module, qualname)
    parts: list[bytes] = [
        b"class",
        str(qualname).encode("utf-8", "surrogatepass"),
        fp.digest_child(type(cls)),
        fp.ordered(cls.__bases__),
    ]
    members = sorted(
        ((k, v) for k, v in cls.__dict__.items() if k not in _CLASS_SKIP), key=lambda kv: kv[0]
    )
    for name, member in members:
        parts += [str(name).encode("utf-8", "surrogatepass"), fp.digest_child(member)]
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


def tied_to_code(value: object) -> bool:
    """Whether *value*'s fingerprint follows code that may change between two kernels
    while the value itself round-trips exactly: a module, a function or class imported
    by reference (its module's version, or a helper module's source, is in the digest),
    or an instance of a class from a helper module next to the notebook.

    A restored value whose digest differs from the saved one is taken as the saved one
    (see :func:`register_alias`) only when it is not tied to code: for these, the
    difference is an edit of that code, which must make the cells reading them execute.

    >>> import json; tied_to_code(json), tied_to_code(json.dumps), tied_to_code([1])
    (True, True, False)
    """
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        return _exported_as(
            value, getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        )
    home = getattr(type(value), "__module__", None) or ""
    if home == "__main__":  # the notebook's own class (``__main__`` is a terminal's script)
        return False
    module = sys.modules.get(home)
    return module is not None and _is_local_module(module)


def _c_method(fp: Fingerprinter, m: types.MethodType) -> bytes:
    func = m.__func__
    owner = type(m.__self__).__module__
    name = getattr(func, "__name__", None)
    if not is_user_module(owner) and _exported_as(m, owner, name):
        # A module-level alias of a library singleton's method: its state (a hidden RNG,
        # say) is not part of the function's identity.
        assert isinstance(owner, str) and isinstance(name, str)
        return libref(b"libmethod", owner, name)
    return hash128(b"method\0" + fp.digest_child(m.__self__) + fp.digest_child(func))


def _c_builtin_function(fp: Fingerprinter, f: Any) -> bytes:
    owner = getattr(f, "__self__", None)
    name = getattr(f, "__name__", "?")
    qualname = getattr(f, "__qualname__", name)
    module = getattr(f, "__module__", None)
    if owner is None or isinstance(owner, types.ModuleType):
        if not isinstance(module, str):
            module = getattr(owner, "__name__", None) or "builtins"
        return libref(b"libbuiltin", module, qualname)
    owner_module = type(owner).__module__
    for candidate in (module, owner_module):
        if not is_user_module(candidate) and _exported_as(f, candidate, name):
            assert isinstance(candidate, str)
            return libref(b"libbuiltin", candidate, name)
    return digest_bytes(b"boundbuiltin", fp.digest_child(owner), str(qualname).encode())


def _c_descriptor(fp: Fingerprinter, d: Any) -> bytes:
    owner = getattr(d, "__objclass__", None)
    if owner is None:
        owner = getattr(d, "__self__", None)
    return digest_bytes(
        b"descriptor", type(d).__name__.encode(), str(d.__name__).encode(), fp.digest_child(owner)
    )


def _c_partial(fp: Fingerprinter, p: Any) -> bytes:
    extra = getattr(p, "__dict__", None)
    return hash128(
        b"partial\0"
        + fp.digest_child(type(p))
        + fp.digest_child(p.func)
        + fp.digest_child(p.args)
        + fp.digest_child(p.keywords)
        + (c_dict(fp, extra) if extra else NONE_DIGEST)
    )


def _c_property(fp: Fingerprinter, p: property) -> bytes:
    return hash128(
        b"property\0"
        + fp.digest_child(type(p))
        + fp.digest_child(p.fget)
        + fp.digest_child(p.fset)
        + fp.digest_child(p.fdel)
        + fp.digest_child(p.__doc__)
    )


def _c_wrapper(fp: Fingerprinter, w: Any) -> bytes:
    return hash128(b"wrapper\0" + fp.digest_child(type(w)) + fp.digest_child(w.__func__))


def _c_cached_property(fp: Fingerprinter, p: Any) -> bytes:
    return hash128(b"cached_property\0" + fp.digest_child(p.func) + fp.digest_child(p.attrname))


def _c_lru_cache(fp: Fingerprinter, w: Any) -> bytes:
    return hash128(
        b"lru_cache\0" + fp.digest_child(w.__wrapped__) + fp.digest_child(w.cache_parameters())
    )


def _unpicklable(kind: str) -> Handler:
    def handler(fp: Fingerprinter, value: Any) -> bytes:
        raise Unfingerprintable(qualified_name(type(value)), f"{kind} cannot be pickled")

    return handler


# Subclasses that keep their base's meaning (a property subclass is still a property).
_SUBCLASS_RULES: list[tuple[type, tuple[Handler, int]]] = [
    (property, (_c_property, CALL_MEMO)),
    (staticmethod, (_c_wrapper, CALL_MEMO)),
    (classmethod, (_c_wrapper, CALL_MEMO)),
    (functools.partial, (_c_partial, CALL_MEMO)),
]


def _class_rule(t: type) -> Rule | None:
    return (_c_class, LIFE_MEMO) if issubclass(t, type) else None


def _subclass_rule(t: type) -> Rule | None:
    if issubclass(t, types.ModuleType):
        return (_c_module, LIFE_MEMO)
    for base, rule in _SUBCLASS_RULES:
        if issubclass(t, base):
            return rule
    return None


add_exact(
    {
        types.FunctionType: (_c_function, LIFE_MEMO),
        types.CodeType: (_c_code, LIFE_MEMO),
        types.MethodType: (_c_method, CALL_MEMO),
        types.BuiltinFunctionType: (_c_builtin_function, CALL_MEMO),
        types.ModuleType: (_c_module, LIFE_MEMO),
        functools.partial: (_c_partial, CALL_MEMO),
        property: (_c_property, CALL_MEMO),
        staticmethod: (_c_wrapper, CALL_MEMO),
        classmethod: (_c_wrapper, CALL_MEMO),
        functools.cached_property: (_c_cached_property, CALL_MEMO),
        type(functools.lru_cache()(lambda: None)): (_c_lru_cache, LIFE_MEMO),
        types.MemberDescriptorType: (_c_descriptor, CALL_MEMO),
        types.GetSetDescriptorType: (_c_descriptor, CALL_MEMO),
        types.MethodDescriptorType: (_c_descriptor, CALL_MEMO),
        types.WrapperDescriptorType: (_c_descriptor, CALL_MEMO),
        types.ClassMethodDescriptorType: (_c_descriptor, CALL_MEMO),
        types.MethodWrapperType: (_c_descriptor, CALL_MEMO),
        types.GeneratorType: (_unpicklable("generators"), CALL_MEMO),
        types.CoroutineType: (_unpicklable("coroutines"), CALL_MEMO),
        types.AsyncGeneratorType: (_unpicklable("async generators"), CALL_MEMO),
        types.FrameType: (_unpicklable("frames"), CALL_MEMO),
        types.TracebackType: (_unpicklable("tracebacks"), CALL_MEMO),
    }
)
add_provider(_class_rule, order=10)
add_provider(_subclass_rule, order=60)
