"""Pointwise and layout ops whose CUDA paths allocate beyond their outputs: complex-to-real ops,
`roll`, `isinf`/`isfinite`, `log_sigmoid`, activation backwards, `pow`, `clamp`, `unfold_backward`."""

from __future__ import annotations

import torch

from .._tensor import assumed, fast_setup_layout, registered, set_value, value
from .registry import AFTER, DISPATCH, FUNCTIONS

aten = torch.ops.aten


def _complex_to_float(name: str, buffer_first: bool, values):
    """An op taking a complex tensor to its real dtype through a complex buffer of the input's
    shape that dies at the return (UnaryOps.cpp). `abs` (`unary_op_impl_with_complex_to_float`)
    allocates its real result before the buffer (blind13/m04's H200 per-op truth: each `abs` of an
    STFT requests three times its output). `angle` passes `at::empty({0})` to `angle_out`
    (`unary_op_impl_with_complex_to_float_out`), so the buffer comes first and `resize_output`
    gives the result its storage after (blind190/gh04's H200 history). `values` computes the
    result's values from the input's, where the twin carries them."""
    op = f"aten::{name}"

    def run(cap, func, args, kwargs):
        x = args[0]
        if kwargs or not registered(x) or not x.is_complex():
            return NotImplemented
        cap.ops += 1
        buffer = None
        if buffer_first and x.numel() > 0:
            buffer = cap.malloc(x.numel() * x.element_size(), op, "temporary")
        out = cap.track(func(*args), op)
        if not buffer_first and x.numel() > 0:
            buffer = cap.malloc(x.numel() * x.element_size(), op, "temporary")
        del buffer
        v = value(x)
        if v is not None:
            # as the values every other op computes (istft's window-envelope check reads `abs`')
            set_value(out, values(v), assumed(x))
        return out

    return run


DISPATCH[aten.abs.default] = _complex_to_float("abs", False, torch.abs)
DISPATCH[aten.angle.default] = _complex_to_float("angle", True, torch.angle)


def _roll(cap, func, args, kwargs):
    """`roll_cuda` (TensorTransformations.cu): a non-contiguous input made contiguous, then the
    output; over k dims `roll_common` rolls the first dim into a new tensor and recurses on the rest,
    so k - 1 input-sized intermediates live until the output exists (blind10/j02's H200 record)."""
    names = ("input", "shifts", "dims")
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a["input"]
    if not registered(x) or x.numel() == 0:
        return NotImplemented
    dims = a.get("dims") or []
    dims = [dims] if isinstance(dims, int) else list(dims)
    cap.ops += 1
    op = "aten::roll"
    nbytes = x.numel() * x.element_size()
    contiguous = None if x.is_contiguous() else cap.malloc(nbytes, "aten::contiguous", "temporary")
    rolled = []
    for _ in range(len(dims) - 1):
        rolled.append(cap.malloc(nbytes, op, "temporary"))
        contiguous = None  # the first dim's roll returned: its contiguous copy is gone
    out = cap.track(func(*args, **kwargs), op)
    del contiguous, rolled
    v = value(x)
    if v is not None:
        # the input's values, rolled (blind118/dn02: a click stream shifted by one)
        set_value(out, torch.roll(v, a["shifts"], a.get("dims") or []), assumed(x))
    return out


DISPATCH[aten.roll.default] = _roll


def _isinf(cap, func, args, kwargs):
    """`isinf` (TensorCompare.cpp) of a floating tensor: `self.abs() == inf`, so the absolute
    values are a temporary of the input's size before the bool result (blind9/i02)."""
    x = args[0]
    if kwargs or not registered(x) or not x.is_floating_point() or x.numel() == 0:
        return NotImplemented
    cap.ops += 1
    op = "aten::isinf"
    magnitude = cap.malloc(x.numel() * x.element_size(), "aten::abs", "temporary")
    out = cap.track(func(*args), op)
    del magnitude
    return out


DISPATCH[aten.isinf.default] = _isinf


def _log_sigmoid_forward(cap, func, args, kwargs):
    """`log_sigmoid_forward` on CUDA (aten/src/ATen/native/cuda/Activation.cpp
    `log_sigmoid_forward_cuda`): the result, then `buffer = at::empty({0})`, which only the CPU
    kernel fills; the meta kernel's buffer has the input's size (blind150/et01)."""
    x = args[0]
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::log_sigmoid_forward"
    result, _ = func(*args)
    out = cap.track(result, op)
    buffer = cap.track(torch.empty((0,), dtype=x.dtype, device="meta"), op)
    return out, buffer


DISPATCH[aten.log_sigmoid_forward.default] = _log_sigmoid_forward


def _binary_iterator_layout(first_at: int, second_at: int):
    """A pointwise backward whose kernel is a binary TensorIterator over `args[first_at]` then
    `args[second_at]`: `TensorIterator::borrowing_binary_op(grad_input, grad_output, self)`
    (Activation.cpp; elu's and softplus's structured meta functions build the same), the gradient
    first, where PyTorch's Python meta kernels put `self` first (an NCHW gradient of a channels-last
    input gives NCHW on the GPU; blind37/ak02's H200 per-op truth, MobileNetV3's hardswish);
    `leaky_relu_backward`'s meta function builds it over `self_or_result` first, and its fast setup
    keeps an (N, C, 1, 1) result contiguous where the meta kernel keeps channels-last strides
    (blind297/kl02's H100 history)."""

    def rule(cap, func, args, kwargs):
        a, b = args[first_at], (args[second_at] if len(args) > second_at else None)
        if kwargs or not (registered(a) and registered(b)):
            return NotImplemented
        cap.ops += 1
        out = func(*args)
        layout = fast_setup_layout(aten.mul.Tensor(a, b), (a, b))
        if layout.shape == out.shape and layout.stride() != out.stride():
            out = torch.empty_strided(out.shape, layout.stride(), dtype=out.dtype, device=out.device)
        return cap.track(out, f"aten::{func._schema.name.split('::')[-1]}")

    return rule


