"""A value fingerprint of a kernel's namespace, to compare two runs of one notebook.

The corpus harness (``tests/corpus_runner.py``) sends this file's text to the
kernel as an extra, un-checkpointed last cell; it is executed in a scope of its
own and prints one JSON line. It is deliberately independent of ipy_resume's
own fingerprints: it is the referee, so it shares none of their code.

What it records, per user-visible name (not starting with ``_``):

* a digest of the value: arrays by dtype, shape and bytes; DataFrames, Series and
  Index by labels, dtypes and ``hash_pandas_object`` per column; containers
  recursively; other objects by their type and public attributes (recursively,
  with depth and size bounds); modules, functions, classes, generators and
  matplotlib/seaborn plot objects are left out (only their kind is recorded);
* digests of the parts of each value down to a few levels (``grid.best_estimator_``,
  ``df['price']``), so a difference can be located;
* identity: which paths reach one and the same object (``X`` and ``iris['data']``;
  not tuples or frozensets of numbers and strings, whose identity Python leaves open),
  which arrays share memory (a view and its base), and which names are a
  module's own object (``norm`` *is* ``scipy.stats.norm``);
* the global RNG states of ``random`` and numpy, and library settings
  (``matplotlib.rcParams``, pandas options, numpy print options).
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import fractions
import hashlib
import io
import json
import pathlib
import random
import re
import sys
import types
import uuid
from typing import Any

MAX_DEPTH = 10
"""Deeper values are summarised by their type only (the same in both runs)."""
MAX_NODES = 300_000
"""Objects visited per snapshot before the rest are summarised by type (never a hang)."""
PART_DEPTH = 3
"""Levels of parts listed per name, to locate a difference (``grid.best_estimator_.steps``)."""
MAX_PARTS = 300
ALIAS_DEPTH = 3
MAX_ITEMS = 20_000
"""Object arrays and containers longer than this are digested by their first items only."""

_EXCLUDED = {"In", "Out", "exit", "quit", "get_ipython"}
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ATOMIC = (type(None), bool, int, float, complex, str, bytes)
_LEFT_OUT = (
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    type,
)


def _sha(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(len(chunk).to_bytes(8, "little"))
        h.update(chunk)
    return h.hexdigest()[:32]


def _text(value: Any) -> str:
    """repr without memory addresses, which differ between processes for equal values."""
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr failed: {type(exc).__name__}>"
    return _ADDRESS.sub("", text)[:4000]


def _type_name(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}.{t.__qualname__}"


def only_atoms(value: Any, depth: int = 0) -> bool:
    """True for a tuple or frozenset of numbers, strings and such (nested ones too), or of
    objects a restore brings back as themselves (a library's classes and functions, stored
    by reference: ``numpy.ScalarType``): equal ones are interchangeable, so which of them
    two paths reach is no identity to compare."""
    if not isinstance(value, (tuple, frozenset)) or depth > MAX_DEPTH or len(value) > MAX_ITEMS:
        return False
    return all(
        isinstance(item, _ATOMIC) or _by_reference(item) or only_atoms(item, depth + 1)
        for item in value
    )


def _by_reference(item: Any) -> bool:
    if isinstance(item, types.ModuleType):
        return True
    by_name = (type, types.FunctionType, types.BuiltinFunctionType)
    return isinstance(item, by_name) and getattr(item, "__module__", "__main__") != "__main__"


def plot_object(value: Any) -> bool:
    """matplotlib figures, axes, artists and containers (``mpl_toolkits``' 3D axes too:
    they ship with matplotlib and pickle as its own do), seaborn grids."""
    module = type(value).__module__ or ""
    return module.startswith(("matplotlib", "mpl_toolkits", "seaborn.axisgrid"))


def left_out(value: Any) -> str | None:
    """The kind of a value the fingerprint leaves out, or None."""
    if isinstance(value, types.ModuleType):
        return "module"
    if isinstance(value, type):
        return "class"
    if isinstance(value, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "generator"
    if isinstance(value, _LEFT_OUT):
        return "function"
    if plot_object(value):
        return "plot"
    if isinstance(value, io.IOBase) and value.closed:
        # A file a `with` block closed: spent, never stored (ipy_resume leaves it out).
        return "closed file"
    return None


class Walker:
    """One snapshot: digests with memo and cycle guard, child tables, identity, arrays seen.

    Every object computed keeps a table of its direct children's digests, so the parts
    of a name can be listed even when the object was first reached through another name
    (and its digest came from the memo the second time).
    """

    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.tables: dict[int, dict[str, tuple[str, int | None]]] = {}
        self.keep: list[Any] = []  # keeps visited objects alive, so no id is reused mid-walk
        self.on_path: set[int] = set()
        self.nodes = 0
        self.seen_at: dict[int, list[str]] = {}
        self.arrays: list[tuple[str, Any]] = []
        self.np: Any = sys.modules.get("numpy")
        self.pd: Any = sys.modules.get("pandas")
        self._open: list[dict[str, tuple[str, int | None]]] = []

    # ---- the walk -------------------------------------------------------------------------

    def digest(self, value: Any, path: str, depth: int) -> str:
        kind = left_out(value)
        trackable = not isinstance(value, _ATOMIC) and kind in (None, "plot")
        if self.np is not None and isinstance(value, self.np.generic):
            trackable = False
        # A tuple of strings two estimators share (a default argument) is one object or two
        # only to ``is``: Python lets equal immutable values be either (docs/state.md).
        if trackable and depth <= ALIAS_DEPTH and not only_atoms(value):
            self.seen_at.setdefault(id(value), []).append(path)
        if kind is not None:
            return _sha(b"left-out", kind.encode(), _type_name(value).encode())
        key = id(value)
        if trackable and key in self.memo:
            return self.memo[key]
        if key in self.on_path:
            return _sha(b"cycle", _type_name(value).encode())
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            return _sha(b"bound", _type_name(value).encode())
        self.nodes += 1
        self.on_path.add(key)
        table: dict[str, tuple[str, int | None]] = {}
        self._open.append(table)
        try:
            result = self._compute(value, path, depth)
        except Exception as exc:  # a value the referee cannot read is compared by its type
            result = _sha(b"unreadable", _type_name(value).encode(), type(exc).__name__.encode())
        finally:
            self._open.pop()
            self.on_path.discard(key)
        if trackable:
            self.memo[key] = result
            self.tables[key] = table
            self.keep.append(value)
        return result

    def child(self, suffix: str, value: Any, path: str, depth: int) -> str:
        """Digest of a part of the value being computed, noted in its table."""
        result = self.digest(value, path + suffix, depth + 1)
        if self._open:
            self._open[-1][suffix] = (result, id(value) if id(value) in self.tables else None)
        return result

    def note(self, suffix: str, result: str) -> str:
        if self._open:
            self._open[-1][suffix] = (result, None)
        return result

    def parts(self, value: Any, name: str) -> dict[str, str]:
        """Digests of the parts of *value* down to PART_DEPTH levels, by path."""
        out: dict[str, str] = {}

        def expand(key: int, prefix: str, level: int, seen: frozenset[int]) -> None:
            for suffix, (result, child) in self.tables.get(key, {}).items():
                if len(out) >= MAX_PARTS:
                    return
                out[prefix + suffix] = result
                if child is not None and level + 1 < PART_DEPTH and child not in seen:
                    expand(child, prefix + suffix, level + 1, seen | {child})

        expand(id(value), name, 0, frozenset({id(value)}))
        return out

    def _compute(self, value: Any, path: str, depth: int) -> str:
        np, pd = self.np, self.pd
        tname = _type_name(value).encode()
        if isinstance(value, bool) or value is None:
            return _sha(b"const", repr(value).encode())
        if isinstance(value, float):
            return _sha(b"float", value.hex().encode())
        if isinstance(value, (int, complex)):
            return _sha(tname, repr(value).encode())
        if isinstance(value, str):
            return _sha(tname, value.encode("utf-8", "surrogatepass"))
        if isinstance(value, (bytes, bytearray)):
            return _sha(tname, bytes(value))
        if np is not None:
            if isinstance(value, np.ndarray):
                return self._array(value, path, depth)
            if isinstance(value, np.generic):
                return _sha(b"npscalar", value.dtype.str.encode(), _text(value).encode())
            if isinstance(value, np.random.Generator):
                state = value.bit_generator.state
                return _sha(tname, self.child(".state", state, path, depth).encode())
            if isinstance(value, np.random.RandomState):
                state = value.get_state(legacy=False)
                return _sha(tname, self.child(".state", state, path, depth).encode())
        if pd is not None and (type(value).__module__ or "").startswith("pandas"):
            digest = self._pandas(value, path, depth)
            if digest is not None:
                return digest
        if isinstance(value, random.Random):
            return _sha(tname, self.child(".state", value.getstate(), path, depth).encode())
        if isinstance(value, dict):
            return self._mapping(value, path, depth, tname)
        if isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
            items = list(value)[:MAX_ITEMS]
            children = [self.child(f"[{i}]", v, path, depth) for i, v in enumerate(items)]
            extra = self._attributes(value, path, depth) if hasattr(value, "__dict__") else ""
            return _sha(
                tname, str(len(value)).encode(), *(c.encode() for c in children), extra.encode()
            )
        if isinstance(value, (set, frozenset)):
            children = sorted(
                self.digest(v, f"{path}{{}}", depth + 1) for v in list(value)[:MAX_ITEMS]
            )
            return _sha(tname, str(len(value)).encode(), *(c.encode() for c in children))
        if isinstance(
            value,
            (
                range,
                slice,
                datetime.date,
                datetime.time,
                datetime.timedelta,
                decimal.Decimal,
                fractions.Fraction,
                uuid.UUID,
                pathlib.PurePath,
            ),
        ):
            return _sha(tname, _text(value).encode())
        if isinstance(value, io.IOBase):
            name = getattr(value, "name", "")
            return _sha(tname, _text(name).encode(), str(value.closed).encode())
        if hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
            return _sha(tname, self._attributes(value, path, depth).encode())
        return _sha(tname, _text(value).encode())

    def _attributes(self, value: Any, path: str, depth: int) -> str:
        names: dict[str, Any] = {}
        with contextlib.suppress(TypeError):  # no __dict__: slots only
            names.update(vars(value))
        for cls in type(value).__mro__:
            for slot in getattr(cls, "__slots__", ()) or ():
                if isinstance(slot, str) and hasattr(value, slot):
                    names.setdefault(slot, getattr(value, slot))
        public = sorted(name for name in names if not name.startswith("_"))
        if not public:
            return _sha(b"no-public-state", _text(value).encode())
        children = [
            name.encode() + b"=" + self.child(f".{name}", names[name], path, depth).encode()
            for name in public
        ]
        return _sha(b"attrs", *children)

    def _mapping(self, value: dict[Any, Any], path: str, depth: int, tname: bytes) -> str:
        pairs = []
        for i, (k, v) in enumerate(list(value.items())[:MAX_ITEMS]):
            label = repr(k) if isinstance(k, (str, int, float, bool, type(None))) else f"<key {i}>"
            key_digest = self.digest(k, f"{path}<key {i}>", depth + 1)
            pairs.append((key_digest, self.child(f"[{label}]", v, path, depth)))
        pairs.sort()
        flat = [f"{a}:{b}".encode() for a, b in pairs]
        return _sha(tname, str(len(value)).encode(), *flat)

    def _array(self, value: Any, path: str, depth: int) -> str:
        if depth <= ALIAS_DEPTH:
            self.arrays.append((path, value))
        head = [b"ndarray", value.dtype.str.encode(), repr(value.shape).encode()]
        if value.dtype.hasobject:
            flat = value.ravel(order="C")[:MAX_ITEMS]
            children = [self.child(f"[{i}]", v, path, depth) for i, v in enumerate(flat)]
            return _sha(*head, *(c.encode() for c in children))
        return _sha(*head, value.tobytes(order="C"))

    def _pandas(self, value: Any, path: str, depth: int) -> str | None:
        pd = self.pd
        if isinstance(value, pd.DataFrame):
            columns = self.child(".columns", list(value.columns), path, depth)
            index = self.note(".index", self._index(value.index))
            cols = [
                self.note(f"[{col!r}]", self._column(value.iloc[:, i], f"{path}[{col!r}]", depth))
                for i, col in enumerate(value.columns)
            ]
            return _sha(b"DataFrame", columns.encode(), index.encode(), *(c.encode() for c in cols))
        if isinstance(value, pd.Series):
            return _sha(
                b"Series",
                _text(value.name).encode(),
                self.note(".index", self._index(value.index)).encode(),
                self.note(".values", self._column(value, path + ".values", depth)).encode(),
            )
        if isinstance(value, pd.Index):
            return self._index(value)
        if isinstance(value, pd.Categorical):
            return _sha(b"Categorical", self._column(pd.Series(value), path, depth).encode())
        return None

    def _index(self, index: Any) -> str:
        pd = self.pd
        try:
            hashed = pd.util.hash_pandas_object(index).to_numpy().tobytes()
        except TypeError:
            hashed = _text(list(index)).encode()
        return _sha(
            b"Index", _text(index.dtype).encode(), _text(list(index.names)).encode(), hashed
        )

    def _column(self, series: Any, path: str, depth: int) -> str:
        pd = self.pd
        try:
            hashed = pd.util.hash_pandas_object(series, index=False).to_numpy().tobytes()
            return _sha(b"column", _text(series.dtype).encode(), hashed)
        except TypeError:  # unhashable cells (lists, dicts): compare them as values
            items = self.digest(series.tolist(), path, depth + 1)
            return _sha(b"column", _text(series.dtype).encode(), items.encode())

    # ---- identity -------------------------------------------------------------------------

    def aliases(self) -> list[list[str]]:
        groups = [sorted(set(paths)) for paths in self.seen_at.values()]
        return sorted(g for g in groups if len(g) > 1)

    def shared_memory(self) -> list[list[str]]:
        np = self.np
        if np is None:
            return []
        pairs = []
        arrays = self.arrays[:400]
        for i, (path_a, a) in enumerate(arrays):
            for path_b, b in arrays[i + 1 :]:
                if a is b or a.dtype.hasobject or b.dtype.hasobject:
                    continue
                if np.may_share_memory(a, b):
                    pairs.append(sorted([path_a, path_b]))
        return sorted(pairs)


def module_objects(namespace: dict[str, Any], names: list[str]) -> dict[str, str]:
    """Names bound to a module's own attribute of the same name (``norm`` is ``stats.norm``)."""
    found: dict[str, str] = {}
    # __main__'s namespace is the one being described: every name would "belong" to it.
    modules = [
        (n, m)
        for n, m in list(sys.modules.items())
        if m is not None and getattr(m, "__dict__", None) is not namespace and n != "__main__"
    ]
    for name in names:
        value = namespace[name]
        if isinstance(value, _ATOMIC) or left_out(value) is not None:
            continue
        owners = sorted(
            (len(mod_name), mod_name)
            for mod_name, module in modules
            if getattr(module, "__dict__", {}).get(name) is value
        )
        if owners:
            found[name] = f"{owners[0][1]}.{name}"
    return found


