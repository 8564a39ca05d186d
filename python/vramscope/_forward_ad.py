"""Forward-mode AD formulas as CUDA tensors run them (torch/csrc/autograd/FunctionsManual.cpp, 2.11).

The autograd kernels of the normalizations and of the logsumexp family compute their outputs'
tangents with formulas that branch on `areAnyTensorSubclassLike`: CUDA tensors take an in-place
branch, tensor-subclass-like ones an out-of-place one that keeps more temporaries alive. While a
dispatch mode is on every tensor counts as subclass-like (`isTensorSubclassLike` returns true when
`c10::impl::dispatch_mode_enabled()`), so the twin's tensors took the out-of-place branch. For the
dual tensors of `torch.autograd.forward_ad` the callers here run the primal op on the primals, then
the in-place formula below, and make the result dual; other calls keep PyTorch's own path.

C++ destroys a full expression's temporaries at its end and a scope's locals in the reverse of their
declaration; the `del` statements below free in that order.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwad

from ._tensor import registered


class Zero:
    """The tangent of an input given without one: the generated code passes the formulas
    `_efficientzerotensor(input.sizes(), input.options())` (ZeroTensorAllocator: no memory)."""

    def __init__(self, dtype):
        self.dtype = dtype


def program_tracing() -> bool:
    """Whether the program's own `make_fx` is tracing (its ProxyTorchDispatchMode, an infra mode, is
    set; `torch.func.linearize` traces its JVP so): `c10::impl::dispatch_mode_enabled()` is then true
    on the GPU too, so every tensor counts as subclass-like there (`isTensorSubclassLike`,
    aten/src/ATen/TensorSubclassLikeUtils.h) and the formulas and composites take their out-of-place
    branches, as the twin's tensors do under its own mode."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY) is not None


def duals(x, *others):
    """`(level, [(primal, tangent), ...])` for x and each of `others` (None stays `(None, None)`, a
    tensor without a tangent is `(tensor, Zero)`) when x is a simulated tensor at the current
    forward-AD level carrying a tangent that is not a zero tensor, and nothing that requires grad
    would record a graph, and the program's make_fx is not tracing (`program_tracing`); else None."""
    level = fwad._current_level
    if level < 0 or not registered(x) or program_tracing():
        return None
    given = [t for t in (x, *others) if t is not None]
    if any(not isinstance(t, torch.Tensor) for t in given):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in given):
        return None
    pairs = []
    for i, t in enumerate((x, *others)):
        if t is None:
            pairs.append((None, None))
            continue
        primal, tangent = torch._VF._unpack_dual(t, level=level)
        if tangent is not None and tangent._is_zerotensor():
            return None
        if tangent is None:
            if i == 0:
                return None
            tangent = Zero(primal.dtype)
        pairs.append((primal, tangent))
    return level, pairs


def has_tangent(t) -> bool:
    """Whether `t` carries a forward-AD tangent at the current level: a custom autograd Function of
    the twin's (no `jvp`) would raise for it where PyTorch's own op has a forward formula."""
    level = fwad._current_level
    return (
        level >= 0 and isinstance(t, torch.Tensor) and torch._VF._unpack_dual(t, level=level)[1] is not None
    )


def view(t, shape):
    """`t.view(shape)` of a formula's operand (None and a `Zero` as they are: a zero tensor's view is one)."""
    return t if t is None or isinstance(t, Zero) else t.view(shape)


def invstd_jvp(xp, xt, mean_p, invstd_p, dims, numel, keepdim):
    """`_invstd_jvp`'s in-place branch: the tangent of `1 / input.std(dims)`."""
    invstd_t = xt - xt.mean(dims, True)
    invstd_t *= xp - mean_p
    cube = invstd_p.pow(3)
    invstd_t *= -cube
    del cube
    invstd_t = invstd_t.sum(dims, keepdim)
    invstd_t /= numel
    return invstd_t


def rms_rstd_jvp(xp, xt, rstd_p, dims, numel):
    """`rms_norm_jvp`'s (and `rms_norm_rstd_jvp`'s) in-place tangent of `rstd`: `input_t * input_p`
    times `-rstd_p**3`, summed over `dims` (kept) and divided by their element count."""
    rstd_t = xt * xp
    cube = rstd_p.pow(3)
    rstd_t *= -cube
    del cube
    rstd_t = rstd_t.sum(dims, True)
    rstd_t /= numel
    return rstd_t


