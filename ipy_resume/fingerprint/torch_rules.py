"""PyTorch: tensors by their raw bytes and view, storages once, generators by state.

Consulted only while torch is imported.  A tensor (``Tensor`` or ``Parameter``) is digested
from its class, dtype, shape, strides, storage offset, device and ``requires_grad``, its
gradient, its Python attributes and its storage; a storage (the memory several tensors
may view: tied weights, views, an optimizer's reference to a parameter) from its device,
size and bytes, hashed with xxh3 once per fingerprint however many tensors view it, and
in place on the CPU (no copy, no pickling).  A restored storage that is still the
unwritten map of its blob is not hashed again (see :mod:`ipy_resume.runtime.pages`).

A storage on a CUDA or MPS device is digested on the device (:func:`torch_support.device_digest`:
16 bytes cross to the host), untested on a GPU: no CUDA or MPS machine has run it.

A ``torch.Generator`` the notebook holds is digested from its device and state, so drawing
from it changes the value, like numpy's ``Generator``; torch's default generator is
torch's own object (keyed by reference; its state is the RNG state a checkpoint records).

Tensors that are not plain strided memory (sparse, quantized, nested, meta) and tensor
subclasses take the generic rule (``__reduce_ex__``).
"""

from __future__ import annotations

from typing import Any

import xxhash

from ..runtime import modrefs, pages, torch_support
from .core import CALL_MEMO, Fingerprinter, Rule, add_provider
from .primitives import NONE_DIGEST, hash128, pack_u64
from .reduce import c_reduce


def _c_tensor(fp: Fingerprinter, t: Any) -> bytes:
    if not torch_support.plain_tensor(t):
        return c_reduce(fp, t)
    grad = t.grad if t.is_leaf else None  # (reading a non-leaf's .grad warns)
    state = t.__dict__
    view = (
        f"{t.dtype}|{t.device}|{int(t.requires_grad)}".encode()
        + pack_u64(t.storage_offset())
        + pack_u64(t.dim())
        + b"".join(pack_u64(n) for n in t.shape)
        + b"".join(pack_u64(s % (1 << 64)) for s in t.stride())
    )
    return hash128(
        b"torch.Tensor\0"
        + fp.digest_child(type(t))
        + hash128(view)
        + fp.digest_child(t.untyped_storage())
        + (NONE_DIGEST if grad is None else fp.digest_child(grad))
        + (NONE_DIGEST if not state else fp.digest_child(state))
    )


def _c_storage(fp: Fingerprinter, storage: Any) -> bytes:
    device = storage.device
    if device.type not in torch_support.DEVICE_TYPES:
        return c_reduce(fp, storage)
    nbytes = storage.nbytes()

    def raw() -> bytes:
        return xxhash.xxh3_128(torch_support.memory_of(storage)).digest()

    if device.type != "cpu":
        inner = torch_support.device_digest(storage)  # on the device (untested on a GPU)
    elif nbytes >= pages.MEMO_MIN and pages.active():
        # a restored storage mapped from the store: its blob's checksum, verified when it was
        # mapped, and hashed again only once a page of it is written
        inner = pages.digest(storage.data_ptr(), nbytes, pages.RAW_TAG, raw)
    else:
        inner = raw()
    return hash128(
        b"torch.UntypedStorage\0" + str(device).encode() + b"\0" + pack_u64(nbytes) + inner
    )


def _c_generator(fp: Fingerprinter, g: Any) -> bytes:
    if modrefs.lookup(g) is not None:
        return c_reduce(fp, g)  # torch.default_generator: torch's own, by reference
    state = g.get_state()
    return hash128(
        b"torch.Generator\0"
        + str(g.device).encode()
        + b"\0"
        + hash128(torch_support.storage_bytes(state.untyped_storage()).tobytes())
    )


def _torch_rule(t: type) -> Rule | None:
    torch = torch_support.loaded()
    if torch is None:
        return None
    if t is torch.Tensor or t is torch.nn.Parameter:
        return (_c_tensor, CALL_MEMO)
    if t is torch.UntypedStorage:
        return (_c_storage, CALL_MEMO)
    generator = getattr(torch, "Generator", None)
    if isinstance(generator, type) and issubclass(t, generator):
        return (_c_generator, CALL_MEMO)
    return None


add_provider(_torch_rule, order=22, requires="torch")
