"""Fake CUDA tensors: shape, dtype, strides and storage, no data.

A `CudaTensor` wraps a meta tensor (`elem`) that holds its sizes, strides
and storage identity; PyTorch's own meta kernels compute every op's
outputs. Views share their base's `Storage`, whose allocation in the twin
is freed when the last tensor that uses it dies (CPython's reference
count, and the autograd graph's, as on the GPU).

Small tensors also carry their values (`val`, a CPU tensor), so that code
that reads a value (`.item()`, `if mask.any():`, `generate()`'s stopping
checks) takes the branch the GPU would; a tensor without values reads as
zeros (see `docs/run.md`).
"""

from __future__ import annotations

import torch

CUDA0 = torch.device("cuda", 0)


class Storage:
    """One allocation in the twin: the storage of one or more CudaTensors."""

    __slots__ = ("__weakref__", "handle", "nbytes", "owner")

    def __init__(self, owner, nbytes: int, handle):
        self.owner = owner
        self.nbytes = nbytes
        self.handle = handle

    def __del__(self):
        h = self.handle
        if h is not None:
            self.handle = None
            owner = self.owner
            if owner is not None and owner.active:
                owner.free(h)


class CudaTensor(torch.Tensor):
    """A tensor on the simulated GPU (`device` reads `cuda:0`)."""

    elem: torch.Tensor
    storage_: Storage
    val: torch.Tensor | None

    @staticmethod
    def __new__(cls, elem: torch.Tensor, storage: Storage, val=None):
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device="meta",
            requires_grad=False,
        )
        r.elem = elem
        r.storage_ = storage
        r.val = val
        return r

    def __init__(self, *args, **kwargs):
        pass

    @property
    def device(self):
        return CUDA0

    @property
    def is_cuda(self):
        return True

    @property
    def is_meta(self):
        return False

    @property
    def is_cpu(self):
        return False

    def get_device(self):
        return 0

    def data_ptr(self):
        return 0

    def __repr__(self, *, tensor_contents=None):
        grad = ""
        if self.grad_fn is not None:
            grad = f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            grad = ", requires_grad=True"
        return f"tensor(..., device='cuda:0', size={tuple(self.shape)}, dtype={self.dtype}{grad})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from . import _capture

        cap = _capture.current()
        if cap is None:
            raise RuntimeError(
                f"vramscope: {func} on a simulated CUDA tensor outside the capture that made it"
            )
        return cap.dispatch(func, args, kwargs or {})
