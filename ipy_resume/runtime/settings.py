"""Process-wide settings a cell changes, recorded with its checkpoint and re-applied.

A cell such as ``sns.set_theme(); pd.set_option("display.max_rows", 7)`` binds no name
worth storing, yet every later cell depends on what it did.  When such a cell is
restored instead of executed, nothing would redo it; so a checkpoint records the
*changes* the cell made to a documented set of settings, and a hit (or ``%resume`` /
``restore``, in cell order) applies them again.

Each kind of setting is one :class:`Setting` in a small registry, in the same spirit
as the fingerprint handlers: ``snapshot()`` is cheap and returns plain data,
``changes(before, after)`` says what differs, and ``apply(changes)`` redoes it.
A setting whose library is not imported costs nothing.  Built in:

* ``matplotlib.rcParams`` (styles and seaborn themes are rcParams changes);
* pandas options;
* numpy print options;
* sympy's display methods (``init_printing()``);
* warnings filters;
* ``sys.path``, ``os.environ`` and the working directory.

The IPython adapter adds the matplotlib backend (``%matplotlib``), ``%config``
changes and the display formatters' printers.  :func:`register` adds others, e.g. ``torch.set_default_dtype``.

A setting that cannot be recorded (a value that does not pickle) is left out of the
checkpoint and named; a change that cannot be applied is reported and the rest still
are.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Setting",
    "apply",
    "changed_since",
    "changes",
    "dict_diff",
    "draws",
    "merge",
    "rcparams_digest",
    "register",
    "registry",
    "shown_under",
    "snapshot",
]


@dataclass(frozen=True)
class Setting:
    """One kind of process-wide setting.

    ``snapshot`` returns the current state (plain, picklable data) or None when the
    library is not in use; ``diff(before, after)`` returns the changes, or None when
    there are none; ``apply(changes)`` makes them again. ``defaults``, when given, is
    the state the library starts in once imported: a cell that imports the library
    is compared with it, so only what the cell itself set is recorded.

    >>> s = Setting("demo", lambda: {"x": 1}, lambda b, a: None, lambda c: None)
    >>> s.name
    'demo'
    """

    name: str
    snapshot: Callable[[], Any]
    diff: Callable[[Any, Any], Any]
    apply: Callable[[Any], None]
    defaults: Callable[[], Any] | None = None


_REGISTRY: dict[str, Setting] = {}


def register(setting: Setting) -> None:
    """Add (or replace, by name) one kind of setting.

    >>> register(Setting("demo", lambda: None, lambda b, a: None, lambda c: None))
    >>> "demo" in registry()
    True
    """
    _REGISTRY[setting.name] = setting


def registry() -> dict[str, Setting]:
    """The registered settings by name."""
    return dict(_REGISTRY)


def snapshot() -> dict[str, Any]:
    """The state of every registered setting now (those in use).

    >>> "cwd" in snapshot()
    True
    """
    out: dict[str, Any] = {}
    for name, setting in _REGISTRY.items():
        try:
            state = setting.snapshot()
        except Exception:  # a broken library must not fail the cell
            continue
        if state is not None:
            out[name] = state
    return out


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What changed between two snapshots, by setting name.

    >>> b = snapshot(); os.environ["DOCTEST_FLAG"] = "1"; c = changes(b, snapshot())
    >>> c["environ"]["set"]["DOCTEST_FLAG"]
    '1'
    >>> del os.environ["DOCTEST_FLAG"]
    """
    out: dict[str, Any] = {}
    for name, state in after.items():
        setting = _REGISTRY.get(name)
        if setting is None:
            continue
        try:
            base = before.get(name)
            if base is None and setting.defaults is not None:
                base = setting.defaults()
            diff = setting.diff(base, state)
        except Exception:
            continue
        if diff is not None:
            out[name] = diff
    return out


