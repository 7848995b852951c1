"""Turning a save's values into blobs and its manifest (nothing is published here).

:class:`Writer` pickles and lays out the values of one save: top-level arrays that own
their memory as HDF5 blobs, everything else as one pickled group whose shared objects,
views and links to other checkpoints' values survive a load; :func:`build` makes the
manifest that names what was written.  Publishing the manifest is the committer's job
(:mod:`.committer`), and a save staged for the background writer keeps its blobs in
memory here until it is staged (``defer``).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePath
from typing import Any, Protocol

import numpy as np

from ipy_resume.runtime import modrefs
from ipy_resume.store import blobs, codecs, late, manifest, prehash
from ipy_resume.store.blobs import SHA256, XXH3
from ipy_resume.store.manifest import BlobRef, Manifest

LateDigest = Callable[[object], str | None]
"""A value's hex fingerprint, or None when it has none (see :func:`build`'s *late*)."""

__all__ = [
    "EXTRA_PREFIX",
    "MISSING",
    "PACK_TARGET",
    "PACK_VALUE_MAX",
    "Linker",
    "Writer",
    "build",
    "token",
]

PACK_VALUE_MAX = 1 << 20
"""Pickle streams smaller than this are packed together; larger ones get their own blob."""
PACK_TARGET = 16 << 20
"""A pack is closed (and a new one started) once it would grow past this."""
EXTRA_PREFIX = "extra:"
"""Prefix of an extra's name in ``failed`` (values are named as they are)."""

_versions_cache: dict[str, str] = {}


def versions() -> dict[str, str]:
    """The versions a manifest records: Python, numpy, cloudpickle, ipy_resume (and h5py
    and HDF5 once imported).

    >>> sorted(versions())[:2]
    ['cloudpickle', 'ipy_resume']
    """
    if not _versions_cache:
        import cloudpickle

        # (not importlib.metadata: it scans every installed distribution, ~0.1 s in the
        # first save of every kernel; the package's version module is what it publishes)
        from ipy_resume.version import __version__ as own

        _versions_cache.update(
            python=platform.python_version(),
            numpy=np.__version__,
            cloudpickle=cloudpickle.__version__,
            ipy_resume=own,
        )
    if "h5py" not in _versions_cache and "h5py" in sys.modules:
        # h5py is named once it has been imported: any checkpoint with an HDF5 blob has
        # imported it before its manifest is built, and a kernel that saves no array
        # does not pay ~20 ms to import it for a line of `show`
        h5py = sys.modules["h5py"]
        _versions_cache.update(h5py=h5py.__version__, hdf5=h5py.version.hdf5_version)
    return dict(_versions_cache)


class Linker(Protocol):
    """Objects of this process that other checkpoints stored: what keeps them shared.

    A token names one stored value, ``"<checkpoint id>/<name>"``.  ``ipy_resume.engine.sharing``
    implements this; the store only asks.
    """

    def candidates(self) -> dict[int, str]:
        """``id(obj)`` → token for every live object some checkpoint stored or restored."""
        ...

    def arrays(self) -> list[np.ndarray]:
        """The candidates that are arrays, whose views are kept as views."""
        ...

    def check(self, token: str) -> bool:
        """True while the object of *token* still equals what was stored (not mutated)."""
        ...

    def refs(self, token: str) -> dict[str, BlobRef]:
        """The blob refs needed to load *token* elsewhere: its own, plus its links."""
        ...

    def live(self, token: str) -> object:
        """The live, unchanged object of *token*, or :data:`MISSING`."""
        ...

    def digest(self, value: object) -> str | None:
        """The fingerprint to record for *value*, stored again as a holder (or None)."""
        ...

    def holders(self, members: set[int], reached: set[int] | None = None) -> dict[str, object]:
        """Names (bound now) whose stored values share one of *members*, or whose object is
        one of *reached* (ids of everything a new group holds)."""
        ...

    def watched(self) -> frozenset[int] | None:
        """The ids :meth:`holders` can match in *reached*: its live objects that are not
        numbers or strings; None when one is a plain container (a list, dict, set, tuple),
        which only a pickle's memo tells was written."""
        ...


