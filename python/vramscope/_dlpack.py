"""DLPack export and import of simulated CUDA tensors (`torch.utils.dlpack.to_dlpack`,
`torch.from_dlpack`, `Tensor.__dlpack__`), as PyTorch 2.11 makes them.

A capsule of a CUDA tensor shares its memory: `at::toDLPack` (aten/src/ATen/DLConvertor.cpp) wraps
the tensor itself in the capsule's manager (`ATenDLMTensor.handle`), so the tensor's storage lives
while the capsule does; `at::fromDLPack` makes a tensor over the same device pointer whose deleter
frees the manager (no allocation), and a consumed capsule no longer owns it. The host's kernels
refuse a meta tensor ("Cannot pack tensors on meta"), so for the twin's tensors a capsule is a
`Capsule` holding the tensor, and the import is an alias of it without autograd history
(`detach`: the same storage, nothing allocated), which keeps the storage as the GPU's deleter does.
"""

from __future__ import annotations

import torch

from . import _tensor


class Capsule:
    """A DLPack capsule of a simulated CUDA tensor: the exported tensor until `from_dlpack`
    consumes it (`ATenDLMTensor.handle`). Named as CPython's capsule type (`PyCapsule`, a builtin)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def __repr__(self) -> str:
        name = "dltensor" if self.tensor is not None else "used_dltensor"
        return f'<capsule object "{name}" at {id(self):#x}>'


Capsule.__module__, Capsule.__name__, Capsule.__qualname__ = "builtins", "PyCapsule", "PyCapsule"


def _export(real):
    """`torch._C._to_dlpack` / `_to_dlpack_versioned` (torch/csrc/Module.cpp) for the twin's tensors."""

    def to_dlpack(tensor, *args, **kwargs):
        if not _tensor.registered(tensor):
            return real(tensor, *args, **kwargs)
        dl_device = kwargs.get("dl_device")
        if kwargs.get("copy") or (
            dl_device is not None and tuple(dl_device) != tuple(tensor.__dlpack_device__())
        ):
            raise NotImplementedError(
                "vramscope: a DLPack export that copies or moves to another device is not modelled"
            )
        return Capsule(tensor)

    return to_dlpack


def _import(real):
    """`torch._C._from_dlpack` (torch/csrc/utils/tensor_new.cpp `tensor_fromDLPack`): a twin
    capsule's tensor as an alias, the capsule consumed."""

    def from_dlpack(data):
        if not isinstance(data, Capsule):
            return real(data)
        if data.tensor is None:
            raise RuntimeError(
                "from_dlpack received an invalid capsule. Note that DLTensor capsules can be consumed "
                "only once, so you might have already constructed a tensor from it once."
            )
        tensor, data.tensor = data.tensor, None
        with torch.no_grad():
            return tensor.detach()

    return from_dlpack


def patch(p) -> None:
    """Put the exports and the import in place, where PyTorch binds them (`torch.utils.dlpack`
    and `torch` import `_to_dlpack` by name; `Tensor.__dlpack__` and `from_dlpack` look theirs
    up on `torch._C` when called)."""
    import torch.utils.dlpack as dlpack

    export = _export(torch._C._to_dlpack)
    p.set(torch._C, "_to_dlpack", export)
    p.set(torch._C, "_to_dlpack_versioned", _export(torch._C._to_dlpack_versioned))
    p.set(dlpack, "to_dlpack", export)
    p.set(torch, "to_dlpack", export)
    p.set(torch._C, "_from_dlpack", _import(torch._C._from_dlpack))
