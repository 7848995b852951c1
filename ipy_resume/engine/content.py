"""What a run of a cell produced, and what its checkpoint holds.

After a miss executes the cell, :func:`outputs_of` decides the names to store (what it
binds, the inputs it changed in place, what its notebook functions changed) and
:func:`content_of` gathers their values, the extras (output, result, random state,
settings, files) and the manifest's info, with the fingerprints a later cell's key takes.
"""

from __future__ import annotations

import contextlib
import io
import types
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from ..fingerprint import Fingerprinter, Unfingerprintable, globals_read
from ..fingerprint.key import OnceFingerprinter
from ..runtime import settings
from ..runtime.analysis import is_bookkeeping
from ..store import codecs, pending
from ..store import late as late_digests
from ..store.journal import STAMP, stamp
from .cells import CheckpointOptions, Content, Plan, Ran
from .sharing import fingerprints_of

__all__ = ["content_of", "digests_of", "is_closed_file", "outputs_of", "reached_state", "summarize"]


def content_of(
    namespace: MutableMapping[str, Any],
    plan: Plan,
    opts: CheckpointOptions,
    ran: Ran,
    *,
    session: str,
    last_event: str | None,
    staged: bool = False,
) -> Content:
    """What the checkpoint of this run holds: values, extras and the manifest's info.

    *session* and *last_event* name the kernel and the timeline event the save's own
    event follows (its stamp, so a reader can append the event if this kernel dies first).
    With *staged* (the save goes to the background writer), the fingerprints of large
    arrays are left to the writer (``Content.late``): nothing reads them before it is done.

    >>> content_of(namespace, plan, opts, ran, session="3f2a", last_event=None)  # doctest: +SKIP
    Content(names=['model'], ...)
    """
    assert plan.analysis is not None
    result = ran.result
    # (settings and files first: the digests below then follow each other with nothing
    # but this method's bookkeeping between them)
    changed_settings = settings.changes(ran.settings_before, settings.snapshot())
    missing_files: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for path in opts.files:
        try:
            files[path] = Path(path).read_bytes()
        except OSError as exc:
            missing_files[f"file:{path}"] = exc.strerror or str(exc)
    # One fingerprinter for every digest after the run: nothing else runs between
    # them, so what one digest found of a class, function or module (and of an object
    # bound to two names) holds for the others.
    fingerprinter = OnceFingerprinter()
    names, deleted, mutated, after = outputs_of(
        namespace, plan, opts, ran.before, ran.reached, ran.starred, fingerprinter
    )
    values = {name: namespace[name] for name in names}
    extras: dict[str, Any] = {"outputs": result.record, "rng": ran.rng_state}
    if changed_settings:
        extras["settings"] = changed_settings
    if result.has_value:
        extras["result"] = result.value
        if result.shown is not None:
            extras["shown"] = result.shown
    if opts.files:
        extras["files"] = files
    late: dict[str, Callable[[object], str | None]] = {
        name: late_fingerprint for name in values if staged and _late(values[name], after, name)
    }
    digests = digests_of(
        {n: v for n, v in values.items() if n not in late} if late else values, after, fingerprinter
    )
    # What each input and output holds now: unchanged inputs as the key took them.
    current = {
        name: digest
        for name, digest in [*plan.input_digests.items(), *ran.reached.items()]
        if name in namespace and name not in plan.analysis.outputs and name not in mutated
    }
    current.update(after)
    current.update(digests)
    info: dict[str, Any] = {
        "key_parts": plan.parts,
        "inputs": sorted(plan.input_digests),
        "outputs": sorted(names),
        "output_summary": {
            "stdout_chars": len(result.record.text("stdout")),
            "stderr_chars": len(result.record.text("stderr")),
            "displays": sum(1 for kind, _ in result.record.events if kind == "display"),
            "has_result": result.has_value,
        },
        "names": {name: summarize(value) for name, value in values.items()},
        # each stored value is digested once, for both records
        "fingerprints": fingerprints_of(values, {**after, **digests}),
        "output_digests": {name: d.hex() for name, d in digests.items()},
        "mutated": sorted(mutated),
        "deleted": sorted(deleted),
        "duration": ran.duration,
        "seed": plan.seed,
        "has_result": result.has_value,
        "session": session,
        # its timeline event, so a reader can append it if this kernel dies first
        STAMP: stamp(last_event, pending.owner()),
        **({"label": opts.label} if opts.label else {}),
        "options": {
            "files": opts.files,
            "deps": opts.deps,
            "salt": opts.salt,
            "file_deps": not opts.no_file_deps,
        },
    }
    shown = settings.shown_under(
        ran.settings_before,
        printed=bool(
            result.record.events
            or (result.has_value and result.value is not None)
            or any(type(v) is str for v in values.values())
        ),
        drew=settings.draws([*values.values(), result.value]),
    )
    if shown:
        info["shown_under"] = shown
    if ran.files_read:
        info["file_deps"] = ran.files_read
    if ran.files_written:
        info["files_written"] = ran.files_written
    if ran.files_removed:
        info["files_removed"] = ran.files_removed
    return Content(names, values, extras, info, missing_files, current, fingerprinter, late)


