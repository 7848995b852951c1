"""Seed, snapshot and restore the global random number generators.

A checkpoint hit must leave the generators exactly where an execution would
have left them, otherwise the cells after it draw different numbers. Only the
*global* generators need this: a ``numpy.random.Generator`` or a ``torch.Generator``
held in a variable is a value and travels with the other values.

torch (only when the process imported it): the CPU generator always; the CUDA
generators of every device once CUDA is initialised (``torch.cuda.get_rng_state_all``),
put back on a machine with as many devices.
"""

from __future__ import annotations

import array
import contextlib
import functools
import importlib.abc
import random
import sys
from typing import Any

import numpy as np

# Seeds are folded into numpy's legacy seeding range.
_NUMPY_SEED_MODULUS = 2**32


@functools.lru_cache(maxsize=4096)  # (asked by every plan of the cell: a hit's too)
def derive_seed(seed_base: int, cell_id: str) -> int:
    """Return the default seed of a cell: stable for a store and a CELL_ID.

    >>> derive_seed(7, "train") == derive_seed(7, "train")
    True
    """
    from ..fingerprint import digest_bytes

    digest = digest_bytes(seed_base.to_bytes(16, "little", signed=True), cell_id.encode("utf-8"))
    return int.from_bytes(digest[:8], "little") >> 1


def seed_all(seed: int) -> None:
    """Seed ``random``, numpy's global generator and torch (now if it is imported, else
    when the cell imports it).

    >>> seed_all(3); a = random.random(); seed_all(3); a == random.random()
    True
    """
    random.seed(seed)
    global _python_seeded
    _python_seeded = (seed, random.getstate())  # (what snapshot compares with: cheaper here)
    np.random.seed(seed % _NUMPY_SEED_MODULUS)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    else:
        _seed_torch_on_import(seed)


