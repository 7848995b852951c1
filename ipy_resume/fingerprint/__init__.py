"""Process-independent fingerprints of Python values.

:func:`fingerprint` maps a value to a 16-byte ``xxh3_128`` digest.  Equal values give equal
digests in every process that runs the same interpreter and libraries, whatever its
``PYTHONHASHSEED``; values that differ give different digests.  The digest is part of a cache
key, so where equality is uncertain the rules below prefer a spurious difference (a cache miss)
to a spurious match (a stale result).

Encoding
--------
Every digest hashes a type tag followed by a body that is injective for that tag, so ``1``,
``1.0``, ``True``, ``"1"``, ``b"1"``, ``[1]`` and ``(1,)`` all differ.  Containers hash the
16-byte digests of their items, never ``hash()``, so nothing depends on the hash seed:

* ``list``/``tuple`` (and ``OrderedDict``, whose ``==`` is order-sensitive): items in order.
* ``dict``/``defaultdict``/``set``/``frozenset`` and dict views: sorted item (or key/value
  pair) digests, so insertion order does not matter.  ``defaultdict`` adds its factory.
* Subclasses of built-in types (named tuples, ``Counter``, ``IntEnum`` members, ...): the
  class, the built-in content, and the instance ``__dict__``/``__slots__``.
* numpy arrays: dtype, shape, an order flag and the raw buffer, hashed without copying when
  the array is C- or F-contiguous; other strided arrays are hashed in logical C order through
  bounded chunks (at most 16 MB at a time), so a strided view equals its contiguous copy.  An
  F-contiguous array is hashed in memory order with an ``F`` flag and therefore differs from
  its C-ordered copy (comparing them would need a transposing copy).  Object arrays recurse
  element by element.
* torch tensors (only when torch is already imported): dtype, shape, strides, storage offset,
  device, ``requires_grad``, gradient and the raw bytes of their storage, hashed in place
  once per storage (:mod:`.torch_rules`); a ``torch.Generator`` by its state.
* pandas objects (only when pandas is already imported): labels, index and column values;
  Arrow-backed columns (pandas' ``str`` dtype, ``ArrowDtype``) and pyarrow arrays are hashed
  from their Arrow buffers, the same however they are chunked or sliced (:mod:`.arrow_rules`);
  other string columns go through one pass over their UTF-8 text plus a missing-value mask.
* Functions and classes from ``__main__`` (notebook code, or a module that is not imported):
  their code objects (bytecode, constants, names; not source, file names or line numbers, so
  reformatting and comments do not matter), defaults, closure cells, ``__wrapped__``, and
  every global they read, transitively, so editing a helper a function calls changes the
  function's fingerprint.  The globals read are found from the bytecode: ``np.sum`` reads the
  global ``np`` but not ``sum``, and assigning a global is not reading it.  Function
  attributes and annotations are left out.  A class contributes its bases, metaclass and
  ``__dict__`` (minus caches that Python fills in lazily, such as ``__slotnames__``).
* Library functions, classes and modules: module, qualified name and the version of the
  top-level package (``__version__``, else the distribution metadata, else ``"unknown"``; the
  Python version for the standard library), never their code or contents.  Closures and
  lambdas made by library code add their code, defaults and closure cells, since their name
  does not identify them.  A module-level alias of a method of a hidden library instance,
  such as ``random.randint``, counts as library code too, not as that instance's state.
* Library objects without value semantics (:mod:`.rules`): a matplotlib figure, Axes, artist
  or transform is digested from its own state without what drawing changes (stale flags,
  caches, renderer references, tick objects, positions matplotlib lays out itself, callback
  registries, the canvas); an ipywidgets widget from its synchronised traits.  Open files,
  sockets, database connections, locks and threads raise :class:`Unfingerprintable`: they are
  handles on something outside the value.
* Anything else: structurally through ``__reduce_ex__(5)`` (the class, then the state), then
  ``cloudpickle`` as a last resort.  Values that cannot be pickled (generators, frames...)
  raise :class:`Unfingerprintable`; nothing else escapes.

Cost and reference cycles
-------------------------
Within one top-level call every composite object is digested once (a memo by identity), so
the cost is linear in the size of the reachable graph, shared objects and cycles included.
An object on no reference cycle is digested from its contents and its children's digests.
The objects on common cycles (a strongly connected component) are digested together: each
member's digest describes the component's structure and the member's place in it, so it does
not depend on the path it was reached by, on iteration order or on what was digested before;
two members, or two copies of a graph, agree exactly when following their references gives the
same infinite tree of contents.  A member's contents are hashed twice or a few times more
(see :mod:`.core`).  Results are cached per :class:`Fingerprinter`: functions, classes and
modules for its lifetime, everything else for one top-level call.

Each nesting level costs a few stack frames; on Python 3.11 and later the recursion limit is
raised to 12 000 while a top-level call runs, and a value nested too deeply for it raises
:class:`Unfingerprintable`.

Budget
------
One top-level value may cost at most 5,000,000 composite objects and 20 seconds; past either,
:class:`Unfingerprintable` says the value is too large (or too slow) to fingerprint, and the
cell that reads it always executes instead of hanging.  ``IPY_RESUME_FINGERPRINT_BUDGET=OBJECTS``
or ``OBJECTS,SECONDS`` changes the limits (read when a :class:`Fingerprinter` is created;
values that are not positive numbers are ignored).  The clock is read every 4096 objects.

Restored values
---------------
:func:`register_alias` maps the digest of a value as restored from a checkpoint to the digest
it had when it was saved, for values whose pickle round trip is not exact; :func:`defer_alias`
leaves that choice to the first digest taken of the restored object (most round trips are
exact, and then nothing more is computed); :func:`clear_aliases` forgets both tables.  Each
costs nothing while empty and one dict lookup per composite otherwise.

Extending
---------
:func:`register` adds fingerprints for further types.  The built-in rules live in the
submodules :mod:`.containers`, :mod:`.code`, :mod:`.reduce`, :mod:`.numpy_rules`,
:mod:`.pandas_rules`, :mod:`.arrow_rules`, :mod:`.torch_rules` and :mod:`.rules`, each a set of *handlers*
``handler(fingerprinter, value) -> bytes`` added to the table in :mod:`.core` with
:func:`~.core.add_exact` (exact types) or :func:`~.core.add_provider` (a function from a type
to a rule, consulted in order, only while the library it requires is imported).
"""

from __future__ import annotations

from . import (  # noqa: F401  (rules)
    arrow_rules,
    code,
    containers,
    numpy_rules,
    pandas_rules,
    reduce,
    rules,
    torch_rules,
)
from .code import globals_read, import_version, tied_to_code
from .core import (
    BUDGET_ENV,
    Fingerprinter,
    Unfingerprintable,
    clear_aliases,
    defer_alias,
    fingerprint,
    fingerprint_hex,
    register,
    register_alias,
)
from .primitives import digest_bytes

__all__ = [
    "BUDGET_ENV",
    "Fingerprinter",
    "Unfingerprintable",
    "clear_aliases",
    "defer_alias",
    "digest_bytes",
    "fingerprint",
    "fingerprint_hex",
    "globals_read",
    "import_version",
    "register",
    "register_alias",
    "tied_to_code",
]
