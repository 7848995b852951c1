"""Library objects without value semantics: explicit rules instead of ``__reduce_ex__``.

Handles on something outside the value
    Open files (``io`` streams other than ``BytesIO``/``StringIO``), sockets, sqlite3
    connections and cursors, locks, conditions, semaphores, events, barriers and threads raise
    :class:`Unfingerprintable` with a sentence saying what they are: their state lives in the
    operating system, a database or another thread, so no digest of the Python object can say
    whether a later cell would see the same thing.  A cell that reads one always executes.

``itertools.count``
    By its ``repr`` (start and step), which pickling will not offer from Python 3.14 on.

matplotlib (consulted only while matplotlib is imported)
    A figure, Axes, artist, transform, tick locator or formatter is its type plus its instance
    ``__dict__`` minus the attributes in ``_MPL_SKIP``: what drawing the figure changes or
    creates, and back-pointers to things that are not part of the value.  Everything else,
    including the data of lines, patches and collections, limits, labels, titles, colours and
    sizes, and the references between artists, Axes and figure, is digested, so the digest of
    an input holding one artist covers the figure it is in.  References *up* (an artist's
    ``_axes`` and ``_parent_figure``, an axis' or spine's ``axes``, a legend's ``parent``) are
    digested once per input, after it (``Fingerprinter.attach``), rather than inline: inline
    they make a whole figure one reference cycle, which costs several passes.  A method bound
    to the object itself (a ``MarkerStyle``'s ``_marker_function``) counts as its function,
    for the same reason.  ``MarkerStyle`` and ``Path`` are digested by their ``__dict__``
    too.

    The cost is what a figure of many artists is made of: ten or so small objects per
    artist (the artist, its clip box and that box's transforms, its marker), each with up to
    60 attributes.  So an object's attributes whose values are leaves (exact ``str``, ``int``,
    ``float``, ``bool``, ``None``, and tuples and lists of them) go into one ``marshal``
    buffer (format 2, which has no back-references: the same bytes for equal values in every
    process), sorted by name, after a digest of their names; the other attributes are
    (name digest, value digest) pairs, sorted.  Small C-contiguous arrays of plain values
    (a bounding box's points, a transform's matrix) are hashed inline, to the digest their
    own rule gives.  The names and kinds of the attributes of the last object of each class
    are kept (a *layout*): the next object of the class is read with C getters and checked
    in bulk, and read attribute by attribute whenever it does not fit.  The digest does not
    depend on which of the two read it.  Measured with the Agg backend, ``canvas.draw()``
    changes or adds (and the digest therefore leaves out):

    * every artist: ``_stale``, ``stale_callback`` (the parent's method), ``_remove_method``;
      ``Text._renderer``;
    * ``Line2D``: the cached ``_x``, ``_y``, ``_xy``, ``_path``, ``_transformed_path``,
      ``_invalidx``, ``_invalidy``, ``_subslice``, ``_x_filled``, ``ind_offset`` (the data is
      ``_xorig``/``_yorig``);
    * axis ticks: ``Axis.majorTicks``/``minorTicks`` (made from the locator and formatter,
      which are digested), ``XAxis._tick_position`` while it is the default;
    * positions matplotlib lays out itself: a title's ``_y`` while the Axes places titles,
      an axis label's ``_x``/``_y`` while the axis places it, the offset text's position and
      text (derived from the formatter);
    * the path of a straight spine (computed from the view limits);
    * formatter state set from the ticks on each draw: ``locs``, ``_locs``, ``_format``,
      ``format``, ``offset``, ``orderOfMagnitude``, ``_sublabels``;
    * transforms and bounding boxes: ``_parents`` (keyed by ``id()`` of the parent, so
      process-specific), ``_invalid``, ``_inverted``, ``_shorthand_name``, ``_affine``, and
      the cached ``_mtx`` of every transform that is not an ``Affine2D`` (whose matrix is its
      value), the cached points of ``TransformedBbox``/``LockableBbox`` and the cached paths
      of ``TransformedPath``;
    * collections: the colours, transforms and flags derived on each draw from the original
      colours, sizes and data (``_facecolors``, ``_edgecolors``, ``_mapped_colors``,
      ``_transforms``, ``_face_is_mapped``, ``_edge_is_mapped``); a colormap's lookup table
      (``_lut``, ``_isinit``), filled on first use;
    * a contour set's ``_contour_generator``, the C object that computed its lines (unused
      once they are made; matplotlib's own pickling drops it too, and it cannot be pickled);
    * ``CallbackRegistry`` objects (connected callbacks, counters) count as their type only;
      a renderer too; a canvas as its type and its figure;
    * ``Figure.canvas``, ``number`` (pyplot's counter, which grows each time a cell makes a
      figure) and the ids of its pick callbacks; ``_dpi`` is read as ``_original_dpi`` when a
      screen's pixel ratio changed it, as pickling does.

    Pending autoscaling is applied first, as drawing or ``get_xlim()`` would
    (``Axes._unstale_viewLim``, and ``autoscale_None`` for colour-mapped artists), so the
    limits are the same before and after a draw; legends and annotations count without their
    layout (positions, frame geometry, arrow end points, offset transforms).

ipywidgets (while imported)
    A widget is its type plus its synchronised traits (``value``, ``description``, layout and
    style widgets, children...) except ``_view_count``; its comm, model id and callbacks are
    not part of the value.
"""