class _SeedTorchOnImport(importlib.abc.MetaPathFinder):
    """Seeds torch right after its import, when a seeded cell imports it.

    A notebook's training cell usually imports torch itself: seeded only when it was
    imported before the cell, its data, initial weights and shuffling differed on every
    run, and a loop resumed after a crash rebuilt other data than it had trained on.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _SeedingLoader(spec.loader, self.seed)  # type: ignore[assignment]
        return spec


class _SeedingLoader:
    """The loader of torch, seeding it once it has run; gone from the module before then."""

    def __init__(self, inner: Any, seed: int) -> None:
        self.inner = inner
        self.seed = seed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        module.manual_seed(self.seed)


_on_import: _SeedTorchOnImport | None = None


def stop_seeding_on_import() -> None:
    """The seeded cell is over, returned or raised: a later import of torch is not its own.

    >>> seed_all(3); stop_seeding_on_import()
    """
    _seed_torch_on_import(None)


def _seed_torch_on_import(seed: int | None) -> None:
    """Seed torch with *seed* when it is next imported (None: no longer)."""
    global _on_import
    if _on_import is not None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(_on_import)
        _on_import = None
    if seed is not None:
        _on_import = _SeedTorchOnImport(seed)
        sys.meta_path.insert(0, _on_import)


def snapshot(seeded: int | None = None) -> dict[str, Any]:
    """Capture the state of every global generator as plain picklable data.

    *seeded* is the seed :func:`seed_all` was given before the cell: when numpy's
    generator is still exactly where that seed put it (the cell drew nothing from it),
    the state also says so (``numpy_seed``), and :func:`restore` re-seeds it, which is
    ten times cheaper than setting its 624 words; the same for ``random``
    (``python_seed``: its 625 words need not become Python ints).  The full states are
    kept as well, for readers that predate the shortcuts; ``random``'s words as an
    ``array('I')``, which unpickles four times faster than 625 ints and which those
    readers turn into the tuple ``random.setstate`` takes as before.

    >>> state = snapshot(); x = random.random(); restore(state); x == random.random()
    True
    """
    fresh = None if seeded is None else _numpy_state_if_fresh(seeded % _NUMPY_SEED_MODULUS)
    numpy_state = np.random.get_state(legacy=False) if fresh is None else fresh
    python_state = random.getstate()
    state: dict[str, Any] = {"python": _packed_python_state(python_state), "numpy": numpy_state}
    if seeded is not None and python_state == _python_state_after(seeded):
        state["python_seed"] = seeded
    if seeded is not None and (
        fresh is not None or _freshly_seeded(numpy_state, seeded % _NUMPY_SEED_MODULUS)
    ):
        state["numpy_seed"] = seeded % _NUMPY_SEED_MODULUS
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state().numpy().copy()
        cuda = _cuda_states(torch)
        if cuda is not None:
            state["torch_cuda"] = cuda
    return state


def _cuda_states(torch: Any) -> list[np.ndarray] | None:
    """The state of every CUDA device's generator, once CUDA is initialised (else None:
    asking would initialise it, which costs seconds and a device context per GPU).

    Untested on a GPU: no CUDA machine has run it."""
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        return [s.numpy().copy() for s in cuda.get_rng_state_all()]
    except (RuntimeError, AttributeError):
        return None


_python_seeded: tuple[int, tuple[Any, ...]] | None = None  # (seed, state) of seed_all's


def _python_state_after(seed: int) -> tuple[Any, ...]:
    """The state ``random.seed(seed)`` gives (kept by :func:`seed_all` for its last seed)."""
    if _python_seeded is not None and _python_seeded[0] == seed:
        return _python_seeded[1]
    return random.Random(seed).getstate()


def _packed_python_state(state: tuple[Any, ...]) -> tuple[Any, ...]:
    """``random.getstate()`` with its words as an ``array('I')`` (a tuple where they do not
    fit one).

    >>> v, words, gauss = _packed_python_state(random.getstate()); words.typecode
    'I'
    """
    version, internal, gauss = state
    if _WORD.itemsize < 4:  # pragma: no cover - (no platform Python runs on)
        return state
    try:
        return (version, array.array("I", internal), gauss)
    except (OverflowError, TypeError):  # pragma: no cover - (not MT19937's 32-bit words)
        return state


_WORD = array.array("I")


def _seed_words(seed: int, count: int) -> list[int]:
    # the first words of MT19937's key after numpy's legacy seeding with a 32-bit int
    # (init_genrand; Matsumoto and Nishimura's reference initialisation)
    words = [seed]
    for i in range(1, count):
        prev = words[-1]
        words.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return words


_MT_WORDS = 624
_MT_STATE_BYTES = _MT_WORDS * 4 + 4  # numpy's mt19937_state: uint32 key[624]; int pos


def _numpy_state_if_fresh(seed: int) -> dict[str, Any] | None:
    """``np.random.get_state(legacy=False)`` when numpy's global generator is where
    ``np.random.seed(seed)`` left it, else None (then ask numpy).

    numpy builds that state word by word (30 us, a tenth of a small cell's miss); the
    generator's own memory, read through its documented ``ctypes`` interface, says in
    two microseconds whether nothing was drawn since the seed, and is the state then:
    the key as seeded, position 624, no Gaussian in hand (seeding drops it, and no draw
    happened since).  The one state it cannot tell apart is one a cell sets itself with
    ``np.random.set_state``: the seeded key at position 624 *with* a Gaussian in hand
    (the Gaussian is kept outside the generator's memory), restored without it.
    """
    try:
        bit_generator = np.random.mtrand._rand._bit_generator
        if type(bit_generator).__name__ != "MT19937":
            return None
        import ctypes

        raw = ctypes.string_at(bit_generator.ctypes.state_address, _MT_STATE_BYTES)
    except Exception:  # (another numpy's layout: numpy's own answer is always right)
        return None
    key = np.frombuffer(raw, dtype=np.uint32, count=_MT_WORDS)
    if int.from_bytes(raw[-4:], sys.byteorder, signed=True) != _MT_WORDS:
        return None
    if [int(k) for k in key[:8]] != _seed_words(seed, 8):
        return None
    return {
        "bit_generator": "MT19937",
        "state": {"key": key.copy(), "pos": _MT_WORDS},
        "has_gauss": 0,
        "gauss": 0.0,
    }


def _freshly_seeded(state: Any, seed: int) -> bool:
    """True when a numpy MT19937 state is the one ``np.random.seed(seed)`` leaves.

    Seeding sets every word of the key and the position 624 (no word used yet); the
    first draw regenerates all 624 words.  A state that a cell reached by drawing and
    that still showed position 624 and the seeded first eight words would need 256
    bits of its regenerated key to match by chance.
    """
    try:
        inner = state["state"]
        key = inner["key"]
        return bool(
            state["bit_generator"] == "MT19937"
            and inner["pos"] == 624
            and not state["has_gauss"]
            and len(key) == 624
            and [int(k) for k in key[:8]] == _seed_words(seed, 8)
        )
    except (KeyError, TypeError, IndexError):
        return False


def restore(state: dict[str, Any]) -> None:
    """Put every generator named in *state* back to that state.

    >>> s = snapshot(); restore(s)
    """
    if isinstance(state.get("python_seed"), int):
        random.seed(state["python_seed"])  # (where seeding put it: what executing gives)
    elif "python" in state:
        random.setstate(_as_python_state(state["python"]))
    if isinstance(state.get("numpy_seed"), int):
        np.random.seed(state["numpy_seed"])
    elif "numpy" in state:
        np.random.set_state(state["numpy"])
    torch = sys.modules.get("torch")
    if "torch" in state and torch is not None:
        torch.set_rng_state(torch.from_numpy(np.asarray(state["torch"], dtype=np.uint8)))
    cuda_states = state.get("torch_cuda")
    if cuda_states and torch is not None and _cuda_available(torch, len(cuda_states)):
        torch.cuda.set_rng_state_all(
            [torch.from_numpy(np.asarray(s, dtype=np.uint8)) for s in cuda_states]
        )


def _cuda_available(torch: Any, devices: int) -> bool:
    """True when this machine has the *devices* CUDA devices a state was taken on."""
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() == devices
    except (RuntimeError, AttributeError):
        return False


def _as_python_state(value: Any) -> tuple[Any, ...]:
    # A round trip through some serialisers turns the inner tuple into a list; since the
    # words are stored as an array('I') (snapshot), this is what turns them back.
    version, internal, gauss = value
    return (version, tuple(internal), gauss)
