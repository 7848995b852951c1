"""What the store and the fingerprints share about PyTorch, without ever importing it.

ipy_resume never imports torch itself: :func:`loaded` answers the module only when the
user's process has imported it already (a tensor cannot exist otherwise).  Everything
here reads a tensor's raw memory: a storage (the bytes several tensors may view) as a
numpy ``uint8`` array over the same memory, and a device storage through host copies.

Devices: tensors on ``cuda`` and ``mps`` are saved through one device-to-host copy of
each storage and restored to the device they came from when this machine has it.
:func:`restore_device` settles where a saved storage goes: the ``--map-location`` of the
cell (see :func:`mapped_to`), else its own device, else an error the restore reports in
one line before the cell executes.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "DEVICE_TYPES",
    "DeviceMissing",
    "device_digest",
    "loaded",
    "mapped_to",
    "memory_of",
    "plain_tensor",
    "restore_device",
    "storage_bytes",
]

DEVICE_TYPES = frozenset({"cpu", "cuda", "mps"})
"""Devices whose tensors are raw memory ipy_resume can read (others take torch's pickling)."""

_map_location: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ipy_resume_map_location", default=None
)


class DeviceMissing(RuntimeError):
    """A checkpoint's tensors were saved on a device this machine does not have."""


def loaded() -> ModuleType | None:
    """torch, when the process has imported it (and it has finished importing), else None.

    >>> loaded() is None or loaded().__name__ == "torch"
    True
    """
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "UntypedStorage") or not hasattr(torch, "nn"):
        return None
    return torch


def plain_tensor(t: Any) -> bool:
    """True for a strided tensor of raw values in the memory of a CPU, CUDA or MPS device:
    its bytes, dtype, shape, strides and offset are the whole value.

    Sparse, quantized, nested and meta tensors, and tensors with a lazy conjugate or
    negation bit, are not (they take torch's own pickling).

    >>> import torch  # doctest: +SKIP
    >>> plain_tensor(torch.ones(2)), plain_tensor(torch.ones(2).to_sparse())  # doctest: +SKIP
    (True, False)
    """
    torch = loaded()
    if torch is None:
        return False
    try:
        return bool(
            t.layout is torch.strided
            and t.device.type in DEVICE_TYPES
            and not t.is_quantized
            and not t.is_nested
            and not t.is_conj()
            and not t.is_neg()
            and t.dtype.itemsize > 0
        )
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def storage_bytes(storage: Any) -> np.ndarray:
    """The bytes of a CPU storage as a writeable ``uint8`` array over the same memory.

    >>> import torch  # doctest: +SKIP
    >>> t = torch.zeros(2); storage_bytes(t.untyped_storage())[:4] = 1; bool(t[0] != 0)  # doctest: +SKIP
    True
    """
    torch = loaded()
    assert torch is not None
    if storage.nbytes() == 0:
        return np.empty(0, dtype=np.uint8)
    flat = torch.empty(0, dtype=torch.uint8).set_(storage)
    return flat.numpy()


def memory_of(storage: Any) -> memoryview:
    """A CPU storage's bytes, to read while the caller holds *storage* (a tenth of the cost
    of :func:`storage_bytes`: a model has thousands of small storages)."""
    nbytes = storage.nbytes()
    if not nbytes:
        return memoryview(b"")
    return memoryview((ctypes.c_ubyte * nbytes).from_address(storage.data_ptr()))


_WORDS_AT_A_TIME = 8 << 20  # 64 MB of device memory per step of device_digest
_KEYS = (0x2545F4914F6CDD1D, 0x6A09E667F3BCC909)  # two independent sums: 128 bits
_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shifted(x: Any, bits: int) -> Any:
    # a logical right shift of int64 words (torch shifts them arithmetically)
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mixed(x: Any) -> Any:
    # splitmix64's finaliser, in int64 arithmetic that wraps: a distinct odd multiplier per word
    x = x * _signed(0xBF58476D1CE4E5B9)
    x = x ^ _shifted(x, 31)
    x = x * _signed(0x94D049BB133111EB)
    return (x ^ _shifted(x, 29)) | 1


def device_digest(storage: Any) -> bytes:
    """A 16-byte digest of a storage's bytes computed where they are (on the GPU for a CUDA
    storage): only 16 bytes and the last few of the storage cross to the host.

    Two sums of the storage's 8-byte words, each word times an odd multiplier derived from
    its position and a key, modulo 2**64: a change of any one word always changes both sums.
    Written for device memory and **untested on a GPU**; the tests run it on the CPU.

    >>> import torch  # doctest: +SKIP
    >>> len(device_digest(torch.ones(3).untyped_storage()))  # doctest: +SKIP
    16
    """
    import xxhash

    torch = loaded()
    assert torch is not None
    nbytes = storage.nbytes()
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    words = nbytes // 8
    body = flat[: words * 8].view(torch.int64) if words else None
    sums = []
    for key in _KEYS:
        total = 0
        for start in range(0, words, _WORDS_AT_A_TIME):
            assert body is not None
            part = body[start : start + _WORDS_AT_A_TIME]
            where = torch.arange(start, start + part.numel(), dtype=torch.int64, device=part.device)
            total += int((part * _mixed(where ^ _signed(key))).sum())
        sums.append((total & _MASK64).to_bytes(8, "little"))
    tail = bytes(flat[words * 8 :].cpu().numpy())
    return xxhash.xxh3_128(b"".join(sums) + tail + nbytes.to_bytes(8, "little")).digest()


def host_storage(storage: Any) -> Any:
    """*storage* itself on the CPU; else its one device-to-host copy (untested on a GPU)."""
    return storage if storage.device.type == "cpu" else storage.cpu()


@contextlib.contextmanager
def mapped_to(location: str | None) -> Iterator[None]:
    """Restore tensors on *location* (``"cpu"``) inside the block, whatever their device.

    >>> with mapped_to("cpu"):
    ...     restore_device("cuda:0")
    'cpu'
    """
    token = _map_location.set(location or None)
    try:
        yield
    finally:
        _map_location.reset(token)


def restore_device(saved: str) -> str:
    """Where a storage saved on device *saved* is restored; raises :class:`DeviceMissing`.

    >>> restore_device("cpu")
    'cpu'
    """
    wanted = _map_location.get() or saved
    if wanted.split(":")[0] == "cpu":
        return wanted
    if not available(wanted):
        also = "" if wanted != saved else " (--map-location cpu brings them back on the CPU)"
        raise DeviceMissing(
            f"its tensors were saved on {saved}, which this machine does not have{also}"
        )
    return wanted


def available(device: str) -> bool:
    """True when this machine has the torch device *device* (``"cuda:1"``, ``"mps"``)."""
    torch = loaded()
    if torch is None:
        return False
    kind, _, index = device.partition(":")
    try:
        if kind == "cuda":
            return bool(torch.cuda.is_available()) and int(index or 0) < torch.cuda.device_count()
        if kind == "mps":
            return bool(torch.backends.mps.is_available())
    except (RuntimeError, ValueError, AttributeError):
        return False
    return kind == "cpu"