from __future__ import annotations

import io
import itertools
import marshal
import operator
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from .core import (
    ALIASES,
    CALL_MEMO,
    Fingerprinter,
    Handler,
    Rule,
    Unfingerprintable,
    add_provider,
    address,
)
from .numpy_rules import small_array_digest as small_array
from .primitives import hash128, qualified_name

# ---- handles on something outside the value ------------------------------------------------


def _refuse(what: str) -> Handler:
    def handler(fp: Fingerprinter, value: Any) -> bytes:
        raise Unfingerprintable(qualified_name(type(value)), what)

    return handler


_FILE = _refuse(
    "it is an open file, whose contents live on disk; read what the cell needs into a "
    "variable, or leave the name out of the key with --ignore"
)
_SOCKET = _refuse("it is a network socket, a connection to another program, not a value")
_DATABASE = _refuse(
    "it is a database connection: the data lives in the database, not in the connection"
)
_LOCK = _refuse("it is a lock or another synchronisation primitive, which has no value")
_THREAD = _refuse("it is a thread, a running computation rather than a value")


def _a_count(v: itertools.count) -> bytes:
    return hash128(b"itertools.count\0" + repr(v).encode())


def _lock_types() -> tuple[type, ...]:
    found: list[type] = [type(threading.Lock()), type(threading.RLock())]
    for name in ("Condition", "Semaphore", "BoundedSemaphore", "Event", "Barrier", "_RLock"):
        cls = getattr(threading, name, None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


_LOCKS = _lock_types()
_IN_MEMORY_STREAMS = (io.BytesIO, io.StringIO)


def _stdlib_rule(t: type) -> Rule | None:
    if t is itertools.count:
        return _a_count
    if issubclass(t, io.IOBase) and not issubclass(t, _IN_MEMORY_STREAMS):
        return (_FILE, CALL_MEMO)
    if issubclass(t, _LOCKS):
        return (_LOCK, CALL_MEMO)
    if issubclass(t, threading.Thread):
        return (_THREAD, CALL_MEMO)
    socket = sys.modules.get("socket")
    if socket is not None and issubclass(t, socket.socket):
        return (_SOCKET, CALL_MEMO)
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and issubclass(t, (sqlite3.Connection, sqlite3.Cursor)):
        return (_DATABASE, CALL_MEMO)
    return None


# ---- matplotlib -------------------------------------------------------------------------------

# Attributes left out, by the matplotlib class that has them (subclasses included); see the
# module docstring for why each one goes.
_MPL_SKIP: dict[str, frozenset[str]] = {
    "artist.Artist": frozenset({"_stale", "stale_callback", "_remove_method", "_callbacks"}),
    "text.Text": frozenset({"_renderer"}),
    "lines.Line2D": frozenset(
        {
            "_x",
            "_y",
            "_xy",
            "_path",
            "_transformed_path",
            "_invalidx",
            "_invalidy",
            "_subslice",
            "_x_filled",
            "ind_offset",
        }
    ),
    "collections.Collection": frozenset(
        {
            "_facecolors",
            "_edgecolors",
            "_mapped_colors",
            "_face_is_mapped",
            "_edge_is_mapped",
            "_transforms",
        }
    ),
    "text.Annotation": frozenset({"_transform", "arrow_patch"}),
    "colors.Colormap": frozenset({"_lut", "_isinit"}),
    "contour.ContourSet": frozenset({"_contour_generator"}),
    "axis.Axis": frozenset({"majorTicks", "minorTicks", "callbacks"}),
    "axes._base._AxesBase": frozenset({"callbacks"}),
    "figure.FigureBase": frozenset(
        {"canvas", "number", "_button_pick_id", "_scroll_pick_id", "_canvas_callbacks"}
    ),
    "ticker.TickHelper": frozenset(
        {"locs", "_locs", "_format", "format", "offset", "orderOfMagnitude", "_sublabels"}
    ),
    "transforms.TransformNode": frozenset(
        {"_parents", "_invalid", "_inverted", "_shorthand_name", "_affine"}
    ),
    "transforms.TransformedBbox": frozenset({"_points"}),
    "transforms.LockableBbox": frozenset({"_points"}),
    "transforms.TransformedPath": frozenset({"_transformed_path", "_transformed_points"}),
}
# The same, resolved to classes once matplotlib is imported.
_mpl_skip_by_class: list[tuple[type, frozenset[str]]] | None = None
# Combined skip set per exact class, and classes whose _mtx is their value.
_SKIP_CACHE: dict[type, frozenset[str]] = {}


def _mpl_classes() -> list[tuple[type, frozenset[str]]]:
    global _mpl_skip_by_class
    if _mpl_skip_by_class is None:
        import importlib

        found = []
        for path, names in _MPL_SKIP.items():
            module, _, name = path.rpartition(".")
            try:
                cls = getattr(importlib.import_module(f"matplotlib.{module}"), name)
            except (ImportError, AttributeError):
                continue  # another matplotlib version: the rule does not apply
            found.append((cls, names))
        _mpl_skip_by_class = found
    return _mpl_skip_by_class


def _skip_for(t: type) -> frozenset[str]:
    skip = _SKIP_CACHE.get(t)
    if skip is None:
        names: set[str] = set()
        for cls, more in _mpl_classes():
            if issubclass(t, cls):
                names |= more
        transforms = sys.modules["matplotlib.transforms"]
        if issubclass(t, transforms.TransformNode) and not issubclass(t, transforms.Affine2D):
            names.add("_mtx")  # a cache of the matrix its children define
        skip = _SKIP_CACHE[t] = frozenset(names)
    return skip


# Digests of attribute names: the same few hundred names recur in every artist.
_NAME_DIGESTS: dict[str, bytes] = {}
_NAME_DIGESTS_MAX = 20_000


# Attributes that point up from a part to what holds it: an artist's Axes and figure, an
# axis' or spine's Axes, a legend's parent.
_UP = frozenset({"_axes", "axes", "_parent_figure", "figure", "parent", "_parent", "_figure"})
# Values written into an object's digest as they are, in one ``marshal`` buffer, instead of
# one digest each: most of an artist's attributes are flags, numbers, names and tuples of
# them (a colour), and digesting them one by one was most of the cost of a figure.  Exact
# types only: a subclass (an IntEnum, a numpy scalar) has a rule of its own, and marshal
# would write a numpy scalar as its raw bytes.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_SEQUENCES = frozenset({tuple, list})
# marshal format 2: no back-references (format 3 writes a repeated or interned object as a
# reference, which depends on identity and reference counts, not value), floats as IEEE 754
# binary64, strings as UTF-8, int/bool/None/tuple/list tagged apart.  Format 2 is frozen: the
# bytes are the same in every process that writes it.
_MARSHAL_VERSION = 2
_marshal = marshal.dumps
_by_name = operator.itemgetter(0)
_by_value = operator.itemgetter(1)
_chain = itertools.chain.from_iterable
_MethodType = types.MethodType
# What an up-pointer counts as where it sits (it is digested with the input).
_UP_DIGEST = hash128(b"mpl.up\0")
# numpy.ndarray, set when the first matplotlib rule is made (matplotlib imports numpy)
_ndarray_type: type | None = None

# Digests of the sorted names of an object's leaf attributes: one per class, in practice.
_NAMES_DIGESTS: dict[tuple[str, ...], bytes] = {}
_NAMES_DIGESTS_MAX = 2_000

Getter = Callable[[dict[str, Any]], tuple[Any, ...]]


class _Layout(NamedTuple):
    """Where the attributes of the last object of a class (and skip set) were.

    The next object of the class usually has the same attributes, with values of the same
    kinds: its leaf values are then read with C getters and checked in bulk, and only the
    other attributes are looked at one by one.  Whenever the object does not fit (another
    number of attributes, a missing one, a value of another kind) the general loop runs and
    records a new layout.  Both give the same digest: the encoding is defined by the values
    (see ``_state_digest``), not by the path that computed it.
    """

    size: int  # len(__dict__), skipped attributes included
    skipped: Getter | None  # the skipped attributes (KeyError when one is missing)
    scalars: Getter | None  # leaf attributes that held a scalar
    sequences: Getter | None  # leaf attributes that held a tuple or list of scalars
    leaves: Getter  # all leaf attributes, sorted by name
    names: bytes  # digest of the leaf attributes' names
    others: Getter | None  # the other attributes, sorted by name digest
    other_names: tuple[tuple[bytes, bool], ...]  # their name digests, and whether they point up


_LAYOUTS: dict[tuple[type, frozenset[str]], _Layout] = {}
_LAYOUTS_MAX = 2_000


def _empty(state: dict[str, Any]) -> tuple[Any, ...]:
    return ()


def _getter(keys: tuple[str, ...]) -> Getter:
    """``state -> tuple of state[k] for k in keys``, in C when there are two keys or more."""
    if not keys:
        return _empty
    if len(keys) == 1:
        key = keys[0]
        return lambda state: (state[key],)
    return operator.itemgetter(*keys)


def _names_digest(names: tuple[str, ...]) -> bytes:
    digest = _NAMES_DIGESTS.get(names)
    if digest is None:
        digest = hash128(b"mpl.names\0" + _marshal(names, _MARSHAL_VERSION))
        if len(_NAMES_DIGESTS) < _NAMES_DIGESTS_MAX:
            _NAMES_DIGESTS[names] = digest
    return digest


def _name_digest(fp: Fingerprinter, key: Any) -> bytes:
    if type(key) is not str:
        return fp.digest_child(key)
    name = _NAME_DIGESTS.get(key)
    if name is None:
        name = fp.digest_child(key)
        if len(_NAME_DIGESTS) < _NAME_DIGESTS_MAX:
            _NAME_DIGESTS[key] = name
    return name


def _is_leaf(value: Any) -> bool:
    t = type(value)
    return t in _SCALARS or (t in _SEQUENCES and _SCALARS.issuperset(map(type, value)))


def _other_digest(fp: Fingerprinter, obj: Any, value: Any) -> bytes:
    """Digest of an attribute value that is not a leaf nor an up-pointer."""
    t = type(value)
    if t is _ndarray_type:
        # Small arrays (a Bbox's points, an Affine2D's matrix, a short line's data) refer to
        # nothing else: digested inline, without the traversal's bookkeeping.
        digest = small_array(value)
        if digest is not None:
            return ALIASES.get(digest, digest) if ALIASES else digest
    elif t is _MethodType and value.__self__ is obj:
        # A method bound to the object itself (a MarkerStyle's _marker_function) counts as
        # its function: through __self__ it would make the object a reference cycle of its own,
        # which costs several passes (see the core module).
        return hash128(b"mpl.own-method\0" + fp.digest_child(value.__func__))
    return fp.digest_child(value)


def _state_digest(
    fp: Fingerprinter, obj: Any, state: dict[str, Any], skip: frozenset[str]
) -> bytes:
    """Type plus *state* without *skip*: its leaf values in one buffer, the rest as digests.

    Leaves (exact ``str``, ``int``, ``float``, ``bool``, ``None``, and tuples and lists of
    them) are marshalled together, sorted by name, after a digest of their names; every
    other value is a (name digest, value digest) pair, the pairs sorted.  Which of the two
    an attribute goes to depends only on its value, so the encoding is injective (marshal's
    output delimits itself).  References up (``_UP``) are attached to the input and count
    as a mark here.
    """
    t = type(obj)
    type_digest = fp.lifetime_memo.get(address(t)) or fp.digest_child(
        t
    )  # classes live in the lifetime memo
    layout = _LAYOUTS.get((t, skip))
    found = None if layout is None else _fitted(fp, obj, state, layout)
    if found is None:
        found = _measured(fp, obj, state, skip)
    names, values, pairs = found
    return hash128(
        b"mpl\0" + type_digest + names + _marshal(values, _MARSHAL_VERSION) + b"".join(pairs)
    )


def _fitted(
    fp: Fingerprinter, obj: Any, state: dict[str, Any], layout: _Layout
) -> tuple[bytes, tuple[Any, ...], list[bytes]] | None:
    """*state*'s parts read through *layout*; None when it does not fit.

    The hot path of a figure's digest: the checks run in C over all values at once.
    """
    size, skipped, scalars, sequences, leaves, names, others, other_names = layout
    if len(state) != size:
        return None
    try:
        # Each getter raises KeyError for a missing attribute: with the same number of
        # attributes, none is missing only if there is no new one either.
        if skipped is not None:
            skipped(state)
        if scalars is not None and not _SCALARS.issuperset(map(type, scalars(state))):
            return None
        if sequences is not None:
            seqs = sequences(state)
            if not (
                _SEQUENCES.issuperset(map(type, seqs))
                and _SCALARS.issuperset(map(type, _chain(seqs)))
            ):
                return None
        values = leaves(state)
        other_values = () if others is None else others(state)
    except KeyError:
        return None
    pairs = []
    done, attached, ndarray, reach = fp.call_memo, fp.attached, _ndarray_type, fp.reach_memo
    for (name, up), value in zip(other_names, other_values, strict=True):
        t = type(value)
        if t in _SCALARS or (t in _SEQUENCES and _SCALARS.issuperset(map(type, value))):
            return None  # a leaf now: it goes with the leaves
        if up:
            attached.setdefault(address(value), value)  # Fingerprinter.attach, inline
            fp.marks.append(value)
            pairs.append(name + _UP_DIGEST)
            continue
        if t is ndarray:
            digest = small_array(value)
            if digest is not None:
                pairs.append(name + (ALIASES.get(digest, digest) if ALIASES else digest))
                continue
        # An object digested already (the Axes' transforms, a style enum): its digest from
        # the memo without a call.  Not a method: one bound to *obj* counts differently here.
        digest = None if t is _MethodType else done.get(address(value))
        if digest is not None and reach:
            reached = reach.get(address(value))
            if reached is not None:
                fp.reattach(reached)  # (what the memo hit in Fingerprinter._digest does)
        pairs.append(name + (digest or _other_digest(fp, obj, value)))
    return names, values, pairs


def _measured(
    fp: Fingerprinter, obj: Any, state: dict[str, Any], skip: frozenset[str]
) -> tuple[bytes, tuple[Any, ...], list[bytes]]:
    """*state*'s parts, attribute by attribute; records the layout for the next object."""
    leaves: list[tuple[str, Any]] = []
    pairs: list[bytes] = []
    skipped: list[str] = []
    others: list[tuple[bytes, str, bool]] = []
    layout_ok = True
    for key, value in state.items():
        if type(key) is not str:
            layout_ok = False  # a getter of names only
        elif key in skip:
            skipped.append(key)
            continue
        if _is_leaf(value) and type(key) is str:
            leaves.append((key, value))
            continue
        name = _name_digest(fp, key)
        if key in _UP and value is not None:
            # A reference up to the Axes or figure: digested once for the whole input, not
            # inline, so a figure is not one large reference cycle (see Fingerprinter.attach).
            fp.attach(value)
            pairs.append(name + _UP_DIGEST)
            up = True
        else:
            pairs.append(name + _other_digest(fp, obj, value))
            up = False
        others.append((name, key, up))
    leaves.sort(key=_by_name)
    keys = tuple(map(_by_name, leaves))
    values = tuple(map(_by_value, leaves))
    names = _names_digest(keys)
    pairs.sort()
    where = (type(obj), skip)
    if layout_ok and (len(_LAYOUTS) < _LAYOUTS_MAX or where in _LAYOUTS):
        others.sort()
        scalars = tuple(k for k, v in leaves if type(v) in _SCALARS)
        sequences = tuple(k for k, v in leaves if type(v) in _SEQUENCES)
        _LAYOUTS[where] = _Layout(
            size=len(state),
            skipped=_getter(tuple(skipped)) if skipped else None,
            scalars=_getter(scalars) if scalars else None,
            sequences=_getter(sequences) if sequences else None,
            leaves=_getter(keys),
            names=names,
            others=_getter(tuple(key for _, key, _ in others)) if others else None,
            other_names=tuple((name, up) for name, _, up in others),
        )
    return names, values, pairs


def _settle(axes: Any) -> None:
    """Apply pending autoscaling, as drawing would: the limits then stay put."""
    stale = axes.__dict__.get("_stale_viewlims")
    if stale is None or True in stale.values():
        unstale = getattr(axes, "_unstale_viewLim", None)
        if unstale is not None:
            unstale()


def _c_mpl_object(fp: Fingerprinter, obj: Any) -> bytes:
    t = type(obj)
    return _state_digest(fp, obj, vars(obj), _SKIP_CACHE.get(t) or _skip_for(t))


def _c_mpl_artist(fp: Fingerprinter, artist: Any) -> bytes:
    axes = artist.__dict__.get("_axes")
    if axes is not None:
        _settle(axes)
    if artist.__dict__.get("_A") is not None:
        # A colour-mapped artist's norm takes its limits from the data on the first draw.
        autoscale = getattr(artist, "autoscale_None", None)
        if autoscale is not None:
            autoscale()
    return _state_digest(fp, artist, vars(artist), _skip_for(type(artist)))


def _c_mpl_axes(fp: Fingerprinter, ax: Any) -> bytes:
    # All of it: a stale shared sibling changes this Axes' limits too.
    unstale = getattr(ax, "_unstale_viewLim", None)
    if unstale is not None:
        unstale()
    state = dict(vars(ax))
    # Sharing is kept in class-level groupers; pickling stores the siblings the same way.
    shared = getattr(ax, "_shared_axes", {})
    state["_shared_axes"] = {
        name: shared[name].get_siblings(ax) for name in sorted(shared) if ax in shared[name]
    }
    twinned = getattr(ax, "_twinned_axes", None)
    state["_twinned_axes"] = (
        twinned.get_siblings(ax) if twinned is not None and ax in twinned else None
    )
    return _state_digest(fp, ax, state, _skip_for(type(ax)))


def _c_mpl_figure(fp: Fingerprinter, fig: Any) -> bytes:
    for ax in fig.__dict__.get("_localaxes", ()):
        unstale = getattr(ax, "_unstale_viewLim", None)
        if unstale is not None:
            unstale()
    state = vars(fig)
    if "_original_dpi" in state:
        state = dict(state)
        state["_dpi"] = state.pop("_original_dpi")
    return _state_digest(fp, fig, state, _skip_for(type(fig)))


def _c_mpl_text(fp: Fingerprinter, text: Any) -> bytes:
    skip = _skip_for(type(text))
    ax = text.__dict__.get("_axes")
    if ax is not None:
        _settle(ax)
        extra = _laid_out(ax, text)
        if extra:
            skip = skip | extra
    return _state_digest(fp, text, vars(text), skip)


_POSITION = frozenset({"_x", "_y"})
_TITLE_Y = frozenset({"_y"})
_OFFSET_TEXT = frozenset({"_x", "_y", "_text"})  # text and place come from the formatter


def _laid_out(ax: Any, text: Any) -> frozenset[str]:
    """Attributes of *text* that drawing sets, when *text* is one of the Axes' titles."""
    d = ax.__dict__
    if any(d.get(name) is text for name in ("title", "_left_title", "_right_title")):
        # None or True: the Axes moves titles clear of the tick labels on each draw
        return _TITLE_Y if d.get("_autotitlepos") is not False else frozenset()
    return frozenset()


# A legend lays out its entries (offset boxes, the frame, text positions and transforms) on each
# draw: its entries count by their contents and style, without geometry.
_LEGEND_LAYOUT = frozenset(
    {"_legend_box", "_legend_handle_box", "_legend_title_box", "texts", "legend_handles"}
)
_LEGEND_TEXT_LAYOUT = frozenset({"_x", "_y", "_transform"})
_LEGEND_FRAME_LAYOUT = frozenset({"_x", "_y", "_width", "_height", "_mutation_scale", "_transform"})


def _c_mpl_legend(fp: Fingerprinter, legend: Any) -> bytes:
    axes = legend.__dict__.get("_axes")
    if axes is not None:
        _settle(axes)
    skip = _skip_for(type(legend)) | _LEGEND_LAYOUT
    d = legend.__dict__
    parts = bytearray(_state_digest(fp, legend, d, skip | {"legendPatch"}))
    title_box = d.get("_legend_title_box")
    title = getattr(title_box, "_text", None)
    entries: list[tuple[Any, frozenset[str]]] = [
        *((text, _LEGEND_TEXT_LAYOUT) for text in d.get("texts", ())),
        *((handle, _LEGEND_TEXT_LAYOUT) for handle in d.get("legend_handles", ())),
        (title, _LEGEND_TEXT_LAYOUT),
        (d.get("legendPatch"), _LEGEND_FRAME_LAYOUT),
    ]
    for entry, layout in entries:
        if entry is None or not hasattr(entry, "__dict__"):
            parts += fp.digest_child(entry)
        else:
            parts += _state_digest(fp, entry, vars(entry), _skip_for(type(entry)) | layout)
    return hash128(b"mpl.legend\0" + parts)


# Where an annotation's arrow starts, ends and which text box it avoids is laid out on draw.
_ARROW_LAYOUT = frozenset({"_posA_posB", "patchA", "patchB"})


def _c_mpl_annotation(fp: Fingerprinter, text: Any) -> bytes:
    arrow = text.__dict__.get("arrow_patch")
    if arrow is None:
        arrow_digest = fp.digest_child(None)
    else:
        arrow_digest = _state_digest(fp, arrow, vars(arrow), _skip_for(type(arrow)) | _ARROW_LAYOUT)
    return hash128(b"mpl.annotation\0" + _c_mpl_text(fp, text) + arrow_digest)


def _c_mpl_axis(fp: Fingerprinter, axis: Any) -> bytes:
    d = axis.__dict__
    axes = d.get("axes")
    if axes is not None:
        _settle(axes)
    skip = _skip_for(type(axis)) | _AXIS_TEXTS
    if d.get("_tick_position", "bottom") == "bottom" and type(axis).__name__ == "XAxis":
        skip = skip | {"_tick_position"}  # drawing sets the default when it is missing
    parts = bytearray(_state_digest(fp, axis, d, skip))
    # The label and offset text have no Axes of their own: they are digested here, where it
    # is known which of their attributes drawing sets.
    label, offset = d.get("label"), d.get("offsetText")
    label_layout = _POSITION if d.get("_autolabelpos", True) else frozenset()
    for text, layout in ((label, label_layout), (offset, _OFFSET_TEXT)):
        if text is None or not hasattr(text, "__dict__"):
            parts += fp.digest_child(text)
        else:
            parts += _state_digest(fp, text, vars(text), _skip_for(type(text)) | layout)
    return hash128(b"mpl.axis\0" + parts)


_AXIS_TEXTS = frozenset({"label", "offsetText"})


def _c_mpl_spine(fp: Fingerprinter, spine: Any) -> bytes:
    skip = _skip_for(type(spine))
    if spine.__dict__.get("_patch_type") == "line":
        skip = skip | {"_path"}  # recomputed from the view limits on each draw
    axes = spine.__dict__.get("_axes")
    if axes is not None:
        _settle(axes)
    return _state_digest(fp, spine, vars(spine), skip)


def _c_mpl_container(fp: Fingerprinter, container: Any) -> bytes:
    dg = fp.digest_child
    items = bytearray()
    for item in container:
        items += dg(item)
    return hash128(b"mpl.container\0" + hash128(items) + _c_mpl_object(fp, container))


def _c_mpl_type_only(fp: Fingerprinter, obj: Any) -> bytes:
    return hash128(b"mpl.opaque\0" + fp.digest_child(type(obj)))


def _c_mpl_canvas(fp: Fingerprinter, canvas: Any) -> bytes:
    return hash128(b"mpl.canvas\0" + fp.digest_child(type(canvas)) + fp.digest_child(canvas.figure))


def _matplotlib_rule(t: type) -> Rule | None:
    global _ndarray_type
    modules = sys.modules
    if _ndarray_type is None:
        _ndarray_type = getattr(modules.get("numpy"), "ndarray", None)
    # a user subclass of a matplotlib class is matplotlib's too (its instances' state)
    if not any(k.__module__.startswith(("matplotlib", "mpl_toolkits")) for k in t.__mro__):
        return None
    artist = getattr(modules.get("matplotlib.artist"), "Artist", None)
    if artist is not None and issubclass(t, artist):
        rules: list[tuple[str, str, Handler]] = [
            ("matplotlib.figure", "FigureBase", _c_mpl_figure),
            ("matplotlib.axes._base", "_AxesBase", _c_mpl_axes),
            ("matplotlib.axis", "Axis", _c_mpl_axis),
            ("matplotlib.spines", "Spine", _c_mpl_spine),
            ("matplotlib.text", "Annotation", _c_mpl_annotation),
            ("matplotlib.text", "Text", _c_mpl_text),
            ("matplotlib.legend", "Legend", _c_mpl_legend),
        ]
        for module, name, handler in rules:
            cls = getattr(modules.get(module), name, None)
            if isinstance(cls, type) and issubclass(t, cls):
                return (handler, CALL_MEMO)
        return (_c_mpl_artist, CALL_MEMO)
    simple: list[tuple[str, str, Handler]] = [
        ("matplotlib.transforms", "TransformNode", _c_mpl_object),
        ("matplotlib.ticker", "TickHelper", _c_mpl_object),
        ("matplotlib.colors", "Colormap", _c_mpl_object),
        # By their __dict__ like the rest (through __reduce_ex__ they cost a dict more); a
        # MarkerStyle holds a method bound to itself, counted as its function.
        ("matplotlib.markers", "MarkerStyle", _c_mpl_object),
        ("matplotlib.path", "Path", _c_mpl_object),
        ("matplotlib.container", "Container", _c_mpl_container),
        ("matplotlib.cbook", "CallbackRegistry", _c_mpl_type_only),
        ("matplotlib.backend_bases", "RendererBase", _c_mpl_type_only),
        ("matplotlib.backend_bases", "FigureCanvasBase", _c_mpl_canvas),
    ]
    for module, name, handler in simple:
        cls = getattr(modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(t, cls):
            return (handler, CALL_MEMO)
    return None


# ---- ipywidgets -------------------------------------------------------------------------------

_WIDGET_SKIP = frozenset({"_view_count"})


def _c_widget(fp: Fingerprinter, widget: Any) -> bytes:
    dg = fp.digest_child
    pairs = []
    for name in widget.keys:
        if name not in _WIDGET_SKIP:
            pairs.append(dg(name) + dg(getattr(widget, name)))
    pairs.sort()
    return hash128(b"ipywidget\0" + dg(type(widget)) + b"".join(pairs))


def _ipywidgets_rule(t: type) -> Rule | None:
    widget = getattr(sys.modules.get("ipywidgets"), "Widget", None)
    if isinstance(widget, type) and issubclass(t, widget):
        return (_c_widget, CALL_MEMO)
    return None


# Before the rule for subclasses of built-in types: a matplotlib Container is a tuple.
add_provider(_stdlib_rule, order=40)
add_provider(_matplotlib_rule, order=41, requires="matplotlib")
add_provider(_ipywidgets_rule, order=42, requires="ipywidgets")