def apply(recorded: Mapping[str, Any]) -> list[str]:
    """Re-apply recorded changes; returns one line per change that could not be applied."""
    problems: list[str] = []
    for name, diff in recorded.items():
        setting = _REGISTRY.get(name)
        if setting is None:
            problems.append(f"setting '{name}' is unknown to this ipy_resume")
            continue
        try:
            setting.apply(diff)
        except Exception as exc:
            problems.append(f"could not re-apply {name} ({type(exc).__name__}: {exc})")
    return problems


def merge(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
    """Recorded changes of two cells as one, *later* winning (for a restore of a lineage).

    >>> merge({"cwd": "/a"}, {"cwd": "/b"})
    {'cwd': '/b'}
    """
    out = dict(earlier)
    for name, diff in later.items():
        before = out.get(name)
        if isinstance(before, dict) and isinstance(diff, dict) and "set" in diff:
            both_set = {**before.get("set", {}), **diff.get("set", {})}
            unset = [k for k in before.get("unset", []) if k not in diff.get("set", {})]
            unset += [k for k in diff.get("unset", []) if k not in unset]
            both_set = {k: v for k, v in both_set.items() if k not in diff.get("unset", [])}
            out[name] = {"set": both_set, "unset": unset}
        elif isinstance(before, dict) and isinstance(diff, dict) and "added" in diff:
            gone, new = diff.get("removed", []), [item for _, item in diff.get("added", [])]
            out[name] = {
                "added": [
                    *(a for a in before.get("added", []) if a[1] not in gone),
                    *diff.get("added", []),
                ],
                "removed": [
                    *(r for r in before.get("removed", []) if r not in new),
                    *gone,
                ],
            }
        else:
            out[name] = diff
    return out


# ---- helpers ---------------------------------------------------------------------------------


_MISSING = object()


def dict_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any] | None:
    """Keys set (new or changed value) and keys removed."""
    if before is after:  # (a snapshot that found nothing changed returns the last one)
        return None
    before = before or {}
    # The same object is an unchanged value (snapshots hold the settings' own values, so
    # most are): compared by identity first, == only for the rest (320 rcParams per cell).
    missing = _MISSING
    changed = {
        k: v
        for k, v in after.items()
        if (b := before.get(k, missing)) is not v and (b is missing or not _same(b, v))
    }
    removed = [k for k in before if k not in after]
    if not changed and not removed:
        return None
    return {"set": changed, "unset": removed}


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # arrays and other values whose == is not a bool
        return a is b


def _list_diff(before: list[Any] | None, after: list[Any]) -> dict[str, Any] | None:
    """Entries added (with their position) and removed: the rest of the list (paths of
    this machine, filters the kernel installed) is not the cell's doing and stays as is."""
    before = before or []
    if before == after:
        return None
    added = [(i, item) for i, item in enumerate(after) if item not in before]
    removed = [item for item in before if item not in after]
    return {"added": added, "removed": removed}


def _list_apply(target: list[Any], diff: Mapping[str, Any]) -> None:
    for item in diff.get("removed", []):
        while item in target:
            target.remove(item)
    for index, item in diff.get("added", []):
        if item not in target:
            target.insert(min(index, len(target)), item)


# ---- matplotlib ------------------------------------------------------------------------------


# (the raw rcParams as last copied, backend included; that copy without the backend)
_mpl_last: tuple[dict[str, Any], dict[str, Any]] | None = None


def _mpl_snapshot() -> dict[str, Any] | None:
    global _mpl_last
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return None
    params = mpl.rcParams
    last = _mpl_last
    # Twice per cell, and most cells change no rcParam: the dicts' own comparison (in C,
    # by identity first, raw entries: no RcParams validation) tells that the last copy
    # still holds, and the diff of two identical snapshots is nothing.  Equal but not
    # identical values (a list set again) are no change, as dict_diff counts them; a
    # value whose == is not a bool makes a new copy (rcParams' validators give each value
    # its one type, so an equal value is the same setting).  Snapshots are never changed.
    # (dict.__eq__: RcParams' own == reads every entry through its __getitem__, which
    # resolves the backend, importing pyplot)
    try:
        if last is not None and dict.__eq__(last[0], params) is True:
            return last[1]
    except Exception:
        pass
    # dict.items skips RcParams' validation: a plain copy, cheap enough for every cell.
    raw = dict(dict.items(params))
    state = dict(raw)
    state.pop("backend", None)
    _mpl_last = (raw, state)
    return state