for _f, _first_at, _second_at in (
    (aten.hardswish_backward.default, 0, 1),
    (aten.hardsigmoid_backward.default, 0, 1),
    (aten.softplus_backward.default, 0, 1),
    (aten.hardtanh_backward.default, 0, 1),
    (aten.logit_backward.default, 0, 1),
    (aten.elu_backward.default, 0, 5),
    (aten.leaky_relu_backward.default, 1, 0),
):
    DISPATCH[_f] = _binary_iterator_layout(_first_at, _second_at)


def _finite_check(finite: bool):
    """`isfinite` (True) or `isinf`/`isnan` (False) of a floating CUDA tensor whose values the twin
    does not carry: the ops run as on the GPU (`isfinite` is `(self == self) * (self.abs() != inf)`,
    TensorCompare.cpp), and the result carries the values of a program whose floats are finite, so
    guards such as BART's `not torch.isfinite(h).all()` (modeling_bart.py) take the GPU's branch
    (blind37/ak04's H200 record); one warning per site names the choice (docs/run.md)."""

    def check(cap, func, args, kwargs):
        x = args[0] if args else kwargs.get("input", kwargs.get("self"))
        if not registered(x) or not x.is_floating_point() or (value(x) is not None and not assumed(x)):
            return NotImplemented
        out = func(*args, **kwargs)
        from .._capture import _user_site

        site = _user_site()
        cap.warn_once(
            "finite:" + site,
            f"{site}: {func.__name__} of a CUDA tensor of {tuple(x.shape)} whose values the twin does "
            f"not compute: it takes them as finite",
        )
        set_value(out, torch.full((), finite).expand(out.shape))
        return out

    return check


for _name, _finite in (("isfinite", True), ("isinf", False), ("isnan", False)):
    FUNCTIONS[getattr(torch, _name)] = _finite_check(_finite)
    FUNCTIONS[getattr(torch.Tensor, _name)] = _finite_check(_finite)


def _pow_scalar_base(cap, func, call, outs):
    """`pow(Scalar base, Tensor exponent)` (`pow_Scalar_out`, Pow.cpp): unless the base is 1,
    `pow_out(out, wrapped_scalar_tensor(base, exp.device()), exp)`: the base becomes a 0-dim
    tensor on the GPU (int64, double, complex double or bool, as the scalar is), after the output
    and freed at the return (blind21/u04's H200 history: `pow(2, -s)`, 8 bytes)."""
    (args, kw) = call
    base = args[0] if args else kw.get("self")
    exponent = args[1] if len(args) > 1 else kw.get("exponent")
    if not registered(exponent) or base == 1:
        return
    size = 16 if isinstance(base, complex) else 1 if isinstance(base, bool) else 8
    wrapped = cap.malloc(size, func._schema.name, "temporary")
    del wrapped


AFTER[aten.pow.Scalar] = _pow_scalar_base


def _clamp_promoted(cap, func, args, kwargs):
    """`clamp`, `clamp_min` and `clamp_max` by Scalars of an integral or bool tensor whose result type
    with the Scalars is another (an int64 count clamped by `min=1.0`): their meta functions
    (TensorCompare.cpp) run `build_unary_op(maybe_get_output(), self.to(result_type))`, so a converted
    copy of self comes before the output and dies with the iterator (blind163/fg02's H200 history:
    `cmask.sum(1).clamp(min=1.0)` of 32 int64 counts, 128 bytes before the 128-byte result)."""
    names = ("self", "max") if func is aten.clamp_max.default else ("self", "min", "max")
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a.get("self")
    if not registered(x) or x.is_floating_point() or x.is_complex():
        return NotImplemented
    result_type = x.dtype
    for s in (a.get("min"), a.get("max")):
        if s is not None:
            result_type = torch.result_type(torch.empty(1, dtype=result_type, device="meta"), s)
    if result_type == x.dtype:
        return NotImplemented
    with cap._modes[1]:  # the copy and the op come back to the mode
        converted = x.to(result_type)
        out = func(converted, *args[1:], **kwargs)
        del converted
    return out


for _f in (aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default):
    DISPATCH[_f] = _clamp_promoted


def _unfold_backward(cap, func, call, outs):
    """`unfold_backward` on CUDA (UnfoldBackwardKernel.cu, `_make_unfold_backward_iter_over_grad_out`
    in UnfoldBackward.h): after the zeroed result, an int64 `arange` of the positions iterated along
    `dim`, min(input's size, (folds - 1) * step + size), freed with the iterator (blind44/ar03's H200
    record: 270,336 bytes for `torch.stft`'s frames of 33,792 samples, 129 folds of 1,024 by 256).
    Folds that do not overlap (step >= size) are copied into the zeroed result's unfolded view
    instead, with no index (UnfoldBackward.cpp; blind121/dq02's H200 record, 8 by 8)."""
    (grad, input_sizes, dim, size, step), _ = call
    if not registered(grad) or not input_sizes or step >= size:
        return
    dim = dim % len(input_sizes)
    folds = grad.shape[dim] if grad.dim() > dim else 1
    n = min(input_sizes[dim], (folds - 1) * step + size)
    idx = cap.malloc(8 * n, "aten::unfold_backward", "temporary")
    del idx


AFTER[aten.unfold_backward.default] = _unfold_backward
