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
    "host_chunks",
    "loaded",
    "mapped_to",
    "plain_tensor",
    "restore_device",
    "storage_bytes",
]

DEVICE_TYPES = frozenset({"cpu", "cuda", "mps"})
"""Devices whose tensors are raw memory ipy_resume can read (others take torch's pickling)."""
HOST_CHUNK = 64 << 20
"""Bytes of device memory copied to the host at a time while a fingerprint reads it."""

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


def host_chunks(storage: Any, chunk: int = HOST_CHUNK) -> Iterator[memoryview]:
    """A storage's bytes in order, for reading while the caller holds *storage*: its own
    memory on the CPU, host copies of *chunk* bytes otherwise.

    The copies are made one at a time, so reading a 10 GB device storage never holds more
    than one chunk of it on the host (untested on a GPU: no CUDA or MPS machine ran it).
    """
    nbytes = storage.nbytes()
    if storage.device.type == "cpu":
        if nbytes:
            # (a tenth of the cost of a numpy view: a model's thousands of small storages)
            yield memoryview((ctypes.c_ubyte * nbytes).from_address(storage.data_ptr()))
        return
    torch = loaded()
    assert torch is not None
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    for start in range(0, nbytes, chunk):
        yield flat[start : start + chunk].cpu().numpy().data


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
        also = "" if wanted != saved else " (%%checkpoint --map-location cpu restores them there)"
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