def _mpl_defaults() -> dict[str, Any]:
    import matplotlib as mpl

    return {k: v for k, v in dict.items(mpl.rcParamsOrig) if k != "backend"}


def _mpl_apply(diff: Mapping[str, Any]) -> None:
    import matplotlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated keys recorded by an older matplotlib
        matplotlib.rcParams.update(diff.get("set", {}))


# ---- settings what a cell showed depends on -------------------------------------------------

# The settings that change how values print or draw, with the words a message uses.
_SHOWN_BY = {
    "numpy.printoptions": "numpy's print options",
    "pandas.options": "pandas' display options",
    "matplotlib.rcParams": "matplotlib's rcParams",
}
_PANDAS_SHOWING = ("display.", "styler.")


def shown_under(before: Mapping[str, Any], *, printed: bool, drew: bool) -> dict[str, str]:
    """Digests of the settings in *before* (a :func:`snapshot` taken before a cell) that
    what the cell showed depends on: kept with its checkpoint and compared with the
    settings at the next lookup (:func:`changed_since`).

    The same code prints ``[1.12345679]`` under numpy's default precision and ``[1.12]``
    after ``np.set_printoptions(precision=2)``, and draws another picture (and returns other
    colours) after ``plt.style.use(...)``; none of that is a value the cell reads.
    *printed*: the cell printed, displayed or returned something, or stored text (which
    ``str(df)`` makes under pandas' options); *drew*: it stored matplotlib objects.

    >>> import numpy; sorted(shown_under(snapshot(), printed=True, drew=False))[0]
    'numpy.printoptions'
    """
    out: dict[str, str] = {}
    if printed:
        state = before.get("numpy.printoptions")
        if state is not None:
            out["numpy.printoptions"] = _settings_digest(state)
        state = before.get("pandas.options")
        if state is not None:
            out["pandas.options"] = _settings_digest(_pandas_showing(state))
    if printed or drew:
        state = before.get("matplotlib.rcParams")
        if state is not None:
            out["matplotlib.rcParams"] = _rcparams_text_digest(state)
    return out


def changed_since(recorded: Mapping[str, str]) -> list[str]:
    """Which of the settings :func:`shown_under` recorded differ now, in words (a library
    not imported now counts as changed: what the cell showed came from it).

    >>> changed_since(shown_under(snapshot(), printed=True, drew=False))
    []
    """
    now = {
        "numpy.printoptions": lambda: _settings_digest(_np_snapshot()),
        "pandas.options": lambda: _settings_digest(_pandas_showing(_pd_snapshot())),
        "matplotlib.rcParams": rcparams_digest,
    }
    changed = []
    for name, digest in recorded.items():
        current = now.get(name)
        if current is None:  # a setting of a newer ipy_resume: not ours to judge
            continue
        try:
            same = current() == digest
        except Exception:  # a broken library: what it shows cannot be vouched for
            same = False
        if not same:
            changed.append(_SHOWN_BY[name])
    return changed


def _pandas_showing(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {k: v for k, v in state.items() if k.startswith(_PANDAS_SHOWING)}


def _settings_digest(state: Mapping[str, Any] | None) -> str:
    """A digest of a settings state, the same in every process for the same settings."""
    import xxhash

    if state is None:
        return "absent"
    text = "\n".join(f"{k}={_stable_text(state[k])}" for k in sorted(state))
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "backslashreplace"))


