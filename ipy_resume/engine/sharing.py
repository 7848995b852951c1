"""Objects that stay shared across checkpoints, and fingerprints that survive a restore.

Two names that hold one object in the kernel must hold one object after a restore,
also when different checkpoints stored them: ``holder = {"box": box}`` in one cell,
``box`` from an earlier one; ``view = base[2:5]`` of another cell's ``base``.  The
store keeps objects shared within one checkpoint by itself (one pickle for all of a
checkpoint's values, views rebuilt over their base); across checkpoints it asks a
:class:`SharedObjects` (its ``Linker``), which remembers, for the values that
checkpoints of this process stored or restored, which checkpoint value they are.

A save then writes such an object as a *link* to that value, provided the object
has not changed since (checked by fingerprint, or for an array by the checksum of
its bytes); a restore resolves a link to the live object when it is still
unchanged, and otherwise loads it from the blobs the link names.  Limits, said once
here: only an object that was itself a *name* of a checkpoint is linked (an object
that sat inside another checkpoint's value is stored again and comes back as a
copy); an object changed since its checkpoint is stored again too.

The same registry makes fingerprints stable across a restore: a value whose pickle
round trip is not exact (a ``__setstate__`` that drops a cache, say) fingerprints
differently once restored.  The save records each pickled value's fingerprint, and
the restore tells the fingerprinter that the restored value's fingerprint stands for
the saved one (:func:`ipy_resume.fingerprint.register_alias`), so cells downstream
still hit, while a value the user then changes fingerprints as something new.
"""

from __future__ import annotations

import functools
import os
import pickle
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ipy_resume.store import location

from ..fingerprint import Fingerprinter, Unfingerprintable, defer_alias, tied_to_code
from ..store import Manifest, blobs, codecs
from ..store.manifest import BlobRef
from ..store.writing import MISSING, token

__all__ = ["SharedObjects", "fingerprints_of", "shared_objects"]


@dataclass
class _Entry:
    name: str
    ref: BlobRef
    links: dict[str, BlobRef]
    fingerprint: bytes | None  # None: an HDF5 array, checked by its blob address
    holder: Any  # a weak reference, or the object itself when it takes none
    obj_id: int
    members: set[int]  # ids of the objects its checkpoint's group held (shared set)
    generation: int = 0  # the note that made it (see SharedObjects._sweep)
    seq: int = 0  # the order entries were added in (see SharedObjects._candidate_ids)
    # its manifest while that still names placeholders for blobs whose digests the
    # writer takes (see ipy_resume.store.late): ref and links are read again once they are in
    late: Manifest | None = None

    def get(self) -> object:
        obj = self.holder() if isinstance(self.holder, weakref.ref) else self.holder
        return MISSING if obj is None or id(obj) != self.obj_id else obj


# Values whose identity means nothing (equal ones are interchangeable): never linked.
_VALUE_TYPES = (str, bytes, int, float, complex, bool, type(None), range, tuple, frozenset)


# Values whose identity means nothing and that hold nothing that has one.
_SCALAR_TYPES = (str, bytes, int, float, complex, bool, type(None), range, np.generic)

# Exact types a pickler writes without asking its reducer_override: only its memo tells
# whether it wrote one of them (see SharedObjects.watched).
_UNWATCHED = frozenset({dict, list, tuple, set, frozenset, bytearray, pickle.PickleBuffer})

_CODE_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _settled(entry: _Entry) -> bool:
    """Whether *entry*'s blobs are known: at once, or once its save's writer has taken the
    digests of its large arrays (waited for here); False when that writer failed."""
    manifest = entry.late
    if manifest is None:
        return True
    if manifest.late is not None and not manifest.late():
        return False
    entry.ref = manifest.values[entry.name]
    entry.links = {**manifest.links}
    entry.links.update((token(manifest.id, n), r) for n, r in manifest.values.items())
    entry.late = None
    return True


def _hold(obj: object) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:  # dict, list, tuple...: kept alive until the name moves on
        return obj


