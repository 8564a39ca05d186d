"""Foreach and fused optimizer kernels: `_has_foreach_support`, `_foreach_norm`
(`native/cuda/ForeachReduceOp.cu`), `_fused_sgd_` (`FusedSgdKernel.cu`)."""

from __future__ import annotations

import math

import torch

from .._tensor import non_overlapping_and_dense as _non_overlapping_and_dense
from .._tensor import registered, set_value, tensors_in
from .reduce import _acc_bytes
from .registry import DISPATCH

aten = torch.ops.aten


# ---- foreach reductions -----------------------------------------------------------------------


def foreach_support(original):
    """`_has_foreach_support` / `_device_has_foreach_support` as on the GPU: simulated tensors'
    grouping device (meta) stands for cuda."""

    def supported(*args, **kwargs):
        if "device" in kwargs:
            args, kwargs = (*args, kwargs["device"]), {}
        device = args[-1]
        if isinstance(device, torch.device) and device.type == "meta":
            tensors = args[0] if len(args) > 1 else []
            if all(t is None or registered(t) for t in tensors):
                args = (*args[:-1], torch.device("cuda"))
        return original(*args)

    return supported


#: MultiTensorApply.cuh's kChunkSize (recalled; the GPU's 115,500-byte `_foreach_norm` scratch of
#: blind2/b05 is 75 tensors x 384 chunks of it x 4 bytes, test_foreach.py)
FOREACH_CHUNK = 65536


def _foreach_norm(cap, func, args, kwargs):
    """`foreach_tensor_norm_cuda_internal` (ForeachReduceOp.cu), fast route (`can_use_fast_route`:
    one dtype, every tensor non-overlapping and dense, channels-last included): `output_per_tensor`,
    zeros of ntensors x the longest tensor's chunks in the op-math type, then a 0-dim result per
    tensor; the scratch is freed when the op returns."""
    tensors = args[0]
    ord_ = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    if not tensors or not all(registered(t) for t in tensors) or float(ord_) not in (1.0, 2.0, math.inf):
        return NotImplemented
    if len({t.dtype for t in tensors}) != 1 or not all(_non_overlapping_and_dense(t) for t in tensors):
        return NotImplemented
    cap.ops += 1
    op = "aten::_foreach_norm"
    chunks = max(-(-t.numel() // FOREACH_CHUNK) for t in tensors)
    scratch = cap.malloc(len(tensors) * chunks * _acc_bytes(tensors[0].dtype), op, "temporary")
    out = func(*args, **kwargs)
    for t in out:
        cap.track(t, op)
    del scratch
    return out


DISPATCH[aten._foreach_norm.Scalar] = _foreach_norm


def _fused_sgd(cap, func, args, kwargs):
    """`torch._fused_sgd_` (native/cuda/FusedSgdKernel.cu), `SGD(fused=True)`'s step: in place
    over its lists through `multi_tensor_apply_for_fused_optimizer`, whose metadata goes as kernel
    arguments, so it allocates nothing (the momentum buffers are `torch.empty_like(grad)` in
    torch/optim/sgd.py's `_fused_sgd`, before it). PyTorch registers no meta kernel for it."""
    if not any(registered(t) for t in tensors_in((args, kwargs))):
        return NotImplemented
    cap.ops += 1
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = args[i] if i < len(args) else kwargs.get(a.name)
            for t in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(t, torch.Tensor) and registered(t):
                    set_value(t, None)


DISPATCH[aten._fused_sgd_.default] = _fused_sgd
DISPATCH[aten._fused_sgd_.tensor_lr] = _fused_sgd
