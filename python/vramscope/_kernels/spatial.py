"""Spatial kernels: `im2col`/`col2im`, reflection padding, upsampling, pooling backwards and grid
sampling (`native/cuda/Im2Col.cu`, `ReflectionPad.cu`, `UpSample*.cu`, `*Pool*.cu`, `GridSampler*`)."""

from __future__ import annotations

import torch

from .._tensor import registered
from .conv import _cl_format, _copy_unless_in, _suggests_channels_last
from .matmul import _temp
from .registry import AFTER, DISPATCH, FUNCTIONS, SCRATCH_UNMODELLED

aten = torch.ops.aten


def _raises_not_deterministic() -> bool:
    """Whether `globalContext().alertNotDeterministic` raises (deterministic algorithms on, without
    `warn_only`): a kernel that alerts before its copies makes none."""
    return (
        torch.are_deterministic_algorithms_enabled()
        and not torch.is_deterministic_algorithms_warn_only_enabled()
    )


def _im2col(cap, func, args, kwargs):
    """`im2col` / `col2im` on CUDA (`native/cuda/Im2Col.cu`, `Col2Im.cu`; `F.unfold`, `F.fold` and
    each other's backward): the output starts as `empty_like(input)`, the input is made contiguous,
    then `output.resize_` to the result's size, which takes a new block (and frees the first) only
    when it grows: col2im's result keeps the input-sized storage (blind36/aj06's H200 record)."""
    x = args[0]
    if not registered(x):
        return NotImplemented
    cap.ops += 1
    op = f"aten::{func._schema.name.split('::')[-1]}"
    out = func(*args, **kwargs)
    first = x.numel() * x.element_size()
    final = out.numel() * out.element_size()
    if final <= first:
        cap.track(out, op, nbytes=first)
        contiguous = None if x.is_contiguous() else cap.malloc(first, op, "temporary")
    else:
        initial = cap.malloc(first, op, "temporary")
        contiguous = None if x.is_contiguous() else cap.malloc(first, op, "temporary")
        cap.track(out, op, nbytes=final)
        del initial
    del contiguous
    return out


DISPATCH[aten.im2col.default] = _im2col
DISPATCH[aten.col2im.default] = _im2col


def _reflection_pad(cap, func, args, kwargs):
    """`reflection_pad{1,2,3}d` and the 1-D/2-D backwards on CUDA (native/cuda/ReflectionPad.cu): the
    result first, then the kernel's `input_.contiguous()` (forward) or `grad_output_.contiguous()`
    (backward), a copy of an operand that is not contiguous, freed at the return; the 3-D backward
    reads strided operands through packed accessors (blind75/bw02's H200 per-op truth: EnCodec's
    padded slices)."""
    x = args[0]
    if not registered(x):
        return NotImplemented
    cap.ops += 1
    op = f"aten::{func._schema.name.split('::')[-1]}"
    out = cap.track(func(*args, **kwargs), op)
    copy = None if x.is_contiguous() else cap.malloc(x.numel() * x.element_size(), op, "temporary")
    del copy
    return out


for _pad in (
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    aten.reflection_pad1d_backward.default,
    aten.reflection_pad2d_backward.default,
):
    DISPATCH[_pad] = _reflection_pad


def _upsample_nearest2d(cap, func, call, outs):
    """`upsample_nearest2d_out_cuda_template` and its backward (cuda/UpSampleNearest2d.cu; the exact
    variant's too). Nothing for an empty result or where the sizes match (a straight copy). A
    channels-last input (gradient, backward) of 4 channels or more into a channels-last result runs
    the NHWC kernel over `contiguous(ChannelsLast)`, a copy where it is not (blind8/h07: a `cat`
    slice's gradient); otherwise ("heuristic: only use channels_last path when it's faster than the
    contiguous path") a plain `at::empty` stands in for a result that is not contiguous (the
    structured kernel's, in the input's suggested format: a channels-last one of 2 or 3 channels)
    and the input is made `contiguous()`, both after the result and freed at the return."""
    (args, _kw) = call
    src, out = args[0], outs[0]
    if not registered(src) or out.numel() == 0 or src.numel() == 0 or tuple(src.shape) == tuple(out.shape):
        return
    if (
        _suggests_channels_last(src)
        and src.size(1) >= 4
        and out.is_contiguous(memory_format=torch.channels_last)
    ):
        copy = (
            None
            if src.is_contiguous(memory_format=torch.channels_last)
            else _temp(cap, src, func._schema.name)
        )
        del copy
        return
    stand_in = None if out.is_contiguous() else _temp(cap, out, func._schema.name)
    copy = None if src.is_contiguous() else _temp(cap, src, func._schema.name)
    del copy, stand_in


