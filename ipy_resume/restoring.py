"""The one way a checkpoint reaches a namespace: load and verify, then apply.

A hit of ``%%checkpoint``, a ``resumable`` loop picking up after a crash, and
``restore``/``%resume`` (names gathered from several checkpoints) all come through
here, so each of them keeps shared objects shared, re-registers the restored values'
fingerprints and restores RNG state the same way.  Loading touches nothing; only
:func:`apply` changes the namespace, after everything has been verified.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import rng
from .sharing import shared_objects
from .store import Manifest, Store
from .store.fsio import atomic_write

__all__ = ["Loaded", "apply", "load"]


@dataclass
class Loaded:
    """Verified values (by name) and the extras of the target checkpoint."""

    values: dict[str, object]
    extras: dict[str, object]
    sources: dict[str, Manifest] = field(default_factory=dict)

    @property
    def files(self) -> dict[str, bytes]:
        files = self.extras.get("files")
        return dict(files) if isinstance(files, dict) else {}


def load(store: Store, target: Manifest, sources: Mapping[str, Manifest] | None = None) -> Loaded:
    """Load *target*'s values (or each name of *sources* from its manifest) and its extras.

    Raises the store's errors (``StoreError``) when anything fails verification; the
    namespace is not touched.

    >>> loaded = load(store, store.find("train", key))  # doctest: +SKIP
    """
    sources = dict(sources) if sources is not None else dict.fromkeys(target.values, target)
    shared = shared_objects(store.root)
    shared.forget_checks()
    cache: dict[Any, Any] = {}  # shared by every load below: one object per stored value
    by_manifest: dict[str, list[str]] = {}
    manifests: dict[str, Manifest] = {}
    for name, manifest in sources.items():
        by_manifest.setdefault(manifest.id, []).append(name)
        manifests[manifest.id] = manifest
    values: dict[str, object] = {}
    for manifest_id, names in by_manifest.items():
        values.update(store.load_values(manifests[manifest_id], names, cache, shared))
    extras = store.load_extras(target, cache)
    return Loaded(values, extras, sources)


def apply(
    namespace: MutableMapping[str, Any],
    store: Store,
    loaded: Loaded,
    delete: list[str] | tuple[str, ...] = (),
    files: bool = False,
) -> None:
    """Bind the loaded values, remove *delete*, set the RNG state; with *files*, write them first.

    Writing files can fail (``OSError``) before the namespace is touched.
    """
    if files:
        for path, content in loaded.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(Path(path)) as fh:
                fh.write(content)
    namespace.update(loaded.values)
    for name in delete:
        namespace.pop(name, None)
    rng_state = loaded.extras.get("rng")
    if isinstance(rng_state, dict):
        rng.restore(rng_state)
    shared = shared_objects(store.root)
    by_manifest: dict[str, tuple[Manifest, dict[str, object]]] = {}
    for name, manifest in loaded.sources.items():
        by_manifest.setdefault(manifest.id, (manifest, {}))[1][name] = loaded.values[name]
    for manifest, values in by_manifest.values():
        shared.restored(manifest, values)
        shared.note(manifest, values, namespace)