MISSING: Any = object()
"""Returned by :meth:`Linker.live` when no live object can stand for a token."""


def token(checkpoint_id: str, name: str) -> str:
    """The name of one stored value for links: ``"<checkpoint id>/<name>"``.

    >>> token("0190ab", "box")
    '0190ab/box'
    """
    return f"{checkpoint_id}/{name}"


def _array_ref(address: str, plan: codecs.ArrayPlan) -> BlobRef:
    return BlobRef(
        "hdf5",
        address,
        XXH3,
        address,
        plan.size,
        offset=plan.offset,
        dtype=plan.dtype,
        shape=plan.shape,
        order=plan.order,
    )


class Writer:
    """Turns the values of one save into blobs, tracking refs and bytes written."""

    def __init__(
        self, store: Any, touch: bool = False, verify: bool = False, defer: bool = False
    ) -> None:
        self.blobs = store
        # defer: blobs are kept in memory (address, chunks, size) for a later commit (see
        # Store.snapshot) instead of being written now
        self.deferred: list[tuple[str, list[Any], int]] | None = [] if defer else None
        self._queued: set[str] = set()
        self.touch = touch  # refresh the mtime of deduped blobs (no lock: gc's grace rule)
        # check blobs before reusing them (the save heals a checkpoint that failed to load)
        self.verify = verify
        self._sound: set[str] = set()  # blobs checked sound during this save
        self.bytes_written = 0
        self.current: PurePath | None = None  # the file being written, for error messages
        self.refs: dict[str, BlobRef] = {}
        self._pack: list[bytes] = []
        self._pack_size = 0
        self._pending: list[tuple[dict[str, str | None], int, int, tuple[BlobRef, ...]]] = []
        self.links: dict[str, BlobRef] = {}
        self.members: set[int] = set()
        # values of earlier checkpoints stored again with this one (see Linker.holders)
        self.added: dict[str, object] = {}
        # arrays whose digests the commit takes (see ipy_resume.store.late), and the
        # fingerprints of the values asked for late that were taken now instead
        self.late: list[late.LateArray] = []
        self.late_digests: dict[str, str] = {}

    def _put(self, address: str, chunks: Iterable[Any], size: int) -> None:
        if self.deferred is not None:
            if address not in self._queued:
                self._queued.add(address)
                # present already: nothing to keep (the commit checks again, under the lock)
                if not self.blobs.exists(address, size):
                    self.deferred.append((address, list(chunks), size))
            self._sound.add(address)
            return
        self.current = self.blobs.path(address)
        self.bytes_written += self.blobs.put(
            address, chunks, size, touch=self.touch, verify=self.verify
        )
        self._sound.add(address)
        self.current = None

    def sound(self, ref: BlobRef) -> bool:
        """True when the blob of *ref* may be referenced by this save (checked if healing)."""
        if ref.blob in self._sound:
            return True
        if not self.verify:
            return self.blobs.has(ref.blob)
        if self.blobs.check(ref.blob, ref.algo, ref.checksum, ref.size) is not None:
            return False
        self._sound.add(ref.blob)
        return True

    def add(self, slot: str, value: object) -> None:
        """Store *value* under *slot*; raises codecs.EncodeError when it cannot be serialised."""
        plan = codecs.plan_array(value)
        if plan is not None:
            self.add_array(slot, plan)
            return
        self._add_stream(slot, codecs.pickle_value(value))

    def add_array(self, slot: str, plan: codecs.ArrayPlan) -> None:
        """Store an array laid out by :func:`codecs.plan_array` as an HDF5 blob."""
        address = prehash.address(plan)
        self._put(address, plan.chunks(), plan.size)
        self.refs[slot] = _array_ref(address, plan)

    def add_late_array(self, slot: str, value: np.ndarray, fingerprint: LateDigest) -> None:
        """:meth:`add_array` of a deferred save's large array whose layout, address and
        fingerprint the commit takes (see :mod:`.late`): the manifest names a placeholder
        until then, with the size as far as it is known."""
        assert self.deferred is not None
        address = late.placeholder(len(self.late))
        item = late.LateArray(address, slot[2:], value, fingerprint)
        self.late.append(item)
        self.deferred.append((address, [], item.estimate))
        self._sound.add(address)
        order = "C" if value.flags.c_contiguous else "F"
        self.refs[slot] = BlobRef(
            "hdf5",
            address,
            XXH3,
            address,
            item.estimate,
            dtype=codecs.dtype_to_json(value.dtype),
            shape=tuple(int(n) for n in value.shape),
            order=order,
        )

    def add_group(
        self,
        values: dict[str, object],
        hdf5: dict[str, object],
        linker: Linker | None,
        this: str,
    ) -> dict[str, str]:
        """Pickle *values* (slot → value) as one group; returns the slots that failed.

        Objects that are values in *hdf5* (slot → array, stored already) or that *linker*
        knows are written as links; a value that cannot be pickled is left out, named.
        """
        own: dict[int, str] = {id(v): token(this, slot[2:]) for slot, v in hdf5.items()}
        # (this checkpoint's id is new: no candidate's token is one of its own)
        local = set(own.values())
        bases: list[Any] = [v for v in [*hdf5.values(), *values.values()] if type(v) is np.ndarray]
        if linker is not None:
            links = linker.candidates()  # (a new dict: ours to change)
            links.update(own)  # an array stored here is its own link
            bases.extend(linker.arrays())
        else:
            links = own

        def check(tok: str) -> bool:
            if tok in local:
                return True
            if linker is None or not linker.check(tok):
                return False
            # A link is only as good as the blobs it names: one quarantined since (or
            # deleted) means storing the object again.
            refs = linker.refs(tok).values()
            return all(self.sound(r) for ref in refs for r in ref.walk())

        failed: dict[str, str] = {}
        todo = dict(values)
        added: dict[str, object] = {}
        walked: codecs.Walk | None = None
        if linker is not None:
            # The earlier values that share what these hold, found first by a walk of what
            # they hold (a pickle of a figure costs ten times its walk): the first pickle
            # then has them already, instead of being thrown away for a second.
            added, walked = self._holders_first(todo, hdf5, links, linker, check)
            if added:
                inline = {id(obj) for obj in added.values()}
                links = {i: tok for i, tok in links.items() if i not in inline}
        # (what a pickle must tell of the objects it wrote: the linker's, asked below)
        watch = linker.watched() if linker is not None else frozenset()
        group = self._pickle_group(todo, links, check, bases, failed, walked, watch)
        if group is None:
            return failed
        if linker is not None and added:
            # Views copied here of memory an earlier value holds: stored as views of it.  (Of
            # memory inside this group the pickle kept them views already, unless the memory
            # is much larger than they are.)
            held_roots = [
                r
                for r in group.roots
                if (names := linker.holders({codecs.data_pointer(r)}))
                and (
                    r.nbytes > codecs.ROOT_SLACK_MIN
                    or any(f"v:{n}" not in todo and f"v:{n}" not in hdf5 for n in names)
                )
            ]
            if held_roots:
                bases = bases + held_roots
                group = self._pickle_group(todo, links, check, bases, failed, watch=watch) or group
        if linker is not None:
            # Values of earlier checkpoints that hold an object these values hold (a list
            # whose items this cell changed, a pipeline whose step it fitted, a frame
            # stored with a link to the index this cell renamed) are stored again with
            # them, so both names share that object after a restore too.  Then so are the
            # values that hold one of those (a dict stored with a link to that frame): each
            # comes back as a new object, and whatever held the old one must follow.
            asked = (group.members, group.reached)
            while True:
                holding = linker.holders(*asked)
                if not holding:
                    break
                linked = {i for i, tok in links.items() if tok in group.links}
                more = {
                    f"v:{name}": obj
                    for name, obj in holding.items()
                    if f"v:{name}" not in todo and f"v:{name}" not in hdf5 and id(obj) not in linked
                }
                if not more:
                    break
                todo.update(more)
                # A view of an array inside one of those values is stored as a view of it.
                held_roots = [r for r in group.roots if linker.holders({codecs.data_pointer(r)})]
                bases = bases + held_roots
                # ...and stored here, not linked: what they share with these values must be
                # the same objects in this group.
                inline = {id(obj) for obj in more.values()}
                links = {i: tok for i, tok in links.items() if i not in inline}
                regrouped = self._pickle_group(todo, links, check, bases, failed, watch=watch)
                if regrouped is None:
                    break
                # the next round asks only about what this one added
                asked = (regrouped.members - group.members, regrouped.reached - group.reached)
                group = regrouped
                added.update((slot[2:], obj) for slot, obj in more.items() if slot in todo)
            self.added = {name: obj for name, obj in added.items() if f"v:{name}" in todo}
        # What the values hold counts the objects they link to: a later cell that changes
        # one of those changes what these values hold (see Linker.holders).
        self.members = group.members | group.linked
        if linker is not None:
            for tok in sorted(group.links - local):
                self.links.update(linker.refs(tok))
        self._add_stream("", group, members=list(todo))
        return failed

    @staticmethod
    def _holders_first(
        todo: dict[str, object],
        hdf5: dict[str, object],
        links: dict[int, str],
        linker: Linker,
        check: Any,
    ) -> tuple[dict[str, object], codecs.Walk]:
        """Earlier values that share an object with *todo* (added to it), by walks only,
        and the last walk: of all of *todo*, which the group's pickle may take for its own.

        What the walks skip is what the pickle writes as links (the insides of unchanged
        earlier values); what they miss, the rounds after the pickle still find.  Each
        round walks all of *todo* (the values it added too), so that the last is the walk
        the pickle needs: the first is most often the last, and the values added are the
        larger part of the others (a figure that plotted the frame a cell changed).
        """
        found: dict[str, object] = {}
        tops = {id(v) for v in todo.values()}
        # every link but the values themselves that changed since they were stored
        skip = set(links)
        skip.difference_update([i for i in tops & skip if not check(links[i])])
        while True:
            walked = codecs.Walk.of(list(todo.values()), set(skip))
            more = {
                f"v:{name}": obj
                for name, obj in linker.holders(walked.held).items()
                if f"v:{name}" not in todo and f"v:{name}" not in hdf5
            }
            if not more:
                return found, walked
            todo.update(more)
            found.update((slot[2:], obj) for slot, obj in more.items())
            skip -= {id(obj) for obj in more.values()}

    @staticmethod
    def _pickle_group(
        todo: dict[str, object],
        links: dict[int, str],
        check: Any,
        bases: list[Any],
        failed: dict[str, str],
        walked: codecs.Walk | None = None,
        watch: frozenset[int] | None = None,
    ) -> codecs.PickledGroup | None:
        """Pickle *todo* as one group; values that cannot be pickled move to *failed*."""
        while todo:
            try:
                return codecs.pickle_group(
                    {slot[2:]: v for slot, v in todo.items()}, links, check, bases, walked, watch
                )
            except codecs.EncodeError as together:
                # Find the culprits one by one, so every other value is still stored.
                found = False
                for slot, value in list(todo.items()):
                    try:
                        codecs.pickle_group({slot: value}, links, check, bases)
                    except codecs.EncodeError as exc:
                        failed[slot] = str(exc)
                        del todo[slot]
                        found = True
                if not found:  # each alone pickles, together they do not: store none
                    failed.update(dict.fromkeys(todo, str(together)))
                    todo.clear()
        return None

    def _add_stream(
        self, slot: str, pickled: codecs.Pickled, members: list[str] | None = None
    ) -> None:
        """Store one pickle stream; *members* are the slots of a group sharing it."""
        buffers = []
        for buf in pickled.buffers:
            address = blobs.digest(XXH3, [buf])
            self._put(address, [buf], buf.nbytes)
            buffers.append(BlobRef("raw", address, XXH3, address, buf.nbytes))
        # slot → the member name inside the stream (None: the stream is the value itself)
        slots: dict[str, str | None] = (
            {slot: None} if members is None else {m: m[2:] for m in members}
        )
        stream = pickled.stream
        n = len(stream)
        if n >= PACK_VALUE_MAX:
            address = blobs.digest(SHA256, [stream])
            self._put(address, [stream], n)
            for name, member in slots.items():
                self.refs[name] = BlobRef(
                    "pickle",
                    address,
                    SHA256,
                    address,
                    n,
                    0,
                    n,
                    buffers=tuple(buffers),
                    member=member,
                )
            return
        if self._pack and self._pack_size + n > PACK_TARGET:
            self.flush()
        self._pending.append((slots, self._pack_size, n, tuple(buffers)))
        self._pack.append(stream)
        self._pack_size += n

    def flush(self) -> None:
        """Write the current pack and resolve the refs of the values in it."""
        if not self._pack:
            return
        address = blobs.digest(SHA256, self._pack)
        self._put(address, self._pack, self._pack_size)
        for slots, offset, length, buffers in self._pending:
            for slot, member in slots.items():
                self.refs[slot] = BlobRef(
                    "pickle",
                    address,
                    SHA256,
                    address,
                    self._pack_size,
                    offset,
                    length,
                    buffers=buffers,
                    member=member,
                )
        self._pack, self._pack_size, self._pending = [], 0, []