def _late(value: Any, known: Mapping[str, bytes], name: str) -> bool:
    return (
        name not in known
        and codecs.array_blob_eligible(value)
        and value.nbytes >= late_digests.LATE_MIN
    )


def late_fingerprint(value: object) -> str | None:
    """The hex fingerprint of *value* as a later key takes it (None: it has none): what the
    store's writer records for an output left to it.

    >>> late_fingerprint(3) == Fingerprinter().digest(3).hex()
    True
    """
    try:
        return Fingerprinter().digest(value).hex()
    except Unfingerprintable:
        return None


def outputs_of(
    namespace: MutableMapping[str, Any],
    plan: Plan,
    opts: CheckpointOptions,
    before: set[str],
    reached: dict[str, bytes],
    starred: dict[str, Any] | None = None,
    fingerprinter: Fingerprinter | None = None,
) -> tuple[list[str], list[str], list[str], dict[str, bytes]]:
    """Names to store, names the cell removed, inputs it changed in place, and the
    fingerprints of those inputs after the run.

    *starred* (a cell with ``from m import *``): what each name held before the run;
    the names bound anew are stored too, since the code does not say which they are.

    *reached* are the fingerprints, before the run, of the globals the cell's notebook
    functions reach: those changed (a generator a function advanced) are stored too.

    >>> outputs_of(ns, plan, opts, before=set(), reached={})  # doctest: +SKIP
    (['model'], [], [], {})
    """
    assert plan.analysis is not None
    mutated: list[str] = []
    after: dict[str, bytes] = {}
    fingerprinter = fingerprinter or OnceFingerprinter()
    for name, digest in [*plan.input_digests.items(), *reached.items()]:
        if name in plan.analysis.outputs or name not in namespace:
            continue
        try:
            now = fingerprinter.digest(namespace[name])
        except Unfingerprintable:
            mutated.append(name)
            continue
        if now != digest:
            mutated.append(name)
            after[name] = now
    bound = set(plan.analysis.outputs) | set(mutated)
    if starred is not None:
        bound.update(
            name
            for name, value in namespace.items()
            if (name not in starred or starred[name] is not value) and not is_bookkeeping(name)
        )
    if opts.outputs is not None:
        bound = set(opts.outputs)
    # A file closed by ``with open(...) as fh`` is spent: storing it could only fail and
    # mark the checkpoint incomplete, so it is left out.
    names = sorted(
        name for name in bound if name in namespace and not is_closed_file(namespace[name])
    )
    candidates = set(plan.analysis.deleted) | (set(plan.analysis.outputs) & before)
    if starred is not None:  # (``%xdel b``, ``globals().pop("c")``: no ``del`` to read)
        candidates.update(name for name in starred if not is_bookkeeping(name))
    deleted = sorted(name for name in candidates if name not in namespace)
    return names, deleted, mutated, after