def _stable_text(value: Any, depth: int = 0) -> str:
    """``repr`` of a setting's value, but for callables (``float_format``, numpy's
    ``formatter``), whose repr holds an address: their name and code instead."""
    if depth > 4:
        return "..."
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: repr(kv[0]))
        return "{" + ",".join(f"{k!r}:{_stable_text(v, depth + 1)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_stable_text(v, depth + 1) for v in value) + "]"
    if isinstance(value, type) or not callable(value):
        return repr(value)
    parts = [type(value).__qualname__, str(getattr(value, "__qualname__", ""))]
    code = getattr(value, "__code__", None)
    if code is not None:
        parts += [code.co_code.hex(), _stable_text([_code_free(c) for c in code.co_consts])]
    owner = getattr(value, "__self__", None)  # ('{:.2f}'.format: the string it formats with)
    if owner is not None and not isinstance(owner, type(sys)):
        parts.append(_stable_text(owner, depth + 1))
    for name in ("func", "args", "keywords"):  # functools.partial
        if hasattr(value, name) and not isinstance(getattr(value, name), type(sys)):
            parts.append(_stable_text(getattr(value, name), depth + 1))
    return "callable(" + "|".join(parts) + ")"


def _code_free(const: Any) -> Any:
    code = getattr(const, "co_code", None)  # (a nested function's code: its bytes)
    return const if code is None else code.hex()


# The digest of the last rcParams state digested, with that state (snapshots are shared
# while nothing changes: a notebook's cells digest the same state, once).
_rc_digested: tuple[Mapping[str, Any], str] | None = None


def _rcparams_text_digest(state: Mapping[str, Any]) -> str:
    global _rc_digested
    last = _rc_digested
    if last is not None and last[0] is state:
        return last[1]
    import xxhash

    text = "\n".join(f"{k}={state[k]!r}" for k in sorted(state))
    digest = xxhash.xxh3_128_hexdigest(text.encode("utf-8", "backslashreplace"))
    _rc_digested = (state, digest)
    return digest


def rcparams_digest() -> str | None:
    """A stable text form of matplotlib's rcParams (None when matplotlib is not imported).

    Part of the key of cells that draw: the same code draws another picture under
    another style.

    >>> rcparams_digest() is None or len(rcparams_digest()) == 32
    True
    """
    state = _mpl_snapshot()
    if state is None:
        return None
    return _rcparams_text_digest(state)


_DRAWING_MODULES = ("matplotlib", "seaborn", "mpl_toolkits")


def draws(inputs: Iterable[Any]) -> bool:
    """Whether a cell draws on matplotlib state it reads: its rcParams then join its key.

    True when the cell reads a matplotlib or seaborn module or object (``plt``, ``sns``,
    ``ax``, ``fig``) as an input.  A cell that imports pyplot itself and draws is covered by
    its source instead (the same code starts from the same rcParams only after the same
    earlier cells, which its inputs already key).

    >>> import matplotlib; draws([matplotlib])
    True
    """
    if "matplotlib" not in sys.modules:
        return False
    for value in inputs:
        module = getattr(value, "__name__", "") if isinstance(value, type(sys)) else ""
        module = module or getattr(type(value), "__module__", "") or ""
        if module.split(".")[0] in _DRAWING_MODULES:
            return True
    return False


# ---- pandas ----------------------------------------------------------------------------------


# The registered option names and their paths in pandas' option tree, split once: the
# split and a context manager per option were most of a snapshot's time (twice per cell).
_pd_paths: tuple[frozenset[str], list[tuple[str, tuple[str, ...], str]]] = (frozenset(), [])


def _pd_snapshot() -> dict[str, Any] | None:
    global _pd_paths
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    # Read from pandas' option tree rather than through get_option, which warns on every
    # deprecated option (and this runs twice per cell).
    config = pd._config.config
    registered = config._registered_options
    if registered.keys() != _pd_paths[0]:
        paths = []
        for key in registered:
            *path, leaf = key.split(".")
            paths.append((key, tuple(path), leaf))
        _pd_paths = (frozenset(registered), paths)
    root = config._global_config
    out: dict[str, Any] = {}
    for key, path, leaf in _pd_paths[1]:
        try:
            node = root
            for part in path:
                node = node[part]
            out[key] = node[leaf]
        except Exception:  # an option pandas registers without a value
            continue
    return out