def build(
    writer: Writer,
    ident: str,
    cell_id: str,
    key: str,
    values: Mapping[str, object],
    extras: Mapping[str, object],
    info_doc: dict[str, Any],
    complete: bool,
    linker: Linker | None,
    late_digests: Mapping[str, LateDigest] | None = None,
) -> tuple[Manifest, dict[str, str]]:
    """Turn *values* and *extras* into blobs (through *writer*) and the manifest, and
    name the values that could not be stored.

    *late_digests*: values whose fingerprints go in ``info['output_digests']`` (name ->
    function giving it), taken by the commit for a deferred save's large arrays (see
    :mod:`ipy_resume.store.late`), here for the others.

    >>> m, failed = build(Writer(store.blobs), new_id, "c", key, {"x": 1}, {}, {}, True, None)  # doctest: +SKIP
    """
    failed: dict[str, str] = {}
    late_digests = late_digests or {}
    for slot, reason in _write_values(writer, values, linker, ident, late_digests).items():
        failed[slot[2:]] = reason
    for name, fingerprint in late_digests.items():
        if name in values and not any(item.name == name for item in writer.late):
            digest = fingerprint(values[name])
            if digest is not None:
                writer.late_digests[name] = digest
    if writer.late_digests:
        recorded = info_doc.get(late.DIGESTS_INFO)
        recorded = dict(recorded) if isinstance(recorded, dict) else {}
        info_doc[late.DIGESTS_INFO] = {**recorded, **writer.late_digests}
    held = {id(v): f"v:{n}" for n, v in values.items() if not isinstance(v, _NO_ALIAS)}
    aliases = {f"x:{n}": held[id(v)] for n, v in extras.items() if id(v) in held}
    for name, value in extras.items():
        if f"x:{name}" not in aliases:
            _add_extra(writer, name, value, failed)
    writer.flush()
    # An extra that is one of the values (the cell's result is the figure it stored) names
    # that value's place in the group: the figure is pickled once, and ``_`` restored is
    # the stored figure, as it was.  Only a member of the group: its load hands out the
    # object the values got.
    for slot, target in aliases.items():
        ref = writer.refs.get(target)
        if ref is not None and ref.kind == "pickle" and ref.member is not None:
            writer.refs[slot] = ref
        else:
            _add_extra(writer, slot[2:], extras[slot[2:]], failed)
            writer.flush()
    names = [*values, *(n for n in writer.added if n not in values)]
    if writer.added and linker is not None:
        # so their fingerprints survive a restore like the cell's own values'
        recorded = dict(info_doc.get("fingerprints") or {})
        for name in writer.added:
            digest = linker.digest(writer.added[name])
            if digest is not None:
                recorded[name] = digest
        info_doc["fingerprints"] = recorded
    value_refs = {n: writer.refs[f"v:{n}"] for n in names if f"v:{n}" in writer.refs}
    extra_refs = {n: writer.refs[f"x:{n}"] for n in extras if f"x:{n}" in writer.refs}
    m = Manifest(
        id=ident,
        cell_id=cell_id,
        key=key,
        created=manifest.now_iso(),
        complete=bool(complete) and not failed,
        values=value_refs,
        extras=extra_refs,
        failed=dict(failed),
        info=info_doc,
        versions=versions(),
        bytes=0,
        bytes_written=0,
        links=dict(sorted(writer.links.items())),
        seed_base=None,
    )
    m.bytes = sum(r.size for r in m.blob_refs())
    return m, failed