def fingerprints_of(
    values: Mapping[str, object], known: Mapping[str, bytes] | None = None
) -> dict[str, str]:
    """Hex fingerprints of the values the store will pickle (HDF5 arrays round-trip exactly).

    *known* holds digests computed already (of inputs the cell changed, say).

    >>> fingerprints_of({"a": [1, 2], "big": np.zeros(1 << 20)}).keys()
    dict_keys(['a'])
    """
    fp = Fingerprinter()
    out: dict[str, str] = {}
    for name, value in values.items():
        if codecs.array_blob_eligible(value) or _exact_round_trip(value):
            continue
        if known is not None and name in known:
            out[name] = known[name].hex()
            continue
        try:
            out[name] = fp.digest(value).hex()
        except Unfingerprintable:
            continue
    return out


def _exact_round_trip(value: object) -> bool:
    """pandas objects come back from a pickle exactly: no alias is needed, and digesting a
    large frame at every save would cost more than it could save.  (Arrays are digested:
    hashing is cheap next to writing them, and the digest lets a later cell link to them.)"""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series))


class SharedObjects:
    """What this process knows of the objects one store holds (the store's ``Linker``).

    >>> shared = shared_objects("/tmp/doc-store")
    >>> shared.candidates()
    {}
    """

    def __init__(self) -> None:
        self._all: dict[str, _Entry] = {}  # token -> entry (see _entries)
        self._by_name: dict[str, set[str]] = {}  # name -> tokens of its entries
        # (namespace, generation) of each sweep a note left for the next reader: it covers
        # the entries of earlier notes (see note)
        self._sweeps: list[tuple[MutableMapping[str, Any] | None, int]] = []
        self._generation = 0
        self._checked: dict[str, bool] = {}  # answers of check() during one operation
        # what each entry's value holds, walked once per operation (a save asks again for
        # every array it stores and for the group; the walk costs up to ~0.1 s a value)
        self._walked: dict[str, set[int]] = {}
        self._arrays: list[np.ndarray] | None = None  # arrays(), asked twice per save
        # Indexes of the entries, kept as they are added and dropped: a save asks holders()
        # once per array it stores and again per round, and a walk of every entry for each
        # question cost a small save more than the rest of it once a kernel held a few
        # hundred names.  Each answer still checks that the entry's object is alive.
        self._by_obj: dict[int, set[str]] = {}  # id of the entry's object -> tokens
        # id of a checkpoint group's set of held ids -> (that set, the tokens sharing it)
        self._groups: dict[int, tuple[set[int], set[str]]] = {}
        # every id some group holds (None: to be rebuilt, a group was dropped): a save asks
        # holders() about a new group's objects, which most often no earlier group holds,
        # and then the groups are not looked at one by one.  (A group's set is never
        # changed once noted, but for a restored group's walk, which adds to this too.)
        self._union: set[int] | None = set()
        # The groups of restored checkpoints, not walked yet (id of the set -> the set): what
        # their values hold is only asked by a later save, and walking them while restoring
        # cost a model's restore as much as its unpickling.  Walked, and then noted as any
        # group, when a save first asks (see _walk_restored).
        self._unwalked: dict[int, set[int]] = {}
        self._by_checkpoint: dict[str, dict[str, None]] = {}  # id -> tokens, in entry order
        self._array_tokens: dict[str, None] = {}  # entries holding an ndarray, in entry order
        # candidates(), kept as entries come and go (a save asks once; a walk of every
        # entry was a small save's largest cost once a kernel held a few hundred names):
        # id -> token of the entries whose value is held here (alive while the entry is),
        # the latest entry of an object winning; and the entries held by weak reference,
        # whose objects are looked at when asked.
        self._candidate_ids: dict[int, str] = {}
        self._weak_candidates: dict[str, _Entry] = {}
        self._seq = 0
        # Fingerprints of objects as they are now, during one operation (id -> (object,
        # digest)): the engine's of the cell's inputs and outputs, and those check() took.
        # A figure an earlier cell stored is otherwise digested again by check() and again
        # for the record of a value stored with it (tens of milliseconds each).
        self._digests: dict[int, tuple[object, bytes]] = {}
        # The engine's fingerprinter of those digests, for the other objects an operation
        # digests (an earlier figure, a part of a value): its memo holds what they share
        # with the cell's values, and nothing has run since it was filled.
        self._fingerprinter: Fingerprinter | None = None

    @property
    def _entries(self) -> dict[str, _Entry]:
        """The entries, after the sweeps that notes left for the next reader."""
        if self._sweeps:
            self._sweep()
        return self._all

    def _sweep(self) -> None:
        sweeps, self._sweeps = self._sweeps, []
        missing = MISSING
        for namespace, generation in sweeps:
            # (one pass over every entry per save: the common case, a name that still
            # holds the object this registry holds itself, is two lookups)
            if namespace is not None:
                gone = [
                    tok
                    for tok, entry in self._all.items()
                    if entry.generation < generation  # (not noted after this sweep was due)
                    and namespace.get(entry.name, missing) is not entry.holder
                    and (
                        (obj := entry.get()) is missing
                        or namespace.get(entry.name, missing) is not obj
                    )
                ]
            else:
                gone = [
                    tok
                    for tok, entry in self._all.items()
                    if entry.generation < generation and entry.get() is missing
                ]
            for tok in gone:
                self._drop(tok)

    def _drop(self, tok: str) -> None:
        self._arrays = None
        entry = self._all.pop(tok, None)
        if entry is not None:
            tokens = self._by_name.get(entry.name)
            if tokens is not None:
                tokens.discard(tok)
                if not tokens:
                    del self._by_name[entry.name]
            same = self._by_obj.get(entry.obj_id)
            if same is not None:
                same.discard(tok)
                if not same:
                    del self._by_obj[entry.obj_id]
            group = self._groups.get(id(entry.members))
            if group is not None:
                group[1].discard(tok)
                if not group[1]:
                    del self._groups[id(entry.members)]
                    self._unwalked.pop(id(entry.members), None)
                    self._union = None
            checkpoint = tok.partition("/")[0]
            tokens_of = self._by_checkpoint.get(checkpoint)
            if tokens_of is not None:
                tokens_of.pop(tok, None)
                if not tokens_of:
                    del self._by_checkpoint[checkpoint]
            self._array_tokens.pop(tok, None)
            self._weak_candidates.pop(tok, None)
            if self._candidate_ids.get(entry.obj_id) == tok:
                del self._candidate_ids[entry.obj_id]
                # another entry of the same object, the latest, stands for it now
                others = [
                    t
                    for t in self._by_obj.get(entry.obj_id, ())
                    if self._all[t].holder is entry.holder
                ]
                if others:
                    self._candidate_ids[entry.obj_id] = max(others, key=lambda t: self._all[t].seq)

    def _add(self, tok: str, entry: _Entry, value: object) -> None:
        if tok in self._all:
            self._drop(tok)
        self._seq += 1
        entry.seq = self._seq
        self._all[tok] = entry
        # Values whose identity means nothing (a tuple, a number) are never linked; they
        # are still entries, so a later cell that shares their items stores them again.
        if not isinstance(value, _VALUE_TYPES):
            if isinstance(entry.holder, weakref.ref):
                self._weak_candidates[tok] = entry
            else:
                self._candidate_ids[entry.obj_id] = tok
        self._by_name.setdefault(entry.name, set()).add(tok)
        self._by_obj.setdefault(entry.obj_id, set()).add(tok)
        if entry.members or id(entry.members) in self._unwalked:
            key = id(entry.members)
            if key not in self._groups:
                self._groups[key] = (entry.members, set())
                if self._union is not None:
                    self._union |= entry.members
            self._groups[key][1].add(tok)
        self._by_checkpoint.setdefault(tok.partition("/")[0], {})[tok] = None
        if type(value) is np.ndarray:
            self._array_tokens[tok] = None

    def _alive(self, tok: str) -> object:
        """The object of entry *tok*, or MISSING (gone, or never an entry)."""
        entry = self._all.get(tok)
        return MISSING if entry is None else entry.get()

    # ---- what checkpoints stored or restored ---------------------------------------------

    def note(
        self,
        manifest: Manifest,
        values: Mapping[str, object],
        namespace: MutableMapping[str, Any] | None = None,
        members: set[int] | None = None,
    ) -> None:
        """Remember *values*, just saved as or restored from *manifest*.

        Older entries for the same names are forgotten, and with *namespace* so are
        those whose name no longer holds their object, so nothing the user deleted is
        kept alive here.  That sweep of every entry runs before the entries are next
        read (the next save's links), not here: a hit costs what its own names cost,
        however many names the store's checkpoints hold.

        *members*: the ids of the objects the checkpoint's group holds (a save's walk of
        them); None (a restore) has them walked when a save first asks.
        """
        fingerprints = manifest.info.get("fingerprints") or {}
        # A value may sit in a group that also refers to the checkpoint's other values
        # (a view of its array, say): whoever links to it needs all of them at hand.
        needed = {**manifest.links}
        needed.update((token(manifest.id, n), r) for n, r in manifest.values.items())
        for name in values:
            for tok in list(self._by_name.get(name, ())):
                self._drop(tok)
        self._generation += 1
        if self._sweeps and self._sweeps[-1][0] is namespace:
            self._sweeps[-1] = (namespace, self._generation)  # one sweep covers both
        else:
            self._sweeps.append((namespace, self._generation))
        if len(self._all) <= 64:  # few entries: sweep now, nothing stays alive longer
            self._sweep()
        held = members if members is not None else set()
        if members is None:
            self._unwalked[id(held)] = held
        late = manifest if manifest.late is not None else None
        for name, value in values.items():
            ref = manifest.values.get(name)
            if ref is None or isinstance(value, _CODE_TYPES):
                continue  # modules, functions, classes: pickled by reference anyway
            digest = fingerprints.get(name)
            tok = token(manifest.id, name)
            entry = _Entry(
                name,
                ref,
                needed,
                bytes.fromhex(digest) if isinstance(digest, str) else None,
                _hold(value),
                id(value),
                held,
                self._generation,
                late=late,
            )
            self._add(tok, entry, value)
        if members is None and id(held) not in self._groups:
            self._unwalked.pop(id(held), None)  # (no entry of it: nothing to walk)
        self._checked.clear()
        self._walked.clear()
        self._digests.clear()
        self._fingerprinter = None
        self._arrays = None

    def restored(
        self,
        manifest: Manifest,
        values: Mapping[str, object],
        reload: Callable[[str], object],
    ) -> None:
        """Make the fingerprints of *values* (restored from *manifest*) stand for the saved ones.

        Deferred to the first digest of each (see :func:`~ipy_resume.fingerprint.defer_alias`):
        a restore digests nothing, and when that digest is not the saved one, ``reload(name)``
        (the value loaded again from *manifest*) tells whether it is the value as restored.
        Arrays and :func:`codecs.flat` values round-trip exactly and are left out.  So is a
        value tied to code (a module, what is imported from one, an instance of a helper
        module's class): its digest differs only when that code was edited, and the cells
        reading it must then execute.
        """
        saved = manifest.info.get("fingerprints") or {}
        for name, value in values.items():
            digest = saved.get(name)
            if not isinstance(digest, str) or isinstance(value, np.ndarray) or codecs.flat(value):
                continue  # arrays, and atoms and flat containers of them, round-trip exactly
            if tied_to_code(value):  # (a module whose file was edited since: not a round trip)
                continue
            try:
                digest_bytes = bytes.fromhex(digest)
                defer_alias(value, digest_bytes, functools.partial(_digest_of_reload, reload, name))
            except ValueError:
                continue

    # ---- the store's Linker protocol -----------------------------------------------------

    def candidates(self) -> dict[int, str]:
        self._entries  # noqa: B018 - (the sweep a note left, first)
        found = dict(self._candidate_ids)  # (held here: alive, and the same object)
        for tok, entry in self._weak_candidates.items():  # (in entry order: the latest wins)
            if entry.get() is not MISSING:
                found[entry.obj_id] = tok
        return found

    def watched(self) -> frozenset[int] | None:
        out: set[int] = set()
        for tok in self._entries:
            obj = self._alive(tok)
            if obj is MISSING or isinstance(obj, _SCALAR_TYPES):
                continue  # (holders never matches those through what a group reached)
            if type(obj) in _UNWATCHED:
                return None
            out.add(id(obj))
        return frozenset(out)

    def arrays(self) -> list[np.ndarray]:
        self._entries  # noqa: B018 - (its sweep may drop entries: before the memo is read)
        if self._arrays is None:
            self._arrays = [
                o for tok in self._array_tokens if type(o := self._alive(tok)) is np.ndarray
            ]
        return list(self._arrays)

    def check(self, tok: str) -> bool:
        known = self._checked.get(tok)
        if known is None:
            known = self._checked[tok] = self._unchanged(tok)
        return known

    def _unchanged(self, tok: str) -> bool:
        entry = self._entries.get(tok)
        if entry is None or not _settled(entry):
            return False
        obj = entry.get()
        if obj is MISSING:
            return False
        if entry.fingerprint is None and entry.ref.kind != "hdf5":
            return False  # no fingerprint to tell whether it changed: store it again
        if entry.fingerprint is not None:
            now = self._digest_now(obj)
            return now is not None and now == entry.fingerprint
        plan = codecs.plan_array(obj)
        return plan is not None and blobs.digest(blobs.XXH3, plan.chunks()) == entry.ref.blob

    def refs(self, tok: str) -> dict[str, BlobRef]:
        entry = self._entries[tok]
        if not _settled(entry):  # (check() said no already: nobody links to it)
            raise KeyError(f"{tok} is not saved yet")
        return {**entry.links, tok: entry.ref}

    def live(self, tok: str) -> object:
        return self._entries[tok].get() if tok in self._entries and self.check(tok) else MISSING

    def holders(self, members: set[int], reached: set[int] | None = None) -> dict[str, object]:
        reached = reached or set()
        if not members and not reached:
            return {}
        self._entries  # noqa: B018 - (the sweep a note left, first)
        if self._unwalked:
            self._walk_restored()
        matched: set[str] = set()  # entries whose value holds one of them
        for obj_id in self._by_obj.keys() & members:
            matched.update(t for t in self._by_obj[obj_id] if self._alive(t) is not MISSING)
        for obj_id in self._by_obj.keys() & reached:
            # an immutable scalar a new value also holds (a float inside a distribution's
            # parameters) is no sharing to keep: equal ones are interchangeable
            for tok in self._by_obj[obj_id]:
                obj = self._alive(tok)
                if obj is not MISSING and not isinstance(obj, _SCALAR_TYPES):
                    matched.add(tok)
        union = self._union
        if union is None:
            union = self._union = set().union(*(held for held, _ in self._groups.values()))
        for held, tokens in self._groups.values() if not union.isdisjoint(members) else ():
            if held.isdisjoint(members):  # (one set per checkpoint's group)
                continue
            for tok in tokens:
                if (
                    tok not in matched
                    and (obj := self._alive(tok)) is not MISSING
                    and self._holds(tok, self._all[tok], obj, members)
                ):
                    matched.add(tok)
        if not matched:
            return {}
        # With each, the other names of its checkpoint that share objects with it now,
        # directly or through one another: storing it again alone would part it from them
        # on a restore.  Names that share nothing with it stay where they are (a figure
        # stored with a frame it never plotted is not stored again when the frame changes).
        checkpoints = {tok.partition("/")[0] for tok in matched}
        out: dict[str, object] = {}
        for checkpoint, tokens_of in self._by_checkpoint.items():
            if checkpoint not in checkpoints:
                continue
            rows = [
                (tok, self._all[tok], obj)
                for tok in tokens_of
                if (obj := self._alive(tok)) is not MISSING
            ]
            hit = [row for row in rows if row[0] in matched]
            if not hit:
                continue
            for _tok, entry, obj in self._sharing_with(hit, rows):
                out.setdefault(entry.name, obj)
        return out

    def _walk_restored(self) -> None:
        """Fill in what the values of restored groups hold now (see ``_unwalked``).

        A group's set is a filter that :meth:`_holds` confirms against what the value holds
        when asked, so taking it now rather than when the value was restored only lets
        through what the value gained since.
        """
        unwalked, self._unwalked = self._unwalked, {}
        for key, held in unwalked.items():
            group = self._groups.get(key)
            if group is None:
                continue  # (every entry of it dropped since)
            values = [obj for tok in group[1] if (obj := self._alive(tok)) is not MISSING]
            held |= codecs.held_by(values)
            if self._union is not None:
                self._union |= held

    def _sharing_with(
        self, hit: list[tuple[str, _Entry, object]], rows: list[tuple[str, _Entry, object]]
    ) -> list[tuple[str, _Entry, object]]:
        """The rows of one checkpoint connected to those in *hit* by objects they hold now."""
        if len(hit) < len(rows):  # (a number or a string holds nothing: never connected)
            taken_now = {tok for tok, _entry, _obj in hit}
            rows = [r for r in rows if r[0] in taken_now or not isinstance(r[2], _SCALAR_TYPES)]
        if len(hit) == len(rows):
            return rows
        held = {tok: self._held(tok, obj) for tok, _entry, obj in rows}
        taken = {tok for tok, _entry, _obj in hit}
        reach: set[int] = set().union(*(held[tok] for tok in taken))
        grew = True
        while grew:  # a few names per checkpoint: rounds until nothing joins
            grew = False
            for tok, _entry, _obj in rows:
                if tok not in taken and not held[tok].isdisjoint(reach):
                    taken.add(tok)
                    reach |= held[tok]
                    grew = True
        return [row for row in rows if row[0] in taken]

    def _held(self, tok: str, obj: object) -> set[int]:
        """What *obj* (the value of entry *tok*) holds now, with itself: walked once per
        operation."""
        held = self._walked.get(tok)
        if held is None:
            held = self._walked[tok] = codecs.identities([obj])
        return held if id(obj) in held or isinstance(obj, _VALUE_TYPES) else held | {id(obj)}

    def _holds(self, tok: str, entry: _Entry, obj: object, members: set[int]) -> bool:
        """Whether *obj* (the value of entry *tok*) holds one of the objects *members* now.

        The ids and addresses recorded when it was saved may belong to objects freed since and
        reused, so a match there is checked again against what the value holds today (walked
        once per operation).
        """
        if entry.members.isdisjoint(members):
            return False
        if id(obj) in members and not isinstance(obj, _VALUE_TYPES):
            return True  # (it holds itself: a value saved again, its walk is not needed)
        return not self._held(tok, obj).isdisjoint(members)

    def digest(self, value: object) -> str | None:
        """The hex fingerprint a save records for *value* (None when it has none)."""
        if codecs.array_blob_eligible(value) or _exact_round_trip(value):
            return None  # (as fingerprints_of leaves it out)
        now = self._digest_now(value)
        return None if now is None else now.hex()

    def current(
        self,
        pairs: Iterable[tuple[object, bytes]],
        fingerprinter: Fingerprinter | None = None,
    ) -> None:
        """Take these (object, fingerprint) pairs as what the objects hold now, until the
        next :meth:`forget_checks` or :meth:`note` (the engine's digests of a cell's inputs
        and outputs after it ran: nothing runs between them and the save that asks).

        *fingerprinter*: the one that took them (its memo shared between values), for the
        other objects digested until then.

        >>> shared_objects("/tmp/doc-store").current([(obj, digest)])  # doctest: +SKIP
        """
        self._fingerprinter = fingerprinter
        for obj, digest in pairs:
            self._digests[id(obj)] = (obj, digest)

    def _digest_now(self, obj: object) -> bytes | None:
        known = self._digests.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        try:
            now = (self._fingerprinter or Fingerprinter()).digest(obj)
        except Unfingerprintable:
            return None
        self._digests[id(obj)] = (obj, now)
        return now

    def forget(self, checkpoint_id: str) -> None:
        """Stop linking to *checkpoint_id* (it failed to load: its blobs are suspect)."""
        for tok in [t for t in self._entries if t.startswith(checkpoint_id + "/")]:
            self._drop(tok)

    def forget_checks(self) -> None:
        """Start a new operation: objects may have changed since the last answers."""
        self._checked.clear()
        self._walked.clear()
        self._digests.clear()
        self._fingerprinter = None
        self._arrays = None


def _digest_of_reload(reload: Callable[[str], object], name: str) -> bytes | None:
    """The fingerprint of value *name* loaded again (None when it cannot be loaded or digested)."""
    try:
        return Fingerprinter().digest(reload(name))
    except Exception:  # (a failed load or digest only costs the alias: the reader executes)
        return None


_by_store: dict[str, SharedObjects] = {}
# an absolute spelling of a store -> its location.key: resolving walks every folder of
# the path, and a hit asks twice
_keys: dict[str, str] = {}


def shared_objects(root: str | os.PathLike[str]) -> SharedObjects:
    """The registry of the store at *root* in this process (links never cross stores).

    >>> shared_objects("/tmp/a") is shared_objects("/tmp/a")
    True
    """
    spelled = os.fspath(root)
    key = _keys.get(spelled) if isinstance(spelled, str) else None
    if key is None:
        key = location.key(root)
        if isinstance(spelled, str) and (os.path.isabs(spelled) or location.is_url(spelled)):
            if len(_keys) >= 1024:
                _keys.clear()
            _keys[spelled] = key
    found = _by_store.get(key)
    if found is None:
        found = _by_store[key] = SharedObjects()
    return found
