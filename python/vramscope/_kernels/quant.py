"""Fake quantization (`aten/src/ATen/native/quantized/FakeQuantPerTensorAffine.cpp`,
`quantized/cuda/FusedObsFakeQuant.cu`)."""

from __future__ import annotations

import math

import torch

from .._tensor import registered
from .reduce import reduce_scratch
from .registry import DISPATCH
from .storage import _resize

aten = torch.ops.aten


def _fake_quantize_cachemask(cap, func, args, kwargs):
    """`fake_quantize_per_{tensor,channel}_affine_cachemask` (quantized/FakeQuantPerTensorAffine.cpp,
    FakeQuantPerChannelAffine.cpp): `empty_like(self)` and a bool `empty_like` mask, both in the
    input's preserved layout, filled by one kernel. Per channel, an integer zero point is first
    checked against the range by `at::aminmax(zero_point)`, whose two 0-dim results die before the
    outputs (blind169/fm04's H200 per-op truth: the FFN weights' unfused FakeQuantize, 2 x 4 bytes
    beside a (3072, 768) float32's outputs)."""
    x = args[0]
    if not registered(x) or kwargs:
        return NotImplemented
    cap.ops += 1
    zp = args[2] if func is aten.fake_quantize_per_channel_affine_cachemask.default else None
    if registered(zp) and not zp.is_floating_point() and zp.numel() > 0:
        op = func._schema.name
        zp_min = cap.malloc(zp.element_size(), op, "temporary")
        zp_max = cap.malloc(zp.element_size(), op, "temporary")
        reduce_scratch(
            cap, list(zp.shape), None, [True] * zp.dim(), zp.element_size(), 2 * zp.element_size(), op
        )
        del zp_max, zp_min
    with cap._modes[1]:
        y = torch.empty_like(x, memory_format=torch.preserve_format)
        mask = torch.empty_like(x, dtype=torch.bool, memory_format=torch.preserve_format)
    return y, mask


DISPATCH[aten.fake_quantize_per_tensor_affine_cachemask.default] = _fake_quantize_cachemask
DISPATCH[aten.fake_quantize_per_channel_affine_cachemask.default] = _fake_quantize_cachemask
# FakeQuantize's per-tensor path with tensor qparams (`fake_quantize_per_tensor_affine` given a
# scale tensor): the same two outputs, `fake_quant_enabled.item()` read on the host, no scratch
# (blind169/fm04's H200 per-op truth lists no allocation beyond them)
DISPATCH[aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default] = _fake_quantize_cachemask


def _fake_quantize_learnable_per_tensor(cap, func, args, kwargs):
    """`_fake_quantize_learnable_per_tensor_affine` (quantized/FakeQuantPerTensorAffine.cpp): the scale
    and zero point read on the host (`scale[0].item()`), then `fake_quantize_per_tensor_affine`, which
    is `fake_quantize_per_tensor_affine_cachemask` keeping only its output: the bool mask in the
    input's layout dies at the return. The op has no meta kernel, so the twin makes its output here
    rather than from a CPU run."""
    x = args[0]
    if not registered(x) or kwargs:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        y = torch.empty_like(x, memory_format=torch.preserve_format)
        mask = torch.empty_like(x, dtype=torch.bool, memory_format=torch.preserve_format)
        del mask
    return y


def _fake_quantize_learnable_per_tensor_backward(cap, func, args, kwargs):
    """`_fake_quantize_learnable_per_tensor_affine_backward` (FakeQuantPerTensorAffine.cpp): dX and
    the per-element scale and zero-point gradients, three `empty_like(X)` in X's layout filled by one
    TensorIterator kernel, then `dScale_vec.sum().unsqueeze(0)` and the same for the zero point (0-dim
    sums with their reduction's scratch); the two vectors die at the return."""
    dy, x = args[0], args[1]
    if not registered(x) or not registered(dy) or kwargs:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        dx = torch.empty_like(x, memory_format=torch.preserve_format)
        d_scale_vec = torch.empty_like(x, memory_format=torch.preserve_format)
        d_zero_vec = torch.empty_like(x, memory_format=torch.preserve_format)
        d_scale = d_scale_vec.sum().unsqueeze(0)
        d_zero = d_zero_vec.sum().unsqueeze(0)
        del d_scale_vec, d_zero_vec
    return dx, d_scale, d_zero


DISPATCH[aten._fake_quantize_learnable_per_tensor_affine.default] = _fake_quantize_learnable_per_tensor
DISPATCH[aten._fake_quantize_learnable_per_tensor_affine_backward.default] = (
    _fake_quantize_learnable_per_tensor_backward
)


def _fake_quantize_learnable_per_channel(cap, func, args, kwargs):
    """`_fake_quantize_learnable_per_channel_affine` (quantized/FakeQuantPerChannelAffine.cpp):
    `zero_point.round().clamp_(quant_min, quant_max).to(kInt)`, then
    `fake_quantize_per_channel_affine_cachemask` over it (the zero point's `aminmax` check, the
    output and the bool mask in the input's layout), keeping only the output: the mask dies at the
    return. No meta kernel: without this rule the twin sized it by a CPU run, named it unmeasured
    and missed the mask (LSQ-style per-channel QAT)."""
    x, scale, zero_point, axis, quant_min, quant_max = args[:6]
    if not registered(x) or kwargs:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        zp = zero_point.round().clamp_(quant_min, quant_max).to(torch.int32)
        y, mask = aten.fake_quantize_per_channel_affine_cachemask.default(
            x, scale, zp, axis, quant_min, quant_max
        )
        del mask, zp
    return y