def summarize(value: Any) -> dict[str, Any]:
    """Type, shape and size of a value, for ``show`` and the timeline.

    >>> summarize([1, 2])
    {'type': 'list', 'len': 2}
    """
    summary: dict[str, Any] = {"type": type(value).__qualname__}
    module = type(value).__module__
    if module not in ("builtins", "__main__"):
        summary["type"] = f"{module.split('.')[0]}.{type(value).__qualname__}"
    # Only array-likes are asked for these: on another object the names may run anything
    # (a pandas GroupBy's ``dtype`` computes every group and fills its caches, which
    # changed its fingerprint, so each later cell reading it missed after a restart).
    if hasattr(type(value), "__array__"):
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
            summary["shape"] = list(shape)
        dtype = getattr(value, "dtype", None)
        if dtype is not None and not callable(dtype):
            summary["dtype"] = str(dtype)
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, int):
            summary["bytes"] = nbytes
    if "bytes" not in summary and isinstance(
        value, (list, tuple, dict, set, frozenset, str, bytes)
    ):
        summary["len"] = len(value)
    return summary


def reached_state(namespace: MutableMapping[str, Any], plan: Plan) -> dict[str, bytes]:
    """Fingerprints of the globals that the cell's notebook functions read, transitively.

    ``y = model(x)`` never names ``rng``, but ``model`` draws from it: ``rng`` changes.
    Functions, classes and modules themselves are followed, not fingerprinted; names the
    cell reads or binds itself are checked elsewhere.  A value that cannot be fingerprinted
    is skipped (the cell's key already covers it through the function).

    >>> reached_state(namespace, plan)  # doctest: +SKIP
    {'rng': b'...'}
    """
    assert plan.analysis is not None
    own = set(plan.input_digests) | set(plan.analysis.outputs)
    seen: set[int] = set()
    found: set[str] = set()
    todo = [namespace[n] for n in plan.input_digests if n in namespace]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        code = None
        if isinstance(obj, types.MethodType):
            todo.append(obj.__func__)
        elif isinstance(obj, types.FunctionType) and obj.__module__ == "__main__":
            code = obj.__code__
        elif isinstance(obj, type) and obj.__module__ == "__main__":
            todo.extend(v for v in vars(obj).values() if isinstance(v, types.FunctionType))
        if code is None:
            continue
        for name in globals_read(code):
            if name in own or name in found or name not in namespace:
                continue
            value = namespace[name]
            if isinstance(value, (types.FunctionType, types.MethodType, type)):
                todo.append(value)
            elif not isinstance(value, types.ModuleType):
                found.add(name)
    fingerprinter = Fingerprinter()
    digests: dict[str, bytes] = {}
    for name in sorted(found):
        with contextlib.suppress(Unfingerprintable):
            digests[name] = fingerprinter.digest(namespace[name])
    return digests


def digests_of(
    values: Mapping[str, Any],
    known: Mapping[str, bytes],
    fingerprinter: Fingerprinter | None = None,
) -> dict[str, bytes]:
    """Every stored value's fingerprint, as a later cell's key would take it: what a Run All
    plan chains through when this checkpoint would be restored.

    >>> sorted(digests_of({"x": 1}, {}))
    ['x']
    """
    fingerprinter = fingerprinter or OnceFingerprinter()
    out: dict[str, bytes] = {}
    for name, value in values.items():
        if name in known:
            out[name] = known[name]
            continue
        with contextlib.suppress(Unfingerprintable):
            out[name] = fingerprinter.digest(value)
    return out


def is_closed_file(value: Any) -> bool:
    """True for a file object that is closed (spent: it is never stored).

    >>> is_closed_file(open(__file__)) or True
    True
    """
    return isinstance(value, io.IOBase) and value.closed
