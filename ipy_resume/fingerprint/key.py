"""The checkpoint key of a cell: what makes it, how it is digested, how two keys differ.

A key is the digest of the cell's *parts*, text by name.  Two runs share a checkpoint
exactly when every part is equal, so the parts are also what ``--explain`` and ``%checkpoint
plan`` compare to say why a cell executes:

========================  ==============================================================
``source``                the cell's normalised source (comments and layout left out)
``input:NAME``            the fingerprint of each value the cell reads (a notebook function
                          or class by its code and what that reaches), or ``absent``
``import:MODULE``         the source of a helper module next to the notebook it imports
``deps:PATH``             each ``--deps`` file's content digest, or ``missing``
``settings:matplotlib``   rcParams, when an input draws (a figure, an Axes)
``seed`` / ``salt``       the seed the generators get, and ``--salt``
``python``                the interpreter's minor version (pickles and bytecode differ)
``format``                :data:`KEY_SCHEMA`, the layout of these parts
========================  ==============================================================

The files a cell reads are not parts: they are recorded while it runs and checked after a
key matches (:class:`ipy_resume.runtime.file_deps.FreshFiles`).

>>> from ipy_resume.runtime.analysis import analyze
>>> made = cell_key(analyze("y = x + 1"), {"x": 1}, seed=None)
>>> sorted(made.parts)
['format', 'input:x', 'python', 'salt', 'seed', 'source']
>>> made.key == digest_parts(made.parts)
True
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..runtime import file_deps, settings
from ..runtime.analysis import is_bookkeeping
from .code import import_version
from .core import Fingerprinter, Unfingerprintable
from .primitives import digest_bytes

if TYPE_CHECKING:
    from ..runtime.analysis import CellAnalysis

KEY_SCHEMA = "1"
"""The layout of the key's parts (the ``format`` part).  Changing it misses every
checkpoint of every store, and ``--explain`` says "the checkpoint format changed"."""
ABSENT = "absent"
"""An input's part when the name is not bound: a later run that binds it misses."""


class OnceFingerprinter(Fingerprinter):
    """A fingerprinter that digests an object bound to several names once.

    For digests taken while nothing else runs (a key's inputs; a run's inputs and outputs
    after it): the same object then has the same digest.  The objects are kept, so their
    addresses are not reused meanwhile.

    >>> fp, a = OnceFingerprinter(), [1]
    >>> fp.digest(a) is fp.digest(a)
    True
    """

    __slots__ = ("_tops",)

    def __init__(self) -> None:
        super().__init__(shared=True)  # (and a part of several values walked once)
        self._tops: dict[int, tuple[object, bytes]] = {}

    def digest(self, value: object) -> bytes:
        if self._active:  # a registered callback's part: the traversal's own memo
            return super().digest(value)
        key = object.__hash__(value)
        done = self._tops.get(key)
        if done is not None:
            return done[1]
        result = super().digest(value)
        self._tops[key] = (value, result)
        return result


@dataclass
class CellKey:
    """A cell's key, the parts it digests and the fingerprints of its inputs.

    *key* is None when one input cannot be fingerprinted; *problem* says which (the cell
    then always executes) and *parts* hold what was taken until then.
    """

    key: str | None
    parts: dict[str, str]
    digests: dict[str, bytes] = field(default_factory=dict)  # input name -> fingerprint
    problem: str | None = None


def _input_names(
    analysis: CellAnalysis,
    namespace: Mapping[str, Any],
    *,
    inputs: Iterable[str] = (),
    ignore: Iterable[str] = (),
    known: Collection[str] = (),
) -> set[str]:
    """The names whose values are parts of the key: those the cell reads, ``--inputs``,
    less ``--ignore``.  *known* are names bound by earlier cells a Run All plan restores.

    >>> from ipy_resume.runtime.analysis import analyze
    >>> sorted(_input_names(analyze("y = x + z"), {"x": 1}, ignore=["z"]))
    ['x']
    """
    names = analysis.reads(namespace, known) | set(inputs)
    if analysis.reads_all:  # (``exec(code)``, ``globals()``: any name may be read)
        names.update(_user_names(namespace, known))
    return names - set(ignore)