def _fake_quantize_learnable_per_channel_backward(cap, func, args, kwargs):
    """`_fake_quantize_learnable_per_channel_affine_backward` (FakeQuantPerChannelAffine.cpp):
    bfloat16 operands copied to float32; the zero point rounded and clamped (alive to the return),
    its `at::min(...).item()` and `at::max(...).item()` read on the host inside the TORCH_CHECK,
    which frees both at its end (mx64's probe on the H100: the two 4-byte frees before dX); dX and
    the per-element scale and zero-point gradients, three `empty_like(X_)` in X's layout filled by
    one TensorIterator kernel, then each vector summed over every dim but `axis`; the vectors and
    copies die at the return."""
    dy, x, scale, zero_point, axis, quant_min, quant_max = args[:7]
    if not registered(x) or not registered(dy) or kwargs:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        bf16 = x.dtype == torch.bfloat16
        x_, dy_, scale_, zp_ = (t.float() if bf16 else t for t in (x, dy, scale, zero_point))
        rounded = zp_.round().clamp_(quant_min, quant_max)
        zp_min, zp_max = torch.aminmax(rounded)
        del zp_min, zp_max
        if x_.numel() <= 0:
            return x, scale, zero_point
        dx = torch.empty_like(x_, memory_format=torch.preserve_format)
        d_scale_vec = torch.empty_like(x_, memory_format=torch.preserve_format)
        d_zero_vec = torch.empty_like(x_, memory_format=torch.preserve_format)
        dims = [d for d in range(x_.dim()) if d != axis]
        d_scale = d_scale_vec.sum(dims)
        d_zero = d_zero_vec.sum(dims)
        del d_scale_vec, d_zero_vec, rounded, x_, dy_, scale_, zp_
    return dx, d_scale, d_zero


DISPATCH[aten._fake_quantize_learnable_per_channel_affine.default] = _fake_quantize_learnable_per_channel
DISPATCH[aten._fake_quantize_learnable_per_channel_affine_backward.default] = (
    _fake_quantize_learnable_per_channel_backward
)


_FUSED_OBS_FQ = (
    "self",
    "observer_on",
    "fake_quant_on",
    "running_min",
    "running_max",
    "scale",
    "zero_point",
    "averaging_const",
    "quant_min",
    "quant_max",
    "ch_axis",
    "per_row_fake_quant",
    "symmetric_quant",
)


def _fused_obs_fake_quant(cap, func, args, kwargs):
    """`fused_moving_avg_obs_fake_quant_cuda` (quantized/cuda/FusedObsFakeQuant.cu), QAT's observer
    and fake quantization in one op. Per tensor: `aminmax(x)`'s two 0-dim results and its
    reduction's scratch, dead before the outputs. Per channel (weights): the observer's empty
    buffers first grown to the channels (`resize_`: min, max, scale, zero point), `aminmax(y, 1)`'s
    two per-channel results, dead before `fake_quantize_per_channel_affine_cachemask` checks the
    zero points (`zero_point.min()` and `.max()`, two 0-dim int32 results alive together); then the
    outputs (blind62/bj06's H200 history)."""
    a = dict(zip(_FUSED_OBS_FQ, args, strict=False))
    a.update(kwargs)
    x = a["self"]
    per_row = bool(a.get("per_row_fake_quant", False))
    if not registered(x) or (per_row and not x.is_contiguous()):
        return NotImplemented
    op = func._schema.name
    # `const auto x_contig = x.contiguous()` first, alive to the return: a non-contiguous
    # activation (DistilBERT's `hidden_state[:, 0]` into pre_classifier) is copied, and the
    # per-tensor observer reduces the copy (blind169/fm04's H200 per-op truth: (32, 768) of
    # strides (196608, 1), 98,304 bytes more beside the outputs)
    x_contig = None if x.is_contiguous() else cap.malloc(x.numel() * x.element_size(), op, "temporary")
    if per_row:
        ch = a["ch_axis"]
        if ch != 0:
            return NotImplemented
        size = x.shape[ch]
        if a["running_min"].numel() == 0:
            for name in ("running_min", "running_max", "scale", "zero_point"):
                _resize(cap, aten.resize_.default, (a[name], [size]), {})
        rows = math.prod(x.shape[1:])
        x_min = cap.malloc(size * 4, op, "temporary")
        x_max = cap.malloc(size * 4, op, "temporary")
        reduce_scratch(cap, [size, rows], None, [False, True], x.element_size(), 8, op)
        del x_min, x_max
        zp = a["zero_point"]
        low = cap.malloc(zp.element_size(), op, "temporary")
        high = cap.malloc(zp.element_size(), op, "temporary")
        del low, high
    else:
        x_min = cap.malloc(4, op, "temporary")
        x_max = cap.malloc(4, op, "temporary")
        reduce_scratch(cap, list(x.shape), None, [True] * x.dim(), x.element_size(), 8, op)
        del x_min, x_max
    ours = [t for t in args if registered(t)] + [t for t in kwargs.values() if registered(t)]
    out = cap.run(func, args, kwargs, ours)
    del x_contig
    return out


DISPATCH[aten._fused_moving_avg_obs_fq_helper.default] = _fused_obs_fake_quant