def _pd_defaults() -> dict[str, Any]:
    import pandas as pd

    return {key: opt.defval for key, opt in pd._config.config._registered_options.items()}


def _pd_apply(diff: Mapping[str, Any]) -> None:
    import pandas as pd

    for key, value in diff.get("set", {}).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pd.set_option(key, value)


# ---- numpy print options ---------------------------------------------------------------------


def _np_snapshot() -> dict[str, Any] | None:
    np = sys.modules.get("numpy")
    return None if np is None else dict(np.get_printoptions())


def _np_apply(diff: Mapping[str, Any]) -> None:
    import numpy as np

    options = dict(diff.get("set", {}))
    if options.get("legacy") is False:  # get_printoptions reports False, set wants 'False'-less
        options.pop("legacy")
    np.set_printoptions(**options)


# ---- sympy's printing -------------------------------------------------------------------------

# ``init_printing()`` sets these on sympy's base class: how every expression displays.
_SYMPY_REPRS = ("_repr_png_", "_repr_svg_", "_repr_latex_")


def _sympy_snapshot() -> dict[str, Any] | None:
    module = sys.modules.get("sympy.printing.defaults")
    printable = getattr(module, "Printable", None)
    if printable is None:
        return None
    return {name: vars(printable).get(name) for name in _SYMPY_REPRS}


def _sympy_apply(diff: Mapping[str, Any]) -> None:
    from sympy.printing.defaults import Printable

    for name, value in diff.get("set", {}).items():
        if name in _SYMPY_REPRS:
            setattr(Printable, name, value)


# ---- warnings --------------------------------------------------------------------------------


def _warnings_snapshot() -> list[Any]:
    return list(warnings.filters)


def _warnings_apply(diff: Mapping[str, Any]) -> None:
    _list_apply(warnings.filters, diff)  # type: ignore[arg-type]
    warnings._filters_mutated()  # type: ignore[attr-defined]


# ---- sys.path, environment, working directory ------------------------------------------------


def _path_apply(diff: Mapping[str, Any]) -> None:
    _list_apply(sys.path, diff)


def _environ_apply(diff: Mapping[str, Any]) -> None:
    for key, value in diff.get("set", {}).items():
        os.environ[key] = value
    for key in diff.get("unset", []):
        os.environ.pop(key, None)


def _environ_snapshot() -> dict[Any, Any]:
    # On POSIX, os.environ keeps the bytes the OS gave it: copying those is a C-level dict
    # copy, where dict(os.environ) decodes every name and value (twice per miss).
    raw = getattr(os.environ, "_data", None)
    if os.name == "posix" and isinstance(raw, dict):
        return dict(raw)
    return dict(os.environ)


def _environ_diff(before: Mapping[Any, Any] | None, after: Mapping[Any, Any]) -> Any:
    """As :func:`dict_diff`, with names and values as text whatever the snapshot held."""
    diff = dict_diff(before, after)
    if diff is None:
        return None

    def text(value: Any) -> Any:
        return os.fsdecode(value) if isinstance(value, bytes) else value

    return {
        "set": {text(k): text(v) for k, v in diff["set"].items()},
        "unset": [text(k) for k in diff["unset"]],
    }


def _cwd_diff(before: str | None, after: str) -> str | None:
    return None if before == after else after


register(Setting("matplotlib.rcParams", _mpl_snapshot, dict_diff, _mpl_apply, _mpl_defaults))
register(Setting("pandas.options", _pd_snapshot, dict_diff, _pd_apply, _pd_defaults))
register(Setting("numpy.printoptions", _np_snapshot, dict_diff, _np_apply))
register(Setting("sympy.printing", _sympy_snapshot, dict_diff, _sympy_apply, dict))
register(Setting("warnings.filters", _warnings_snapshot, _list_diff, _warnings_apply))
register(Setting("sys.path", lambda: list(sys.path), _list_diff, _path_apply))
register(Setting("environ", _environ_snapshot, _environ_diff, _environ_apply))
register(Setting("cwd", os.getcwd, _cwd_diff, os.chdir))
