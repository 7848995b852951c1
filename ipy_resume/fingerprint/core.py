"""The traversal: :class:`Fingerprinter`, its memo, reference cycles, the budget and the rule table.

A *rule* says how to fingerprint the instances of one exact type.  It is either an *atomic*
function ``f(value) -> bytes`` for values that refer to no other object, or a pair
``(handler, memo_kind)`` for composites, where ``handler(fingerprinter, value) -> bytes``
returns a digest of the value's tag and contents and calls ``fingerprinter.digest_child(child)``
(or the public :meth:`Fingerprinter.digest`) for every object the value refers to.  A handler must
be a pure function of the value and of the digests of its children: it may be called more than
once for one object (see "Cycles" below), and must then return the same bytes for the same
children's digests.

Rules come from, in order: :func:`register` (user callbacks, nearest class in the MRO), the
exact-type tables filled with :func:`add_exact`, then the *providers* added with
:func:`add_provider`, asked in ascending ``order`` and only while the module they ``require`` is
imported, so a rule for a library that is not loaded costs nothing.  The rule found for a type
is cached.

Cycles
------
Within one top-level :meth:`Fingerprinter.digest` call every composite object is digested once,
whatever its number of paths from the top (a memo by identity), so the cost is linear in the
size of the reachable graph.  The strongly connected components of the graph (the objects on a
common reference cycle) are found on the way (Tarjan's algorithm).  An object on no cycle is
digested from its contents and its children's digests, as before this design.  A component
with a cycle is closed when its first object finishes: every member's handler is first run with
a placeholder for the members it refers to, and then again, round by round, with the previous
round's member digests in their place (colour refinement) until the members stop splitting
into more classes.  The stable colours describe the component's quotient graph exactly, so a
member's digest is that of the component's colour set plus its own colour.  It depends only on
the component's structure and contents, not on the path, the entry point, iteration order or
what was digested before, and two members (or two graphs) get equal digests exactly when their
infinite unfoldings are equal.  Components that do not settle within ``_MAX_ROUNDS`` rounds
fall back to numbering their members in discovery order: still exact, but then two copies of the
same graph may differ if their unordered containers iterate differently.  Each round costs one
more run of the members' handlers.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from .primitives import (
    EXACT_ATOMIC,
    HEAPTYPE,
    Atomic,
    digest_bytes,
    exception_reason,
    hash128,
    pack_u64,
    qualified_name,
)

Callback = Callable[["Fingerprinter", Any], "bytes | Iterable[bytes | memoryview]"]
Handler = Callable[["Fingerprinter", Any], bytes]
Rule = Atomic | tuple[Handler, int]
Provider = Callable[[type], "Rule | None"]

# Nesting depth costs two or three frames per level.  From Python 3.11 on, calls between
# Python functions use no C stack, so the recursion limit can safely be raised while digesting.
_RECURSION_LIMIT = 12_000 if sys.version_info >= (3, 11) else 0

#: Memo kinds of a composite rule: digests cached for one top-level call, or for the
#: fingerprinter's lifetime (functions, classes, modules: they do not change while a key is
#: computed, and the same ones are reached from many inputs).  ``NO_MEMO`` is accepted for
#: compatibility and treated as ``CALL_MEMO``: every composite is computed once per call.
NO_MEMO, CALL_MEMO, LIFE_MEMO = 0, 1, 2
_INF = sys.maxsize
#: The memo key of an object: its address, as ``object.__hash__`` gives it (the address
#: rotated, so unique among live objects, whatever the class defines). Not ``id()``: id
#: raises an audit event, and once any audit hook is installed (ipy_resume's record of
#: the files a cell reads is one) every id() call runs it, about 7x slower.
address = object.__hash__

# ---- budget --------------------------------------------------------------------------------

BUDGET_ENV = "IPY_RESUME_FINGERPRINT_BUDGET"
DEFAULT_MAX_OBJECTS = 5_000_000
DEFAULT_MAX_SECONDS = 20.0
# The clock is read once per this many composites: a read costs about as much as a digest.
_CHECK_EVERY = 4096
# Colour refinement rounds before a component falls back to discovery order.
_MAX_ROUNDS = 8


def read_budget(text: str | None) -> tuple[int, float]:
    """``(max_objects, max_seconds)`` from ``OBJECTS`` or ``OBJECTS,SECONDS``; defaults otherwise.

    Each part that is not a positive number is ignored, so a typo never disables the budget.

    >>> read_budget("100000,2.5")
    (100000, 2.5)
    >>> read_budget("lots")
    (5000000, 20.0)
    """
    objects, seconds = DEFAULT_MAX_OBJECTS, DEFAULT_MAX_SECONDS
    if not text:
        return objects, seconds
    head, _, tail = text.partition(",")
    with contextlib.suppress(ValueError):
        n = int(head.strip())
        if n > 0:
            objects = n
    with contextlib.suppress(ValueError):
        s = float(tail.strip()) if tail.strip() else -1.0
        if s > 0 and math.isfinite(s):
            seconds = s
    return objects, seconds


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


# ---- aliases ---------------------------------------------------------------------------------

# restored digest -> saved digest; read on every composite, written rarely (GIL-atomic dict ops)
ALIASES: dict[bytes, bytes] = {}


def register_alias(restored: bytes, saved: bytes) -> None:
    """From now on, a composite whose digest computes to *restored* gets *saved* instead.

    For a value restored from a checkpoint whose pickle round trip is not exact: registering
    the restored value's digest against the digest it had when it was saved keeps the cells
    downstream of the restore hitting, at the top level and nested in other values.  A value
    the user then changes computes to another digest and misses as usual.  The table is
    process-wide; :func:`clear_aliases` empties it.

    >>> value = {"rows": [1, 2, 3]}
    >>> saved = fingerprint({"rows": [1, 2]})
    >>> register_alias(fingerprint(value), saved)
    >>> fingerprint(value) == saved
    True
    >>> clear_aliases()
    """
    if not (isinstance(restored, bytes) and isinstance(saved, bytes)):
        raise TypeError("register_alias() needs two digests (bytes)")
    if len(restored) != 16 or len(saved) != 16:
        raise ValueError("register_alias() needs 16-byte digests")
    if restored != saved:
        ALIASES[restored] = saved


class _Deferred:
    """A restored object whose alias is decided when its digest is first taken."""

    __slots__ = ("holder", "recompute", "restored", "saved")

    def __init__(self, holder: Any, saved: bytes, recompute: Callable[[], bytes | None]) -> None:
        self.holder = holder  # a weak reference, or the object itself when it takes none
        self.saved = saved
        self.recompute = recompute
        self.restored: bytes | None = None  # the digest of the value as restored, once asked


# address of a restored object -> its alias to decide (see defer_alias); read on every
# composite while not empty, as ALIASES is
DEFERRED: dict[int, _Deferred] = {}
_DEFERRED_MAX = 1 << 16


def defer_alias(obj: object, saved: bytes, recompute: Callable[[], bytes | None]) -> None:
    """Let *obj*, just restored, get *saved* as its digest if its round trip turns out inexact.

    :func:`register_alias` needs the restored value's digest, which costs a restore as much
    as the value's unpickling, while most values round-trip exactly and the next key that
    reads them takes that digest anyway.  So the choice waits for that key: a digest of
    *obj* equal to *saved* settles it; another is compared with ``recompute()``, the digest
    of the value as restored (a fresh load of it from the checkpoint, taken once), and only
    when the two agree (the object has not changed since) is the alias registered.  A
    *recompute* that fails (None) registers nothing: the reader executes again.

    >>> value = {"rows": [1, 2, 3]}
    >>> saved = fingerprint({"rows": [1, 2]})
    >>> defer_alias(value, saved, lambda: fingerprint({"rows": [1, 2, 3]}))
    >>> fingerprint(value) == saved
    True
    >>> clear_aliases()
    """
    if not (isinstance(saved, bytes) and len(saved) == 16):
        raise ValueError("defer_alias() needs a 16-byte digest")
    if len(DEFERRED) >= _DEFERRED_MAX:
        DEFERRED.clear()  # (each only spares a miss: forgetting them is safe)
    try:
        holder: Any = weakref.ref(obj)
    except TypeError:
        holder = obj
    DEFERRED[address(obj)] = _Deferred(holder, saved, recompute)


def _settle(vid: int, obj: object, digest: bytes) -> bytes:
    """*digest* of *obj*, or the saved digest a deferred alias gives it (see defer_alias)."""
    entry = DEFERRED.get(vid)
    if entry is None:
        return digest
    holder = entry.holder
    held = holder() if isinstance(holder, weakref.ref) else holder
    if held is not obj:
        if held is None:
            DEFERRED.pop(vid, None)  # gone: its address now holds another object
        return digest
    if digest == entry.saved:
        DEFERRED.pop(vid, None)  # an exact round trip: nothing to alias
        return digest
    if entry.restored is None:
        try:
            entry.restored = entry.recompute() or b""
        except Exception:
            entry.restored = b""
    if digest != entry.restored:
        return digest  # changed since the restore (it may change back: kept)
    DEFERRED.pop(vid, None)
    register_alias(digest, entry.saved)
    return entry.saved


def clear_aliases() -> None:
    """Forget every alias registered with :func:`register_alias` or deferred.

    >>> clear_aliases()
    """
    ALIASES.clear()
    DEFERRED.clear()


# ---- the fingerprinter ------------------------------------------------------------------------

# What a member of an unfinished component stands for in its referrers' first digests.
_PENDING = hash128(b"scc-pending\0")


class Fingerprinter:
    """Fingerprints several values, sharing work between them.

    Functions, classes and modules are cached by address for the fingerprinter's lifetime
    (the cache keeps them alive), so use one instance per key computation, while the values
    do not change.  Each top-level :meth:`digest` has a budget of *max_objects* composite
    objects and *max_seconds* seconds (default: ``IPY_RESUME_FINGERPRINT_BUDGET`` as read when
    the fingerprinter is created, else 5,000,000 and 20 s); past it, :class:`Unfingerprintable`
    is raised.  Not thread-safe.

    >>> fp = Fingerprinter()
    >>> fp.digest({"a": 1}) == fp.digest({"a": 1}) == fingerprint({"a": 1})
    True
    >>> Fingerprinter(max_objects=10).digest([[i] for i in range(20)])
    Traceback (most recent call last):
    ...
    Unfingerprintable: cannot fingerprint a value of type 'list': it is too large to ...
    """

    __slots__ = (
        "_active",
        "_call_keep",
        "_colors",
        "_count",
        "_deadline",
        "_entries",
        "_index",
        "_life_keep",
        "_low",
        "_max_objects",
        "_max_seconds",
        "_next_check",
        "_objs",
        "_refining",
        "_shared",
        "_sigmas",
        "_top",
        "_top_name",
        "attached",
        "call_memo",
        "lifetime_memo",
        "marks",
        "reach_memo",
    )

    def __init__(
        self,
        *,
        max_objects: int | None = None,
        max_seconds: float | None = None,
        shared: bool = False,
    ) -> None:
        objects, seconds = read_budget(os.environ.get(BUDGET_ENV))
        self._max_objects = objects if max_objects is None else max_objects
        self._max_seconds = seconds if max_seconds is None else max_seconds
        # finished digests by address; the keep lists hold the objects so one is not reused
        self.lifetime_memo: dict[int, bytes] = {}
        self._life_keep: list[object] = []
        self.call_memo: dict[int, bytes] = {}
        self._call_keep: list[object] = []
        # Tarjan's stack: objects whose component is not finished, their rules, and their
        # position in it by id
        self._objs: list[object] = []
        self._entries: list[tuple[Handler, int]] = []
        self._index: dict[int, int] = {}
        # first-pass digests of the members of unfinished components, by position
        self._sigmas: dict[int, bytes] = {}
        # lowest position a reference reached in the subtree being computed (Tarjan's lowlink)
        self._low = _INF
        # while a component is refined: id -> its members' current colours
        self._colors: dict[int, bytes] | None = None
        self._refining = 0
        self._active = 0
        # objects a handler put aside to be digested once, after the top-level value
        self.attached: dict[int, object] = {}
        # *shared*: the memo outlives each top-level digest, so a part of several values
        # (the Axes of ``fig`` and of ``ax``) is walked once.  A top-level digest covers
        # what its parts attached, so each finished object records the objects attached
        # within its part of the graph (``reach_memo``, from the log ``marks`` of every
        # attach), and a memo hit attaches them again: each value's digest stays the one
        # a fingerprinter of its own gives.
        self._shared = shared
        self.reach_memo: dict[int, tuple[object, ...]] = {}
        self.marks: list[object] = []
        self._count = 0
        self._next_check = 0
        self._deadline = 0.0
        self._top_name = ""
        self._top: object = None  # the value of the top-level digest under way

    def digest(self, value: object) -> bytes:
        """Return the 16-byte fingerprint of *value*; raise :class:`Unfingerprintable`.

        Callbacks passed to :func:`register` call this for the parts of their value.

        >>> len(Fingerprinter().digest([1, "two", 3.0]))
        16
        """
        top = not self._active
        if top:
            quick = TOP_LEVEL_QUICK.get(type(value))
            if quick is not None:
                done = quick(value)
                if done is not None:
                    return ALIASES.get(done, done) if ALIASES else done
        limit = sys.getrecursionlimit()
        if top:
            if limit < _RECURSION_LIMIT:
                sys.setrecursionlimit(_RECURSION_LIMIT)
            self._count = 0
            self._next_check = min(_CHECK_EVERY, self._max_objects + 1)
            self._deadline = time.monotonic() + self._max_seconds
            self._top_name = qualified_name(type(value))
        self._active += 1
        try:
            if top:
                self._top = value
            result = self._digest(value)
            if top and self.attached:
                result = self._with_attached(result)
                if DEFERRED:  # (its digest with what it attached, as the save took it)
                    result = _settle(address(value), value, result)
            return result
        except Unfingerprintable:
            raise
        except RecursionError as exc:
            raise Unfingerprintable(qualified_name(type(value)), "it is nested too deeply") from exc
        except Exception as exc:
            raise Unfingerprintable(qualified_name(type(value)), exception_reason(exc)) from exc
        finally:
            self._active -= 1
            if top:
                if sys.getrecursionlimit() != limit:
                    sys.setrecursionlimit(limit)
                if not self._shared:
                    self.call_memo.clear()
                    self._call_keep.clear()
                self.attached.clear()
                self._top = None
                self.marks.clear()
                self._objs.clear()
                self._entries.clear()
                self._index.clear()
                self._sigmas.clear()
                self._low = _INF
                self._colors = None
                self._refining = 0

    def attach(self, obj: object) -> None:
        """Digest *obj* once, after the top-level value, and mix it into the result.

        For references that point back up a structure (an artist to its Axes and figure):
        following them inline would put every part of the structure on one reference
        cycle, which costs several passes; attached, each is digested once, going down.
        The top-level digest then covers the attached objects, wherever they sit.

        >>> fp = Fingerprinter()
        >>> fp.digest([1]) != fp.digest([1, fp.attach([2])])
        True
        """
        self.attached.setdefault(address(obj), obj)
        self.marks.append(obj)

    def reattach(self, reached: tuple[object, ...]) -> None:
        """Attach again what a memoised part attached when it was digested."""
        attached = self.attached
        for obj in reached:
            attached.setdefault(address(obj), obj)
        self.marks.extend(reached)

    def _record_reach(self, ids: Iterable[int], start: int) -> None:
        """Remember, for the objects *ids* just finished, what was attached within them."""
        found = self.marks[start:]
        if len(found) > 1:
            found = list({address(o): o for o in found}.values())
        reached = tuple(found)
        reach = self.reach_memo
        for vid in ids:
            reach[vid] = reached

    def _with_attached(self, result: bytes) -> bytes:
        done: dict[int, bytes] = {}
        while len(done) < len(self.attached):
            for key, obj in list(self.attached.items()):
                if key not in done:
                    done[key] = self._digest(obj)  # may attach more: the loop goes on
        final = hash128(b"attached\0" + result + b"".join(sorted(done.values())))
        return ALIASES.get(final, final) if ALIASES else final

    def _check_budget(self) -> None:
        if self._count > self._max_objects:
            self._next_check = self._count  # raise again if a callback swallows this
            raise Unfingerprintable(
                self._top_name,
                f"it is too large to fingerprint (more than {self._max_objects:,} objects; "
                f"{BUDGET_ENV} raises the limit)",
            )
        if time.monotonic() > self._deadline:
            self._next_check = self._count
            raise Unfingerprintable(
                self._top_name,
                f"it takes too long to fingerprint (more than {self._max_seconds:g} s; "
                f"{BUDGET_ENV} raises the limit)",
            )
        self._next_check = min(self._count + _CHECK_EVERY, self._max_objects + 1)

    def _digest(self, value: object) -> bytes:
        # The hot path.  One frame per nesting level on this path (plus the handler's): deep
        # structures must fit in the recursion limit.
        t = type(value)
        atomic = RESOLVED_ATOMIC.get(t)
        if atomic is not None:
            return atomic(value)
        entry = _COMPOSITE.get(t)
        if entry is None:
            entry = _HEAP_DATA.get(_weakref(t)) if t.__flags__ & HEAPTYPE else None
            if entry is None:
                resolved = _resolve(t)
                if not isinstance(resolved, tuple):
                    return resolved(value)
                entry = resolved
        vid = address(value)
        life = entry[1] == LIFE_MEMO
        hit = (self.lifetime_memo if life else self.call_memo).get(vid)
        if hit is not None:
            if self.reach_memo:
                reached = self.reach_memo.get(vid)
                if reached is not None:
                    self.reattach(reached)
            return hit
        index = self._index.get(vid)
        if index is not None:
            # On the path, or on a cycle through it: the component is not finished yet.
            colors = self._colors
            if colors is not None:
                color = colors.get(vid)
                if color is not None:
                    return color
            if index < self._low:
                self._low = index
            return _PENDING
        self._count += 1
        if self._count >= self._next_check:
            self._check_budget()
        objs = self._objs
        my = len(objs)
        self._index[vid] = my
        objs.append(value)
        self._entries.append(entry)
        outer_low = self._low
        self._low = my + 1
        marks = len(self.marks)
        try:
            result = entry[0](self, value)
            low = self._low
            if low < my:
                # On a cycle through an ancestor, which will close the component.
                self._sigmas[my] = result
                self._low = low if low < outer_low else outer_low
                return _PENDING
            self._low = outer_low
            if low == my:
                self._sigmas[my] = result
                result = self._close(my, marks)
            else:
                # On no cycle: the digest is final.  Tarjan's stack ends with this object.
                del self._index[vid]
                objs.pop()
                self._entries.pop()
                if not self._refining:
                    if DEFERRED and not (value is self._top and self.attached):
                        result = _settle(vid, value, result)
                    if ALIASES:
                        result = ALIASES.get(result, result)
                    if life:
                        self.lifetime_memo[vid] = result
                        self._life_keep.append(value)
                    else:
                        self.call_memo[vid] = result
                        self._call_keep.append(value)
                    if self._shared and len(self.marks) > marks:
                        self._record_reach((vid,), marks)
            return result
        except BaseException as exc:
            self._abandon(my, outer_low)
            if isinstance(exc, Unfingerprintable) or not isinstance(exc, Exception):
                raise
            if isinstance(exc, RecursionError):
                raise Unfingerprintable(qualified_name(t), "it is nested too deeply") from exc
            raise Unfingerprintable(qualified_name(t), exception_reason(exc)) from exc

    def _abandon(self, start: int, outer_low: int) -> None:
        """Forget the unfinished objects from position *start* on, after an error."""
        objs = self._objs
        for pos in range(start, len(objs)):
            if self._index.get(address(objs[pos])) == pos:
                del self._index[address(objs[pos])]
            self._sigmas.pop(pos, None)
        del objs[start:]
        del self._entries[start:]
        self._low = outer_low

    def _close(self, start: int, marks: int) -> bytes:
        """Finish the component whose first member sits at *start*; return that member's digest.

        *marks*: where the attach log stood when that member was entered."""
        members = self._objs[start:]
        entries = self._entries[start:]
        ids = [address(m) for m in members]
        sigmas = self._sigmas
        colors = [sigmas.pop(start + i) for i in range(len(members))]
        outer = self._colors
        table = {} if outer is None else outer
        table.update(zip(ids, colors, strict=True))
        self._colors = table
        self._refining += 1
        try:
            classes = len(set(colors))
            stable = False
            for _ in range(_MAX_ROUNDS):
                fresh = []
                for member, entry, color in zip(members, entries, colors, strict=True):
                    self._count += 1
                    if self._count >= self._next_check:
                        self._check_budget()
                    fresh.append(hash128(b"scc-round\0" + color + entry[0](self, member)))
                table.update(zip(ids, fresh, strict=True))
                colors = fresh
                count = len(set(fresh))
                if count == classes:
                    stable = True
                    break
                classes = count
            if stable:
                # The colour set describes the quotient graph: which classes exist and, for
                # each, its contents and its children's classes.
                shape = hash128(b"scc-classes\0" + b"".join(sorted(set(colors))))
                finals = [hash128(b"scc\0" + shape + color) for color in colors]
            else:
                finals = self._number_members(members, entries, ids, colors, table)
        finally:
            self._refining -= 1
            for vid in ids:
                del table[vid]
                del self._index[vid]
            self._colors = outer
            del self._objs[start:]
            del self._entries[start:]
        if not self._refining:
            life, life_keep, call, call_keep = (
                self.lifetime_memo,
                self._life_keep,
                self.call_memo,
                self._call_keep,
            )
            for i, (member, entry) in enumerate(zip(members, entries, strict=True)):
                digest = finals[i]
                if DEFERRED:
                    digest = finals[i] = _settle(ids[i], member, digest)
                if ALIASES:
                    digest = finals[i] = ALIASES.get(digest, digest)
                if entry[1] == LIFE_MEMO:
                    life[ids[i]] = digest
                    life_keep.append(member)
                else:
                    call[ids[i]] = digest
                    call_keep.append(member)
            if self._shared and len(self.marks) > marks:
                self._record_reach(ids, marks)  # (each member reaches the whole component)
        return finals[0]

    def _number_members(
        self,
        members: list[object],
        entries: list[tuple[Handler, int]],
        ids: list[int],
        colors: list[bytes],
        table: dict[int, bytes],
    ) -> list[bytes]:
        """Digests of a component that did not settle: its members numbered one by one.

        Exact (each member's contents with its references as member numbers), but the numbers
        of members whose colours tie follow the order they were found in.
        """
        order = sorted(range(len(members)), key=lambda i: (colors[i], i))
        rank = [0] * len(members)
        for r, i in enumerate(order):
            rank[i] = r
            table[ids[i]] = hash128(b"scc-member\0" + pack_u64(r))
        bodies: list[bytes] = [b""] * len(members)
        for i in order:
            self._count += 1
            if self._count >= self._next_check:
                self._check_budget()
            bodies[rank[i]] = entries[i][0](self, members[i])
        shape = hash128(b"scc-members\0" + b"".join(bodies))
        return [hash128(b"scc-numbered\0" + shape + pack_u64(rank[i])) for i in range(len(members))]

    # Helpers for handlers.  They loop instead of using comprehensions, which are extra
    # frames before Python 3.12.

    def _ordered(self, items: Iterable[Any]) -> bytes:
        """Digest of the digests of *items*, in order."""
        dg = self._digest
        buf = bytearray()
        for item in items:
            buf += dg(item)
        return hash128(buf)

    def _unordered(self, items: Iterable[Any]) -> bytes:
        """Digest of the sorted digests of *items*."""
        dg = self._digest
        digests = []
        for item in items:
            digests.append(dg(item))
        digests.sort()
        return hash128(b"".join(digests))

    def _pairs(self, items: Iterable[tuple[Any, Any]], *, ordered: bool = False) -> bytes:
        """Digest of the (key, value) digest pairs of *items*, sorted unless *ordered*."""
        dg = self._digest
        pairs = []
        for key, value in items:
            pairs.append(dg(key) + dg(value))
        if not ordered:
            pairs.sort()
        return hash128(b"".join(pairs))

    # What a rule's handler calls (the same functions, so no call costs more): the digest
    # of one child, and of a sequence, a collection and the (key, value) pairs of children.
    digest_child = _digest
    ordered = _ordered
    unordered = _unordered
    pairs = _pairs


# ---- registry and type resolution -------------------------------------------------------------

_REGISTRY: dict[type, Callback] = {}
# resolved rules, by exact type
RESOLVED_ATOMIC: dict[type, Atomic] = {}
# exact type -> a function giving the digest of a top-level value of it without the
# traversal's set-up, or None when it cannot (see containers.quick_floats)
TOP_LEVEL_QUICK: dict[type, Callable[[Any], bytes | None]] = {}
_COMPOSITE: dict[type, tuple[Handler, int]] = {}
_HEAP: weakref.WeakKeyDictionary[type, tuple[Handler, int]] = weakref.WeakKeyDictionary()
# Its dict keyed by weak references: a lookup through it stays in C (WeakKeyDictionary.get is
# Python code, a third of the time per object of a user class).
_HEAP_DATA: dict[weakref.ref[type], tuple[Handler, int]] = _HEAP.data  # type: ignore[attr-defined]
_weakref = weakref.ref
# rule sources
_EXACT: dict[type, Rule] = dict(EXACT_ATOMIC)
_PROVIDERS: list[tuple[int, str | None, Provider]] = []


def register(type_: type, fn: Callback) -> None:
    """Fingerprint instances of *type_* (and its subclasses) with *fn*.

    ``fn(fingerprinter, value)`` returns ``bytes`` or an iterable of ``bytes``/``memoryview``
    parts that identify the value; call ``fingerprinter.digest(part)`` for nested values.
    The parts are framed by :func:`digest_bytes` together with the value's qualified type
    name, so they only need to be unambiguous for that type.  The nearest registration along
    the value's MRO wins and takes precedence over every built-in rule.  *fn* may be called
    more than once for a value that sits on a reference cycle; it must return the same parts.

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


def add_exact(rules: dict[type, Rule]) -> None:
    """Add rules for exact types (not their subclasses): built-in rule modules call this.

    >>> add_exact({complex: _EXACT[complex]})
    """
    _EXACT.update(rules)
    _clear_rule_caches()


def add_provider(provider: Provider, *, order: int, requires: str | None = None) -> None:
    """Ask ``provider(type)`` for a rule when no exact rule applies, by ascending *order*.

    *requires* names a module: while it is not in ``sys.modules`` the provider is skipped, so
    rules for a library cost nothing until it is imported (its types cannot exist before).

    >>> add_provider(lambda t: None, order=999, requires="some_library_not_imported")
    """
    _PROVIDERS.append((order, requires, provider))
    _PROVIDERS.sort(key=lambda p: p[0])
    _clear_rule_caches()


def _clear_rule_caches() -> None:
    RESOLVED_ATOMIC.clear()
    _COMPOSITE.clear()
    _HEAP.clear()


def _registered(fn: Callback) -> Handler:
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
        return digest_bytes(b"registered", qualified_name(type(value)).encode(), *parts)

    return handler


def resolve_rule(t: type) -> Rule:
    """The rule for exact type *t*, found and cached now if it was not.

    >>> resolve_rule(float) is RESOLVED_ATOMIC[float]
    True
    """
    return _resolve(t)


def composite_rule(t: type) -> tuple[Handler, int] | None:
    """The resolved (handler, memo kind) of exact type *t*; None if not resolved or atomic.

    >>> _ = resolve_rule(list); composite_rule(list)[0].__name__
    '_c_list'
    """
    return _COMPOSITE.get(t)


def _resolve(t: type) -> Rule:
    """Find and cache the rule for exact type *t*."""
    result = _find_rule(t)
    if isinstance(result, tuple):
        if t.__flags__ & HEAPTYPE:
            _HEAP[t] = result
        else:
            _COMPOSITE[t] = result
    else:
        RESOLVED_ATOMIC[t] = result
    return result


def _find_rule(t: type) -> Rule:
    for klass in t.__mro__:
        fn = _REGISTRY.get(klass)
        if fn is not None:
            return (_registered(fn), CALL_MEMO)
    exact = _EXACT.get(t)
    if exact is not None:
        return exact
    modules = sys.modules
    for _, requires, provider in _PROVIDERS:
        if requires is None or requires in modules:
            rule = provider(t)
            if rule is not None:
                return rule
    raise TypeError(f"no fingerprint rule for {qualified_name(t)}")  # the fallback provider is last


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