def cell_key(
    analysis: CellAnalysis,
    namespace: Mapping[str, Any],
    *,
    seed: int | None,
    salt: str = "",
    inputs: Iterable[str] = (),
    ignore: Iterable[str] = (),
    deps: Iterable[str] = (),
    known: Mapping[str, bytes] | None = None,
    fingerprinter: Fingerprinter | None = None,
) -> CellKey:
    """Take every part of the key of the cell *analysis* describes, run in *namespace*.

    *known* gives the fingerprints of inputs not in *namespace* yet (a Run All plan: what
    an earlier cell's checkpoint would restore).  *fingerprinter* defaults to a
    :class:`OnceFingerprinter`.

    >>> from ipy_resume.runtime.analysis import analyze
    >>> cell_key(analyze("y = x"), {"x": 1}, seed=3, salt="v2").parts["seed"]
    '3'
    """
    parts: dict[str, str] = {
        "source": digest_bytes(analysis.normalized.encode("utf-8")).hex(),
        "seed": "none" if seed is None else str(seed),
        "salt": salt,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "format": KEY_SCHEMA,
    }
    names = _input_names(analysis, namespace, inputs=inputs, ignore=ignore, known=known or ())
    fingerprinter = fingerprinter or OnceFingerprinter()
    digests: dict[str, bytes] = {}
    for name in sorted(names):
        if known is not None and name in known:
            digests[name] = known[name]
            parts[f"input:{name}"] = known[name].hex()
            continue
        if name not in namespace:
            parts[f"input:{name}"] = ABSENT
            continue
        try:
            digests[name] = fingerprinter.digest(namespace[name])
        except Unfingerprintable as exc:
            problem = f"input '{name}' cannot be fingerprinted: {exc}"
            return CellKey(None, parts, digests, problem)
        parts[f"input:{name}"] = digests[name].hex()
    for path in deps:
        parts[f"deps:{path}"] = file_deps.file_digest(path) or "missing"
    for module in sorted(analysis.imports):  # (a helper module's code is the cell's too)
        version = import_version(module)
        if version is not None:
            parts[f"import:{module}"] = version
    if settings.draws(namespace[n] for n in names if n in namespace):
        style = settings.rcparams_digest()
        if style is not None:
            parts["settings:matplotlib"] = style
    return CellKey(digest_parts(parts), parts, digests)


def note_imports(analysis: CellAnalysis) -> None:
    """After the cell ran: each helper module it imported keys later cells by the source it
    was loaded with now, until it is reloaded (see :func:`.code.import_version`).

    >>> from ipy_resume.runtime.analysis import analyze
    >>> note_imports(analyze("import json"))
    """
    for module in analysis.imports:
        import_version(module)


def digest_parts(parts: Mapping[str, str]) -> str:
    """The key of *parts*: the hex digest of ``name=value`` lines in name order.

    >>> digest_parts({"source": "ab", "seed": "none"}) == digest_parts({"seed": "none", "source": "ab"})
    True
    """
    return digest_bytes(*(f"{k}={v}".encode() for k, v in sorted(parts.items()))).hex()


def describe_differences(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Name each key part that differs, in words a user understands.

    >>> describe_differences({"source": "a", "input:x": "1"}, {"source": "a", "input:x": "2"})
    ["input 'x' changed"]
    """
    labels = {"source": "the cell's code", "seed": "the seed", "salt": "the salt"}
    out: list[str] = []
    for part in sorted(set(old) | set(new)):
        before, after = old.get(part), new.get(part)
        if before == after:
            continue
        kind, _, name = part.partition(":")
        if kind == "input":
            if before is None:
                out.append(f"new input '{name}'")
            elif after is None:
                out.append(f"'{name}' is no longer an input")
            elif after == ABSENT:
                out.append(f"input '{name}' is not defined now")
            else:
                out.append(f"input '{name}' changed")
        elif kind == "deps":
            out.append(f"dependency file '{name}' changed")
        elif kind == "import":
            out.append(f"the source of module '{name}', which the cell imports, changed")
        elif kind == "settings":
            out.append(f"{name}'s settings changed (rcParams: a style, a theme or an rc value)")
        elif part == "python":
            out.append(f"the Python version changed ({before} → {after})")
        elif part == "format":
            out.append("the checkpoint format changed")
        elif part == "seed":
            out.append(f"the seed changed ({before} → {after})")
        else:
            out.append(f"{labels.get(part, part)} changed")
    return out


def _user_names(namespace: Mapping[str, Any], known: Iterable[str]) -> set[str]:
    """The notebook's own names (not IPython's bookkeeping, not private ``_`` ones)."""
    return {
        name
        for name in [*namespace, *known]
        if not name.startswith("_") and not is_bookkeeping(name)
    }