for _f in (
    aten.upsample_nearest2d.default,
    aten.upsample_nearest2d_backward.default,
    aten._upsample_nearest_exact2d.default,
    aten._upsample_nearest_exact2d_backward.default,
):
    AFTER[_f] = _upsample_nearest2d
SCRATCH_UNMODELLED.discard("aten::upsample_nearest2d_backward")


def _upsample_nearest3d(cap, func, call, outs):
    """`upsample_nearest3d_out_cuda_template` (cuda/UpSampleNearest3d.cu), which has no
    channels-last kernel: `output_c`, a contiguous `at::empty` of the output's sizes where the
    structured kernel's output (in the input's suggested format) is not contiguous, then
    `input_.contiguous()`; the kernel writes `output_c`, copied into the output, both freed at the
    return (blind186/gd02's H200 record: a bf16 channels_last_3d (8, 256, 4, 16, 16) upsampled by
    (1, 2, 2), three allocations, 16,777,216 + 16,777,216 + 4,194,304 bytes requested)."""
    (args, _kw) = call
    src, out = args[0], outs[0]
    if not registered(src) or out.numel() == 0:
        return
    temps = [_temp(cap, out, func._schema.name)] if not out.is_contiguous() else []
    if not src.is_contiguous():
        temps.append(_temp(cap, src, func._schema.name))
    del temps


for _f in (aten.upsample_nearest3d.default, aten._upsample_nearest_exact3d.default):
    AFTER[_f] = _upsample_nearest3d


def _upsample_nearest3d_backward(cap, func, call, outs):
    """`upsample_nearest3d_backward_out_cuda_template` (cuda/UpSampleNearest3d.cu):
    `grad_output_.contiguous()` in the plain format, after the structured kernel's (contiguous)
    input gradient and freed at the return (blind211/hc01's H200 per-op truth: the gradient of a
    causal VAE's temporal `cat` slice, (2, 128, 8, 32, 32) float32 at offset 131,072, copied:
    8,388,608 bytes beside the 4,194,304-byte result)."""
    grad = call[0][0]
    if registered(grad) and not grad.is_contiguous():
        copy = _temp(cap, grad, func._schema.name)
        del copy


for _f in (aten.upsample_nearest3d_backward.default, aten._upsample_nearest_exact3d_backward.default):
    AFTER[_f] = _upsample_nearest3d_backward


def _upsample_1d_copy(cap, func, call, outs):
    """The 1-D upsampling kernels' one copy: `input_.contiguous()` in `upsample_nearest1d`'s
    forward (cuda/UpSampleNearest1d.cu) and `grad_output_.contiguous()` in the nearest and linear
    backwards (UpSampleNearest1d.cu, UpSampleLinear1d.cu), of an operand that is not contiguous,
    after the structured kernel's contiguous result, freed at the return; linear1d's forward reads
    its input through packed accessors (blind289/kd03: DDSP's `F.interpolate` of permuted controls
    and the gradient of the permuted result). The linear backward alerts under deterministic
    algorithms before its copy (`alertNotDeterministic` first in its impl): no copy where it raises."""
    src = call[0][0]
    if func is aten.upsample_linear1d_backward.default and _raises_not_deterministic():
        return
    if registered(src) and not src.is_contiguous():
        copy = _temp(cap, src, func._schema.name)
        del copy


