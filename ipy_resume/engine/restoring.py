"""The one way a checkpoint reaches a namespace: load and verify, then apply.

A hit of ``%%checkpoint``, a ``resumable`` loop picking up after a crash, and
``restore``/``%resume`` (names gathered from several checkpoints, :func:`restore`) all
come through here, so each of them keeps shared objects shared, re-registers the restored values'
fingerprints and restores RNG state the same way.  Loading touches nothing; only
:func:`apply` changes the namespace, after everything has been verified.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime import settings
from ..runtime.units import format_timestamp
from ..store import Manifest, Store
from ..store.fsio import atomic_write
from . import rng
from .queries import RestorePlan, Timeline
from .sharing import shared_objects

__all__ = ["Loaded", "Restored", "apply", "load", "restore"]


@dataclass
class Loaded:
    """Verified values (by name) and the extras of the target checkpoint."""

    values: dict[str, object]
    extras: dict[str, object]
    sources: dict[str, Manifest] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # settings that could not be re-applied
    how: dict[str, str] = field(default_factory=dict)  # name -> Store.restore_paths' words

    def how_text(self) -> str:
        """The restore's journal detail: which values were mapped and which read.

        >>> Loaded({}, {}, how={"a": "mapped", "b": "read"}).how_text()
        'mapped: a; read: b'
        """
        by_path: dict[str, list[str]] = {}
        for name, path in self.how.items():
            by_path.setdefault(path, []).append(name)
        parts = []
        for path in ("mapped", "buffers mapped", "read"):
            names = sorted(by_path.get(path, ()))
            if names:
                shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
                parts.append(f"{path}: {shown}")
        return "; ".join(parts)

    @property
    def files(self) -> dict[str, bytes]:
        files = self.extras.get("files")
        return dict(files) if isinstance(files, dict) else {}


def load(
    store: Store,
    target: Manifest,
    sources: Mapping[str, Manifest] | None = None,
    chain: list[Manifest] | None = None,
) -> Loaded:
    """Load *target*'s values (or each name of *sources* from its manifest) and its extras.

    With *chain* (the checkpoints that built the state, oldest first), the settings
    each of them changed are gathered in that order, to be applied as of the target.

    The settings the checkpoints changed are re-applied first (their modules may need
    them to unpickle); everything else is only loaded.  Raises the store's errors
    (``StoreError``) when anything fails verification, with the settings put back and
    the namespace untouched.

    >>> loaded = load(store, store.find("train", key))  # doctest: +SKIP
    """
    sources = dict(sources) if sources is not None else dict.fromkeys(target.values, target)
    shared = shared_objects(store.location)
    shared.forget_checks()
    cache: dict[Any, Any] = {}  # shared by every load below: one object per stored value
    by_manifest: dict[str, list[str]] = {}
    manifests: dict[str, Manifest] = {}
    for name, manifest in sources.items():
        by_manifest.setdefault(manifest.id, []).append(name)
        manifests[manifest.id] = manifest
    # Settings first: a cell that extended sys.path (or changed the working directory)
    # may have stored objects whose modules are only importable after that.
    recorded: dict[str, Any] = {}
    for step in chain or [target]:
        if "settings" in step.extras:
            found = store.load_extras(step, cache, ["settings"]).get("settings")
            if isinstance(found, dict):
                recorded = settings.merge(recorded, found)
    before = settings.snapshot() if recorded else {}
    problems = settings.apply(recorded) if recorded else []
    try:
        values: dict[str, object] = {}
        for manifest_id, names in by_manifest.items():
            values.update(store.load_values(manifests[manifest_id], names, cache, shared))
        # the RNG state and the recorded output are only read (restored, replayed)
        extras = store.load_extras(target, cache, reuse=("rng", "outputs"))
    except BaseException:
        if recorded:  # nothing of a failed restore stays behind
            settings.apply(settings.changes(settings.snapshot(), before))
        raise
    extras["settings"] = recorded
    how: dict[str, str] = {}
    for manifest_id, names in by_manifest.items():
        how.update(store.paths_taken(manifests[manifest_id], cache, names))
    return Loaded(values, extras, sources, problems, how)


def apply(
    namespace: MutableMapping[str, Any],
    store: Store,
    loaded: Loaded,
    delete: list[str] | tuple[str, ...] = (),
    files: bool = False,
) -> list[str]:
    """Bind the loaded values, remove *delete*, set the RNG state (settings: see :func:`load`).

    With *files*, they are written first; that can fail (``OSError``) before the
    namespace is touched.  Returns one line per setting that could not be re-applied.
    """
    if files:
        for path, content in loaded.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(Path(path)) as fh:
                fh.write(content)
    namespace.update(loaded.values)
    for name in delete:
        namespace.pop(name, None)
    recorded = loaded.extras.get("settings")
    if recorded:
        # Again, after unpickling: importing a library while loading (pyplot with the inline
        # backend, say) may have reset what the cell had changed after its own import.
        settings.apply(recorded)  # type: ignore[arg-type]
    rng_state = loaded.extras.get("rng")
    if isinstance(rng_state, dict):
        rng.restore(rng_state)
    shared = shared_objects(store.location)
    by_manifest: dict[str, tuple[Manifest, dict[str, object]]] = {}
    for name, manifest in loaded.sources.items():
        by_manifest.setdefault(manifest.id, (manifest, {}))[1][name] = loaded.values[name]
    for manifest, values in by_manifest.values():
        shared.restored(manifest, values, functools.partial(_reload, store, manifest))
        shared.note(manifest, values, namespace)  # (what they hold: walked when a save asks)
        _remember_fingerprints(manifest, values)
    return loaded.problems


def _reload(store: Store, manifest: Manifest, name: str) -> object:
    """Value *name* of *manifest* loaded afresh, links and all (for a deferred alias)."""
    return store.load_values(manifest, [name])[name]


def _remember_fingerprints(manifest: Manifest, values: Mapping[str, object]) -> None:
    """Let the fingerprints *manifest* recorded stand for its restored, mapped arrays.

    The next cell that reads one would otherwise hash it in full for its key (W6's
    512 MiB inputs, once each after a restart), although its blob was just verified
    against this checkpoint's checksum: while no page of the map is written, the bytes
    are the ones the recorded fingerprint was computed over (:func:`pages.remember`).
    """
    recorded = manifest.info.get("output_digests")
    if not isinstance(recorded, dict):
        return
    for name, value in values.items():
        digest = recorded.get(name)
        if type(value).__name__ != "ndarray" or not isinstance(digest, str):
            continue
        from ..fingerprint.numpy_rules import remember

        with contextlib.suppress(ValueError):
            remember(value, bytes.fromhex(digest))


@dataclass
class Restored:
    """What :func:`restore` did: the plan it followed, the names it bound and removed."""

    plan: RestorePlan
    values: dict[str, object]
    removed: list[str]
    problems: list[str]

    def report(self, store: Store) -> dict[str, Any]:
        """The JSON-ready answer of a restore, with a one-line ``message`` for the user."""
        target = self.plan.target
        message = (
            f"restored {len(self.values)} name(s) as of checkpoint {store.short_id(target.id)} "
            f"('{target.cell_id}', {format_timestamp(target.created)} UTC): "
            f"{', '.join(sorted(self.values)) or 'none'}"
        )
        if self.removed:
            message += f"; removed {', '.join(self.removed)}"
        if self.problems:
            message += "; " + "; ".join(self.problems)
        return {
            "checkpoint_id": target.id,
            "cell_id": target.cell_id,
            "event_id": self.plan.event.event_id if self.plan.event else None,
            "created": target.created,
            "restored": sorted(self.values),
            "removed": self.removed,
            "message": message,
        }


def restore(namespace: MutableMapping[str, Any], store: Store, target: str) -> Restored:
    """Rebuild the state as of checkpoint *target* (id, unique prefix, CELL_ID or event id).

    Names recorded up to it take their values at that point, names first created by
    checkpointed cells after it are removed, other names are untouched, and the RNG state
    is set.  Every value is loaded and verified before the namespace changes.  Nothing is
    added to the timeline: :meth:`ipy_resume.engine.core.Engine.restore` does that.

    >>> restore(get_ipython().user_ns, store, "train").report(store)["restored"]  # doctest: +SKIP
    ['model', 'history']
    """
    plan = Timeline.of(store).plan_restore(target, namespace.keys())
    loaded = load(store, plan.target, plan.sources, plan.chain)
    removed = plan.remove + plan.deleted
    problems = apply(namespace, store, loaded, removed)
    return Restored(plan, loaded.values, removed, problems)