def norm_jvp(xp, xt, mean_p, invstd_p, dims, numel):
    """`_norm_jvp`'s in-place branch: the tangent of `(input - mean) * invstd`."""
    invstd_t = invstd_jvp(xp, xt, mean_p, invstd_p, dims, numel, True)
    result_t = xt - xt.mean(dims, True)
    result_t *= invstd_p
    temp = xp - mean_p
    temp *= invstd_t
    result_t += temp
    del temp, invstd_t
    return result_t


def affine_jvp(result_p, result_t, weight_p, weight_t, bias_t):
    """`_affine_jvp`: `result_t * weight + result_p * weight_t + bias_t`. With real tangents its
    in-place branch, written into result_t and result_p (its `auto temp = input_p.value()` shares
    result_p's storage). A weight without a tangent (`Zero`) takes the out-of-place branch
    (`weight_t._is_zerotensor()`): `result_p * weight_t` is a zero tensor (`mul_zerotensor`, no
    memory but `_zero_operand`'s) and adding it copies the other operand (`add_zerotensor`: `_to_copy`
    of it), the old result_t freed at the assignment, the product at the end of the expression. A bias without
    one (a zero tensor is not subclass-like, `kTensorSubclassLike`) is added in place, ZeroTensor's
    fallback materialising it as `at::zeros({})` expanded (ZeroTensorFallback.cpp) for the call."""
    if weight_p is not None:
        if isinstance(weight_t, Zero):
            # (GCC evaluates `+`'s right operand first: the zero product, then result_t * weight)
            _zero_operand(weight_t.dtype, result_t.device)
            product = result_t * weight_p
            _zero_operand(product.dtype, result_t.device)
            result_t = torch.ops.aten._to_copy.default(product)
            del product
        else:
            result_t *= weight_p
            result_p *= weight_t
            result_t += result_p
    if isinstance(bias_t, Zero):
        zero = torch.zeros((), dtype=bias_t.dtype, device=result_t.device)
        result_t += zero.expand(result_t.shape)
        del zero
    elif bias_t is not None:
        result_t += bias_t
    return result_t


def _zero_operand(dtype, device) -> None:
    """A zero tensor as an operand of `mul_zerotensor` / `add_zerotensor` (BinaryOps.cpp): each
    takes its operands' meta copies for the result's metadata, and the zero tensor's `to(meta)`
    goes through ZeroTensor's fallback, which materialises `at::zeros({})` (one element on the
    device) for that call only. The meta copies themselves hold no device memory."""
    zero = torch.zeros((), dtype=dtype, device=device)
    del zero


def logsumexp_jvp(xp, xt, dims, keepdim):
    """`logsumexp_jvp`'s in-place branch: exp(x - amax(x)) scaled by the tangent in place, both sums
    (blind293/kh01's cross entropy on the H100: 507,904 bytes at its peak where the out-of-place
    product made 524,288; fixtures/run/probes/kh67_forward_ad_per_op_probe_h100.txt)."""
    if xp.numel() > 0:
        amax = torch.amax(xp, dims, True)
        shifted = xp - amax
        exp_p = shifted.exp()
        del shifted, amax
    else:
        exp_p = xp.exp()
    sumexp_p = exp_p.sum(dims, keepdim)
    exp_p *= xt
    sumexp_t = exp_p.sum(dims, keepdim)
    sumexp_t /= sumexp_p
    del sumexp_p, exp_p
    return sumexp_t


def softmax_tangent(log: bool, xp, xt, result, dim: int):
    """derivatives.yaml's `result:` of `_log_softmax` (`self_t - logsumexp_jvp(...)`) and of
    `_softmax` (`result * (self_t - logsumexp_jvp(...))`)."""
    lse_t = logsumexp_jvp(xp, xt, [dim], True)
    if log:
        out = xt - lse_t
        del lse_t
        return out
    diff = xt - lse_t
    out = result * diff
    del diff, lse_t
    return out


def make_dual(primal, tangent, level):
    """The dual of `primal` with `tangent` at `level` (`fwAD.make_dual`)."""
    return fwad.make_dual(primal, tangent, level=level)
