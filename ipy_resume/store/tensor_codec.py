"""PyTorch tensors in a pickle stream: their bytes out of band, their storages shared.

torch pickles a tensor by writing its storage through ``torch.save`` into the stream
(the whole storage, in band, for every tensor that views it): an 805 MB model with its
Adam state took 7 s to restore, ten times ``torch.load``.  Here a tensor is written as

* its storage, once per storage whatever number of tensors view it (tied weights, views,
  a parameter and the optimizer's reference to it): the storage's bytes go out as one
  pickle buffer, which the store writes as a raw blob when it is large and maps back
  copy-on-write (``MAP_PRIVATE``, see :meth:`ipy_resume.store.blobs.BlobStore.map`), as
  it does for large numpy arrays;
* and the tensor's view of it: dtype, storage offset, shape, strides, ``requires_grad``,
  its gradient and its Python attributes; a ``Parameter`` comes back a ``Parameter``.

Modules, optimizers, schedulers and ``GradScaler``s keep going through pickle as before;
only their tensors take this path, so ``m.parameters()`` and ``opt.param_groups`` hold
the same restored parameters.  A storage on a CUDA or MPS device is copied to the host
once per save and put back on its device when it exists (:func:`torch_support.restore_device`).

A storage that is the memory of a numpy array stored in the same checkpoint
(``torch.from_numpy(a)``) is written as that array, and comes back over it.

Sparse, quantized, nested and meta tensors, tensor subclasses other than ``Parameter``,
and tensors with a lazy conjugate or negation bit take torch's own pickling.

A tensor rebuilt without a gradient graph is a leaf: a non-leaf saved with
``requires_grad`` comes back as a leaf that requires grad (as with ``torch.save``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from ipy_resume.runtime import torch_support

__all__ = ["rebuild_storage", "rebuild_tensor", "reducers", "storage_over"]

Reducer = Callable[[Any, Any], Any]
_NONE: dict[type, Reducer] = {}
_cached: tuple[object, dict[type, Reducer]] | None = None


def reducers() -> dict[type, Reducer]:
    """``{type: reducer}`` for the picklers (empty until the process imports torch).

    ``reducer(obj, pickler)`` returns what ``reducer_override`` returns, or None to let
    pickle go on.

    >>> isinstance(reducers(), dict)
    True
    """
    global _cached
    torch = torch_support.loaded()
    if torch is None:
        return _NONE
    if _cached is not None and _cached[0] is torch:
        return _cached[1]
    table: dict[type, Reducer] = {
        torch.Tensor: _reduce_tensor,
        torch.nn.Parameter: _reduce_tensor,
        torch.UntypedStorage: _reduce_storage,
    }
    _cached = (torch, table)
    return table


def _reduce_tensor(t: Any, pickler: Any) -> Any:
    if not torch_support.plain_tensor(t):
        return None
    torch = torch_support.loaded()
    assert torch is not None
    grad = t.grad if t.is_leaf else None  # (reading a non-leaf's .grad warns)
    state = dict(t.__dict__) or None
    args = (
        t.untyped_storage(),
        str(t.dtype).removeprefix("torch."),
        t.storage_offset(),
        tuple(t.shape),
        tuple(t.stride()),
        bool(t.requires_grad),
        type(t) is torch.nn.Parameter,
        grad,
        state,
    )
    return (rebuild_tensor, args)


def _reduce_storage(storage: Any, pickler: Any) -> Any:
    device = storage.device
    if device.type not in torch_support.DEVICE_TYPES:
        return None
    # The memory of a numpy array stored with it (``t = torch.from_numpy(a)``): a storage
    # over that array after the restore, so writes through one still show through the other.
    bases = getattr(pickler, "bases", None)
    base = bases.get(storage.data_ptr()) if bases and device.type == "cpu" else None
    if base is not None and base.nbytes == storage.nbytes() and storage.nbytes():
        return (storage_over, (base,))
    host = torch_support.host_storage(storage)
    data = pickle.PickleBuffer(torch_support.storage_bytes(host))  # type: ignore[arg-type]
    return (rebuild_storage, (data, str(device)))


def rebuild_storage(data: Any, device: str) -> Any:
    """A storage over *data* (a verified pickle buffer: no copy when it is writeable), put
    on *device* or where ``--map-location`` says.

    >>> import torch  # doctest: +SKIP
    >>> rebuild_storage(bytearray(8), "cpu").nbytes()  # doctest: +SKIP
    8
    """
    torch = _torch()
    target = torch_support.restore_device(device)
    view = memoryview(data)
    if view.nbytes == 0:
        storage = torch.UntypedStorage(0)
    else:
        if view.readonly:
            view = memoryview(bytearray(view))  # (torch wants memory it may write)
        storage = torch.frombuffer(view, dtype=torch.uint8).untyped_storage()
    if target != "cpu":
        flat = torch.empty(0, dtype=torch.uint8).set_(storage)
        storage = flat.to(target).untyped_storage()
    return storage


def storage_over(array: Any) -> Any:
    """The storage of a CPU tensor over all of *array*'s memory (no copy).

    >>> import numpy as np, torch  # doctest: +SKIP
    >>> a = np.zeros(2); storage_over(a).nbytes()  # doctest: +SKIP
    16
    """
    torch = _torch()
    memory = array.ravel(order="K").view("uint8")  # (the array is contiguous: a view)
    return torch.from_numpy(memory).untyped_storage()


def rebuild_tensor(
    storage: Any,
    dtype: str,
    offset: int,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    requires_grad: bool,
    parameter: bool,
    grad: Any,
    state: dict[str, Any] | None,
) -> Any:
    """The tensor viewing *storage* as :func:`_reduce_tensor` described it.

    >>> import torch  # doctest: +SKIP
    >>> s = rebuild_storage(bytearray(8), "cpu")  # doctest: +SKIP
    >>> rebuild_tensor(s, "float32", 1, (1,), (1,), False, False, None, None)  # doctest: +SKIP
    tensor([0.])
    """
    torch = _torch()
    kind = getattr(torch, dtype, None)
    if not isinstance(kind, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    t = torch.empty(0, dtype=kind, device=storage.device)
    t.set_(storage, offset, shape, stride)
    if parameter:
        t = torch.nn.Parameter(t, requires_grad=requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    if grad is not None:
        t.grad = grad
    if state:
        t.__dict__.update(state)
    return t


def _torch() -> Any:
    import torch  # (a stream that holds a tensor was written by a process that had it)

    return torch