def settings() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:
        params = mpl.rcParams
        # dict's own lookup: RcParams' would resolve the "auto" backend as a side effect.
        out["matplotlib.rcParams"] = {k: _text(dict.__getitem__(params, k)) for k in sorted(params)}
    pd = sys.modules.get("pandas")
    if pd is not None:
        options: dict[str, str] = {}
        try:
            from pandas._config import config

            for key in sorted(config._registered_options):
                try:
                    options[key] = _text(pd.get_option(key))
                except Exception:
                    continue
        except Exception:  # private API moved: compare nothing rather than fail
            pass
        out["pandas.options"] = options
    np = sys.modules.get("numpy")
    if np is not None:
        out["numpy.printoptions"] = {k: _text(v) for k, v in sorted(np.get_printoptions().items())}
    return out


def snapshot(namespace: dict[str, Any]) -> dict[str, Any]:
    walker = Walker()
    names = sorted(
        n for n in namespace if not n.startswith("_") and n not in _EXCLUDED and n.isidentifier()
    )
    values: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name in names:
        value = namespace[name]
        kind = left_out(value)
        if kind is not None and kind != "plot":
            skipped[name] = kind
            continue
        try:
            digest = walker.digest(value, name, 0)
        except RecursionError:
            errors[name] = "too deeply nested for the probe"
            continue
        entry: dict[str, Any] = {"type": _type_name(value), "digest": digest}
        if kind == "plot":
            entry["plot"] = True
        entry["parts"] = walker.parts(value, name)
        values[name] = entry
    rng: dict[str, str] = {"random": _sha(_text(random.getstate()).encode())}
    np = sys.modules.get("numpy")
    if np is not None:
        state = np.random.get_state(legacy=False)
        rng["numpy"] = Walker().digest(state, "numpy", 0)
    return {
        "names": values,
        "skipped": skipped,
        "errors": errors,
        "aliases": walker.aliases(),
        "shared_memory": walker.shared_memory(),
        "module_objects": module_objects(namespace, list(values)),
        "rng": rng,
        "settings": settings(),
    }


def snapshot_json(namespace: dict[str, Any]) -> str:
    return json.dumps(snapshot(namespace), sort_keys=True)