# Values whose identity nothing can observe: never worth an alias (see build)
_NO_ALIAS = (type(None), bool, int, float, complex, str, bytes)


def _add_extra(writer: Writer, name: str, value: object, failed: dict[str, str]) -> None:
    try:
        writer.add(f"x:{name}", value)
    except codecs.EncodeError as exc:
        failed[EXTRA_PREFIX + name] = str(exc)


def _write_values(
    writer: Writer,
    values: Mapping[str, object],
    linker: Linker | None,
    ident: str,
    late_digests: Mapping[str, LateDigest],
) -> dict[str, str]:
    """Top-level arrays that own their memory as HDF5 blobs, the rest as one group."""
    owners: set[int] = set()
    if linker is not None:
        owners.update(codecs.data_pointer(a) for a in linker.arrays())
    for value in values.values():
        if type(value) is np.ndarray and not isinstance(value.base, np.ndarray):
            owners.add(codecs.data_pointer(value))
    # A value that is all of a memory it does not own (``a.reshape(m, n)``) stands for
    # that memory: the other views of it are stored as views of that value.  Not when
    # an array that owns it is stored too, here or by an earlier checkpoint: a view of
    # that one (``new_colors.reshape(h, w, 3)``) is stored as its view.
    whole: dict[int, int] = {}  # memory address -> id of the value standing for it
    for name in sorted(values):
        if codecs.whole_view(value := values[name]):
            assert isinstance(value, np.ndarray)  # (for the type checker)
            if (address := codecs.data_pointer(value)) not in owners:
                whole.setdefault(address, id(value))
    owners.update(whole)
    # memories that several values view and no value owns (``x, y = draws.T``): the
    # group stores each once, and those values as views of it
    owners.update(codecs.sibling_roots(values.values()))
    hdf5: dict[str, object] = {}
    group: dict[str, object] = {}
    seen: set[int] = set()
    for name in sorted(values):
        value, slot = values[name], f"v:{name}"
        shared = id(value) in seen or (
            type(value) is np.ndarray
            and isinstance(value.base, np.ndarray)
            and (address := codecs.data_pointer(codecs.array_root(value))) in owners
            and whole.get(address) != id(value)
        )
        seen.add(id(value))
        if not shared and linker is not None and codecs.array_blob_eligible(value):
            # inside an earlier value (asked only of an array that would be a blob of its
            # own: any other goes to the group either way, and the question walks values)
            shared = bool(linker.holders({id(value)}))
        if (
            not shared
            and name in late_digests
            and writer.deferred is not None
            and isinstance(value, np.ndarray)
            and value.nbytes >= late.LATE_MIN
            and codecs.simple_layout(value)
        ):
            writer.add_late_array(slot, value, late_digests[name])
            hdf5[slot] = value
            continue
        plan = None if shared else codecs.plan_array(value)
        where = modrefs.lookup(value) if plan is None else None
        if where is not None:
            group[slot] = codecs.ModuleAttribute(*where)
        elif plan is None:
            group[slot] = value
        else:
            writer.add_array(slot, plan)
            hdf5[slot] = value
    if not group:
        return {}
    return writer.add_group(group, hdf5, linker, ident)