for _f in (
    aten.upsample_nearest1d.default,
    aten._upsample_nearest_exact1d.default,
    aten.upsample_nearest1d_backward.default,
    aten._upsample_nearest_exact1d_backward.default,
    aten.upsample_linear1d_backward.default,
):
    AFTER[_f] = _upsample_1d_copy


def _adaptive_avg_pool2d(cap, func, args, kwargs):
    """`adaptive_avg_pool2d_cuda` (cuda/AdaptiveAveragePooling.cu): a 4-D input that suggests the
    contiguous format is made `contiguous()` before the result is resized (the `at::empty({0})`
    output takes its storage after the copy), the copy freed at the return; a 3-D or channels-last
    input is read through its strides. (`F.adaptive_avg_pool2d` to 1 x 1 is a `mean` instead.)"""
    x = args[0]
    if not registered(x) or kwargs or x.dim() != 4 or x.numel() == 0 or x.is_contiguous():
        return NotImplemented
    if _suggests_channels_last(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::_adaptive_avg_pool2d"
    copy = _temp(cap, x, op)
    out = cap.track(func(*args), op)
    del copy
    return out


DISPATCH[aten._adaptive_avg_pool2d.default] = _adaptive_avg_pool2d


def _adaptive_avg_pool2d_backward(cap, func, call, outs):
    """`adaptive_avg_pool2d_backward_cuda` (cuda/AdaptiveAveragePooling.cu): after the input gradient
    (`zeros_like`, contiguous), an input that suggests the contiguous format takes
    `gradOutput_.contiguous()`, a copy of a strided gradient freed at the return; the channels-last
    kernel reads the gradient through its strides."""
    (args, _kw) = call
    grad, src = args[0], args[1]
    if not registered(grad) or outs[0].numel() == 0 or grad.is_contiguous() or _suggests_channels_last(src):
        return
    copy = _temp(cap, grad, func._schema.name)
    del copy


AFTER[aten._adaptive_avg_pool2d_backward.default] = _adaptive_avg_pool2d_backward


def _adaptive_avg_pool3d(cap, func, args, kwargs):
    """`adaptive_avg_pool3d_out_cuda_template` (cuda/AdaptiveAveragePooling3d.cu): a 5-D input is
    bound as `input_.contiguous()` before the `at::empty({0})` output is resized, the copy of a
    strided one freed at the return; a 4-D input is read through its strides."""
    x = args[0]
    if not registered(x) or kwargs or x.dim() != 5 or x.is_contiguous():
        return NotImplemented
    cap.ops += 1
    op = "aten::_adaptive_avg_pool3d"
    copy = _temp(cap, x, op)
    out = cap.track(func(*args), op)
    del copy
    return out


DISPATCH[aten._adaptive_avg_pool3d.default] = _adaptive_avg_pool3d


def _adaptive_avg_pool3d_backward(cap, func, call, outs):
    """`adaptive_avg_pool3d_backward_cuda` (cuda/AdaptiveAveragePooling3d.cu): after its alert and
    the `empty_like` input gradient, `gradOutput_.contiguous()` of a strided gradient, freed at the
    return."""
    grad = call[0][0]
    if registered(grad) and not grad.is_contiguous() and not _raises_not_deterministic():
        copy = _temp(cap, grad, func._schema.name)
        del copy


AFTER[aten._adaptive_avg_pool3d_backward.default] = _adaptive_avg_pool3d_backward


def _adaptive_max_pool3d(cap, func, call, outs):
    """`adaptive_max_pool3d_out_cuda` (cuda/AdaptiveMaxPooling3d.cu), after the structured kernel's
    output and indices and nothing for an empty input or output: a 5-D input is bound as
    `input.contiguous()`, the copy of a strided one freed at the return; a 4-D one is read through
    its strides."""
    x = call[0][0]
    if not registered(x) or x.numel() == 0 or outs[0].numel() == 0 or x.dim() != 5:
        return
    if not x.is_contiguous():
        copy = _temp(cap, x, func._schema.name)
        del copy


AFTER[aten.adaptive_max_pool3d.default] = _adaptive_max_pool3d


def _adaptive_max_pool3d_backward(cap, func, call, outs):
    """`adaptive_max_pool3d_backward_out_cuda` (cuda/AdaptiveMaxPooling3d.cu), after the structured
    kernel's input gradient and nothing for an empty gradient: `gradOutput.contiguous()`, freed at
    the return (the indices are read as they are)."""
    grad = call[0][0]
    if registered(grad) and grad.numel() > 0 and not grad.is_contiguous():
        copy = _temp(cap, grad, func._schema.name)
        del copy


AFTER[aten.adaptive_max_pool3d_backward.default] = _adaptive_max_pool3d_backward


def _adaptive_max_pool2d(cap, func, call, outs):
    """`adaptive_max_pool2d_out_cuda` (cuda/AdaptiveMaxPooling2d.cu), after the structured kernel's
    outputs (in the input's suggested format): a contiguous `at::empty` stand-in for each output
    that is not contiguous (a channels-last input's), then for a 4-D input `input.contiguous()`,
    freed at the end of its branch; the stand-ins, copied back, die at the return. Nothing for an
    empty input (blind172/fp03's H200 per-op truth: a channels-last (1024, 256, 3, 3) input pooled to
    1 x 1, one copy of 9,437,184 bytes beside the outputs)."""
    x = call[0][0]
    if not registered(x) or x.numel() == 0:
        return
    op = func._schema.name
    stand_ins = [_temp(cap, t, op) for t in outs[:2] if not t.is_contiguous()]
    if x.dim() == 4 and not x.is_contiguous():
        copy = _temp(cap, x, op)
        del copy
    while stand_ins:
        stand_ins.pop()


AFTER[aten.adaptive_max_pool2d.default] = _adaptive_max_pool2d


def _adaptive_max_pool2d_backward(cap, func, call, outs):
    """`adaptive_max_pool2d_backward_out_cuda` (cuda/AdaptiveMaxPooling2d.cu), after the structured
    kernel's input gradient and its `alertNotDeterministic` (no copies where that raises):
    `gradOutput.contiguous()`, `indices.contiguous()` and a contiguous stand-in for an input
    gradient that is not (a channels-last input's), all freed at the return. Nothing for an empty
    gradient (H200 per-op truth: blind172/fp03's stand-in, 9,437,184 bytes; blind162/ff04's and
    blind183/ga03's gradient, a slice of DGCNN's `cat`, copied)."""
    (args, _kw) = call
    grad, indices = args[0], args[2]
    if not registered(grad) or grad.numel() == 0:
        return
    if _raises_not_deterministic():
        return
    op = func._schema.name
    temps = [_temp(cap, t, op) for t in (grad, indices, outs[0]) if not t.is_contiguous()]
    while temps:
        temps.pop()


AFTER[aten.adaptive_max_pool2d_backward.default] = _adaptive_max_pool2d_backward


def _upsample_trilinear3d_backward(cap, func, call, outs):
    """`upsample_trilinear3d_backward_out_cuda_template` (cuda/UpSampleTrilinear3d.cu), after the
    structured kernel's input gradient and its `alertNotDeterministic` (no copy where that
    raises): `grad_output_.contiguous()`, freed at the return (blind227/hs04's H200 per-op truth:
    UNETR's channels-last-3d (1, 768, 8, 8, 8) gradient copied, 1,572,864 bytes, and no more: the
    C++ meta function's input gradient is contiguous, so its `grad_input_.contiguous()` copies
    nothing, where the twin's meta kernel gives it the gradient's channels-last-3d strides; the
    forward reads its input through packed accessors)."""
    grad = call[0][0]
    if not registered(grad):
        return
    if _raises_not_deterministic():
        return
    op = func._schema.name
    if not grad.is_contiguous():
        copy = _temp(cap, grad, op)
        del copy


AFTER[aten.upsample_trilinear3d_backward.default] = _upsample_trilinear3d_backward


def _avg_pool3d(cap, func, call, outs):
    """`avg_pool3d_out_cuda` (cuda/AveragePool3d.cu): `work_input = input.contiguous()` after the
    structured kernel's output, freed at the return (blind199/gq06's H200 per-op truth: a
    channels-last-3d (16, 1024, 2, 7, 7) bfloat16 input pooled whole, one copy of 3,211,264 bytes);
    its backward, after its `alertNotDeterministic` (no copy where that raises), takes
    `gradOutput.contiguous()`."""
    (args, _kw) = call
    backward = func is aten.avg_pool3d_backward.default
    src = args[0]
    if not registered(src) or outs[0].numel() == 0 or src.is_contiguous():
        return
    if backward and _raises_not_deterministic():
        return
    copy = _temp(cap, src, func._schema.name)
    del copy


AFTER[aten.avg_pool3d.default] = _avg_pool3d
AFTER[aten.avg_pool3d_backward.default] = _avg_pool3d


def _pool2d_forward(cap, func, call, outs):
    """`avg_pool2d_out_cuda` (cuda/AveragePool2d.cu) and `max_pool2d_with_indices_out_cuda`
    (cuda/DilatedMaxPool2d.cu): `input_.contiguous(input_.suggest_memory_format())` after the
    structured kernel's output (and indices), freed at the return; the max pool returns first on an
    empty output (blind211/hc01's H200 per-op truth: `avg_pool1d` over a permuted reshape, a
    (65536, 128, 1, 8) float32 input strided (1, 524288, 524288, 65536) copied, 268,435,456 bytes
    beside its 134,217,728-byte output)."""
    src = call[0][0]
    if not registered(src) or outs[0].numel() == 0:
        return
    fmt = torch.channels_last if _suggests_channels_last(src) else torch.contiguous_format
    if not src.is_contiguous(memory_format=fmt):
        copy = _temp(cap, src, func._schema.name)
        del copy


AFTER[aten.avg_pool2d.default] = _pool2d_forward
AFTER[aten.max_pool2d_with_indices.default] = _pool2d_forward


def _pool2d_backward(cap, func, call, outs):
    """`avg_pool2d_backward_out_cuda` (cuda/AveragePool2d.cu) and
    `max_pool2d_with_indices_backward_out_cuda` (cuda/DilatedMaxPool2d.cu):
    `input_.contiguous(memory_format)` and `gradOutput_.contiguous(memory_format)` in the input's
    suggested format, after the structured kernel's gradient and freed at the return (the gradient
    of a `cat`'s slice, copied: blind55/bc01's and blind102/cx06's H200 records)."""
    (args, _kw) = call
    grad, src = args[0], args[1]
    if not (registered(grad) and registered(src)) or outs[0].numel() == 0:
        return
    fmt = torch.channels_last if _suggests_channels_last(src) else torch.contiguous_format
    copies = [_temp(cap, t, func._schema.name) for t in (src, grad) if not t.is_contiguous(memory_format=fmt)]
    del copies


AFTER[aten.avg_pool2d_backward.default] = _pool2d_backward
AFTER[aten.max_pool2d_with_indices_backward.default] = _pool2d_backward


def _max_pool3d_backward(cap, func, call, outs):
    """`max_pool3d_with_indices_backward_out_cuda_template` (cuda/DilatedMaxPool3d.cu): after the
    input gradient, `gradOutput.contiguous()` then `indices.contiguous()`, in `ChannelsLast3d`
    where a 5-D input suggests it (a 4-D input: unsqueezed, where that is contiguous only in
    `ChannelsLast3d`), freed at the return; nothing for an empty gradient (blind199/gq04's H200
    record: a SlowFast slow pathway's max-pooled (8, 64, 4, 40, 40) fp16 output whose gradient is
    a slice of the lateral `cat`'s, one copy of 6,553,600 bytes)."""
    (args, _kw) = call
    grad, src, indices = args[0], args[1], args[7]
    if not registered(grad) or grad.numel() == 0:
        return
    cl, (grad, indices) = _max_pool3d_layout(src, grad, indices)
    copies = [_copy_unless_in(cap, t, cl) for t in (grad, indices) if registered(t)]
    del copies


AFTER[aten.max_pool3d_with_indices_backward.default] = _max_pool3d_backward


def _max_pool3d_layout(src, *ts):
    """DilatedMaxPool3d.cu's `channels_last`: a 5-D input that suggests `ChannelsLast3d`, or a 4-D
    one whose unsqueezed view is contiguous only in `ChannelsLast3d` (its tensors then unsqueezed,
    "work around buggy behavior of suggest_memory_format"); returns it and the tensors as read."""
    if src.dim() == 5:
        return _suggests_channels_last(src), ts
    u = src.unsqueeze(0)
    cl = not u.is_contiguous() and u.is_contiguous(memory_format=torch.channels_last_3d)
    return cl, tuple(t.unsqueeze(0) for t in ts) if cl else ts


def _max_pool3d(cap, func, call, outs):
    """`max_pool3d_with_indices_out_cuda_template` (cuda/DilatedMaxPool3d.cu): after the output and
    indices, `input.contiguous()`, or `_input.contiguous(ChannelsLast3d)` where the input is read
    channels-last (`_max_pool3d_layout`), freed at the return; nothing for an empty input."""
    src = call[0][0]
    if not registered(src) or src.numel() == 0:
        return
    cl, (view,) = _max_pool3d_layout(src, src)
    copy = _copy_unless_in(cap, view, cl)
    del copy


AFTER[aten.max_pool3d_with_indices.default] = _max_pool3d


def _fractional_max_pool3d_backward(cap, func, args, kwargs):
    """`fractional_max_pool3d_backward_cuda` (cuda/FractionalMaxPool3d.cu): `empty({0})`, then
    `resize_as_(input)` (contiguous) and `zero_()`; the gradient and the indices are read through
    packed accessors in their own strides (a 4-D input's reshaped with a leading 1, a view). The
    op has no meta kernel, and the CPU run that sized it failed an internal assert over the
    zero-stride stand-in indices, which stopped the program at `F.fractional_max_pool3d`'s
    backward."""
    x = args[1]
    if not registered(x):
        return NotImplemented
    cap.ops += 1
    return cap.track(
        torch.empty(x.shape, dtype=x.dtype, device="meta"), "aten::fractional_max_pool3d_backward"
    )


DISPATCH[aten.fractional_max_pool3d_backward.default] = _fractional_max_pool3d_backward


def _upsample_bilinear2d(cap, func, call, outs):
    """`upsample_bilinear2d_out_cuda_template` (cuda/UpSampleBilinear2d.cu), after the structured
    kernel's output (in the input's suggested format): a same-size output is a `copy_`; an input
    that suggests channels-last, of 16 channels or more, into a channels-last output runs the NHWC
    kernel over `input.contiguous(ChannelsLast)`, a copy of a strided one freed at the return; the
    other kernel reads the input through packed accessors (blind94/cp04's H200 per-op truth: a
    channels-last (2, 256, 96, 128) slice of a `cat`, 25,165,824 bytes beside the output)."""
    src, out = call[0][0], outs[0]
    if not registered(src) or tuple(src.shape) == tuple(out.shape):
        return
    if (
        _suggests_channels_last(src)
        and src.size(1) >= 16
        and out.is_contiguous(memory_format=torch.channels_last)
    ):
        copy = _copy_unless_in(cap, src, True)
        del copy


AFTER[aten.upsample_bilinear2d.default] = _upsample_bilinear2d


def _upsample_bilinear2d_backward(cap, func, call, outs):
    """`upsample_bilinear2d_backward_out_cuda_template` (cuda/UpSampleBilinear2d.cu), one host path
    for every floating dtype: a same-size gradient is copied straight into the result; a
    channels-last gradient of 4 channels or more into a channels-last result runs the NHWC kernel
    over `contiguous(ChannelsLast)`; otherwise a zeroed contiguous result stands in for a strided
    one and the gradient is made `contiguous()`, both freed at the return (blind16/p02's H200 record:
    Segformer's channel slices of a `cat`, a full-size copy each)."""
    (args, _kw) = call
    grad, result = args[0], outs[0]
    if not registered(grad) or result.numel() == 0 or tuple(grad.shape) == tuple(result.shape):
        return
    if (
        _suggests_channels_last(grad)
        and grad.size(1) >= 4
        and result.is_contiguous(memory_format=_cl_format(result))
    ):
        copy = (
            _temp(cap, grad, func._schema.name)
            if not grad.is_contiguous(memory_format=_cl_format(grad))
            else None
        )
        del copy
        return
    stand_in = None if result.is_contiguous() else _temp(cap, result, func._schema.name)
    copy = None if grad.is_contiguous() else _temp(cap, grad, func._schema.name)
    del stand_in, copy


AFTER[aten.upsample_bilinear2d_backward.default] = _upsample_bilinear2d_backward
SCRATCH_UNMODELLED.discard("aten::upsample_bilinear2d_backward")


def _upsample_bicubic2d_backward(cap, func, call, outs):
    """`upsample_bicubic2d_backward_out_cuda_template` (cuda/UpSampleBicubic2d.cu):
    `grad_output_.contiguous()` in the plain format whatever its layout, after the structured
    kernel's gradient and freed at the return (blind84/cf01's H200 per-op truth: the gradient of
    DINOv2's interpolated position embeddings, a permuted view, copied)."""
    grad = call[0][0]
    if registered(grad) and outs[0].numel() > 0 and not grad.is_contiguous():
        copy = _temp(cap, grad, func._schema.name)
        del copy


AFTER[aten.upsample_bicubic2d_backward.default] = _upsample_bicubic2d_backward


def _upsample_aa(cap, func, call, outs):
    """`upsample_gen2d_aa_out_cuda_template` and its backward (cuda/UpSampleBilinear2d.cu, the
    antialiased bilinear and bicubic kernels): the forward writes a non-contiguous output through a
    plain `at::empty` of its sizes and reads `input_.contiguous()`; the backward reads
    `grad_output_.contiguous()`; all after the structured kernel's output and freed at the return
    (blind109/de05's H200 per-op truth: SigLIP2's position embeddings, a permuted view)."""
    src = call[0][0]
    if not registered(src) or outs[0].numel() == 0:
        return
    out_c = _temp(cap, outs[0], func._schema.name) if not outs[0].is_contiguous() else None
    copy = _temp(cap, src, func._schema.name) if not src.is_contiguous() else None
    del copy, out_c


for _f in (
    aten._upsample_bilinear2d_aa.default,
    aten._upsample_bicubic2d_aa.default,
    aten._upsample_bilinear2d_aa_backward.default,
    aten._upsample_bicubic2d_aa_backward.default,
):
    AFTER[_f] = _upsample_aa


_INT_MAX = 2**31 - 1


def _cudnn_grid_sampler_ok(x, grid) -> bool:
    """`cond_cudnn_grid_sampler` (aten/src/ATen/native/GridSamplerUtils.h): both float64, float32 or
    float16, `cudnn_is_acceptable` (CUDA, cuDNN enabled, fewer than INT_MAX elements), 32-bit
    indexable, a 4-D input of at most 1024 channels."""
    ok = (torch.float64, torch.float32, torch.float16)
    return (
        torch.backends.cudnn.enabled
        and registered(x)
        and registered(grid)
        and x.dtype in ok
        and grid.dtype in ok
        and x.numel() < _INT_MAX
        and grid.numel() < _INT_MAX
        and x.dim() == 4
        and x.shape[1] <= 1024
    )


def _grid_sampler(cap, func, args, kwargs):
    """`torch.grid_sampler` (`F.grid_sample`) of simulated tensors: GridSampler.cpp's composite takes
    `cudnn_grid_sampler` for bilinear, zero-padded, align_corners sampling where cuDNN accepts the
    tensors (a condition on `is_cuda()` that the twin's meta tensors fail), after autocast's float32
    cast (`grid_sampler` is an fp32 op, autocast_mode.cpp; its casts made last argument first and
    dying as the op returns). blind111/dg05's H200 per-op record: RAFT's 96 correlation lookups."""
    names = ("input", "grid", "interpolation_mode", "padding_mode", "align_corners")
    a = dict(zip(names, args, strict=False)) | kwargs
    x, grid = a.get("input"), a.get("grid")
    if a.get("interpolation_mode") != 0 or a.get("padding_mode") != 0 or a.get("align_corners") is not True:
        return NotImplemented
    if not (registered(x) and registered(grid)):
        return NotImplemented
    cast = torch.is_autocast_enabled("cuda")

    def fp32(t):
        return t.to(torch.float32) if cast and t.dtype in (torch.float16, torch.bfloat16) else t

    g = fp32(grid)
    xi = fp32(x)
    if not _cudnn_grid_sampler_ok(xi, g):
        return NotImplemented
    out = torch.cudnn_grid_sampler(xi, g)  # no autocast kernel of its own
    del xi, g
    return out


FUNCTIONS[torch.grid_sampler] = _grid_sampler


def _grid_sample(cap, func, args, kwargs):
    """`F.grid_sample` (what a function mode sees; its body calls `torch.grid_sampler` with the modes
    as enums: bilinear 0, zeros 0)."""
    names = ("input", "grid", "mode", "padding_mode", "align_corners")
    a = dict(zip(names, args, strict=False)) | kwargs
    if a.get("mode", "bilinear") != "bilinear" or a.get("padding_mode", "zeros") != "zeros":
        return NotImplemented
    return _grid_sampler(cap, func, (a.get("input"), a.get("grid"), 0, 0, a.get("align_corners")), {})


FUNCTIONS[torch.nn.functional.grid_sample] = _grid_sample


def _zero_stride_contiguous(cap, t):
    """`contiguousIfZeroInStrides` (cudnn/Utils.h): a copy only of a tensor with a zero stride."""
    if any(st == 0 for st in t.stride()):
        return cap.dispatch(aten.clone.default, (t,), {"memory_format": torch.contiguous_format})
    return t


def _contiguous(cap, t):
    if t.is_contiguous():
        return t
    return cap.dispatch(aten.clone.default, (t,), {"memory_format": torch.contiguous_format})


def _cudnn_grid_sampler_forward(cap, func, args, kwargs):
    """`cudnn_grid_sampler_forward` (aten/src/ATen/native/cudnn/GridSampler.cpp): the input copied
    if it has a zero stride, the grid made contiguous, the output (N, C, grid H, grid W) empty."""
    x, grid = args[0], args[1]
    if not (registered(x) and registered(grid)):
        return NotImplemented
    cap.ops += 1
    xc = _zero_stride_contiguous(cap, x)
    gc = _contiguous(cap, grid)
    shape = (x.shape[0], x.shape[1], grid.shape[1], grid.shape[2])
    out = cap.track(torch.empty(shape, dtype=x.dtype, device="meta"), "aten::cudnn_grid_sampler")
    del gc, xc
    return out


def _cudnn_grid_sampler_backward(cap, func, args, kwargs):
    """`cudnn_grid_sampler_backward` (cudnn/GridSampler.cpp): input, grid and gradient made as the
    forward makes them, then both gradients, always (cuDNN has no output mask)."""
    x, grid, grad = args[0], args[1], args[2]
    if not (registered(x) and registered(grid) and registered(grad)):
        return NotImplemented
    cap.ops += 1
    op = "aten::cudnn_grid_sampler_backward"
    xc = _zero_stride_contiguous(cap, x)
    gc = _contiguous(cap, grid)
    oc = _zero_stride_contiguous(cap, grad)
    gx = cap.track(torch.empty(x.shape, dtype=x.dtype, device="meta"), op)
    gg = cap.track(torch.empty(grid.shape, dtype=grid.dtype, device="meta"), op)
    del oc, gc, xc
    return gx, gg


DISPATCH[aten.cudnn_grid_sampler.default] = _cudnn_grid_sampler_forward
DISPATCH[aten.cudnn_grid_sampler_backward.default] = _cudnn_grid_sampler_backward
