"""Random sampling: `multinomial`, `normal` with a tensor std, gamma and Dirichlet draws, `randperm`
(`native/Distributions.cpp`, `cuda/Distributions.cpp`, `cuda/Randperm.cu`)."""

from __future__ import annotations

import math

import torch

from .._tensor import assumed, registered, set_value, value
from .matmul import _temp
from .registry import AFTER, DISPATCH, NO_VALUES, SCRATCH_UNMODELLED
from .sort import _cub

aten = torch.ops.aten


# ---- ops whose CUDA kernels allocate only their outputs --------------------------------

NO_VALUES.update(
    {
        aten.normal_.default: False,
    }
)


def _multinomial(cap, func, args, kwargs):
    """`multinomial` (native/Distributions.cpp) run as its parts on the simulated GPU: the int64
    result; without replacement or for one sample, the asynchronous checks (`max() < inf`,
    `min() >= 0`, their `&` kept to the end; `sum(1) == 0` reduced by `any()`, its
    `logical_not()`), then `q = empty_like(self).exponential_()`, `div_out(q, self, q)` and
    `argmax` (one sample) or `topk` into a values buffer; with replacement, three buffers of
    the input's size and, for one distribution, the prefix sum's CUB scan
    (cuda/MultinomialKernel.cu). As the H200's sweep lists them
    (`validation/run/sweeps/topk_isin_sweep.py`)."""
    names = ("self", "num_samples", "replacement", "generator")
    a = dict(zip(names, args, strict=False)) | kwargs
    x, n = a.get("self"), a.get("num_samples")
    if not registered(x) or x.numel() == 0 or x.dim() not in (1, 2) or not x.is_floating_point():
        return NotImplemented
    cap.ops += 1
    shape = (n,) if x.dim() == 1 else (x.shape[0], n)
    with cap._modes[1]:
        result = x.new_empty(shape, dtype=torch.long)
        if a.get("replacement", False) and n != 1:
            buffers = [x.new_empty(x.shape) for _ in range(3)]
            if x.dim() == 1 or x.shape[0] == 1:
                # `at::cuda::cumsum_out(prefixSum, normDist, 1)` over one row: CUB's inclusive
                # scan and its storage (blind105/da05's H200 per-op truth: 18,431 bytes for
                # 4,194,304 float32 categories)
                _cub(cap, "scan", x.numel(), x.element_size(), "aten::multinomial", "scan")
            del buffers
            return result
        # C++ temporaries live to the end of their full expression
        largest = x.max()
        finite = largest < math.inf
        smallest = x.min()
        positive = smallest >= 0
        is_valid = finite & positive
        del positive, smallest, finite, largest
        if x.dim() == 1:
            total = x.sum()
            zero = total == 0
            del total
        else:
            rows = x.sum(1)
            empty_rows = rows == 0
            zero = empty_rows.any()
            del empty_rows, rows
        nonzero = zero.logical_not()
        del nonzero
        q = torch.empty_like(x).exponential_(1)
        torch.div(x, q, out=q)
        if n == 1:
            torch.argmax(q, dim=-1, keepdim=True, out=result)
        else:
            values = x.new_empty(shape)
            torch.topk(q, n, out=(values, result))
            del values
        del q, zero, is_valid
    return result


DISPATCH[aten.multinomial.default] = _multinomial


def _normal_std(func, args, kwargs):
    """`normal`'s std argument where it is a tensor (`normal.Tensor_Tensor`, `normal.float_Tensor`)."""
    std = kwargs.get("std", args[1] if len(args) > 1 else None)
    return std if isinstance(std, torch.Tensor) and registered(std) and std.numel() > 0 else None


def _check_normal_std(cap, std) -> None:
    """CHECK_NORMAL_TENSOR_STD (native/DistributionTemplates.h): `std.min().ge(0).item<bool>()`, both
    temporaries dying at the end of the expression; `min` of an expanded std materializes it
    as the twin's `min` does (blind59/bg03's and blind85/cg06's H200 per-op truth)."""
    with cap._modes[1]:
        smallest = std.min()
        ok = smallest.ge(0)
        del ok, smallest


def _normal_first_check(cap, func, args, kwargs):
    """`normal_impl` (DistributionTemplates.h) checks a tensor std before it allocates the result,
    and `normal_out_impl` checks it again after: 4 more allocations for a contiguous std
    (blind174/fr05's H200 per-op truth: `Normal(mu, sigma).sample()` over 51,200 rows made 5
    allocations, 204,810 bytes). The op itself then runs as usual (`_normal_after`)."""
    std = _normal_std(func, args, kwargs)
    if std is not None:
        _check_normal_std(cap, std)
    return NotImplemented


def _normal_after(cap, func, call, outs):
    """`normal_out_impl`'s part after the result: the std check again; `normal(float, Tensor)`
    then keeps `at::full({}, mean)` to its return; `normal(Tensor, float)` an
    `empty_like(output)` that only gives `infer_size` its shape."""
    args, kwargs = call
    if not outs or outs[0].numel() == 0:
        return
    if func is aten.normal.Tensor_float:
        std_tensor = _temp(cap, outs[0], "aten::normal")
        del std_tensor
        return
    std = _normal_std(func, args, kwargs)
    if std is not None:
        _check_normal_std(cap, std)
    if func is aten.normal.float_Tensor:
        mean_tensor = cap.malloc(outs[0].element_size(), "aten::normal", "temporary")
        del mean_tensor


for _f in (aten.normal.Tensor_Tensor, aten.normal.float_Tensor):
    DISPATCH[_f] = _normal_first_check
for _f in (aten.normal.Tensor_Tensor, aten.normal.float_Tensor, aten.normal.Tensor_float):
    AFTER[_f] = _normal_after


def _standard_gamma(cap, func, args, kwargs):
    """`_s_gamma_cuda` (cuda/Distributions.cpp): `at::empty(alpha.sizes(), alpha.options())` filled
    by the gamma kernel, nothing else (the op has no meta kernel, so the twin makes its output here
    rather than from a CPU run)."""
    alpha = args[0]
    if not registered(alpha) or kwargs or len(args) > 2:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        out = alpha.new_empty(alpha.shape)
    _host_draw(cap, func, args, kwargs, out)
    return out


def _host_draw(cap, func, args, kwargs, out) -> None:
    """The draw's values: the host's draw over the input's values (as for normal draws, whose GPU
    values the twin does not compute), not the zeros of the `new_empty` that made `out` (a Wishart
    sample read as singular, a Dirichlet row summing to 0)."""
    if value(args[0]) is None:
        set_value(out, None)
        return
    r = cap.cpu_result(func, args, kwargs)
    if isinstance(r, torch.Tensor) and r.shape == out.shape:
        set_value(out, r, assumed(args[0]))
    else:
        set_value(out, None)


def _sample_dirichlet(cap, func, args, kwargs):
    """`_s_dirichlet_cuda` (cuda/Distributions.cpp): the gamma draws into `at::empty(alpha.sizes())`,
    then `ret.sum(-1, true)` (freed at the return) to normalize them in place."""
    alpha = args[0]
    if not registered(alpha) or kwargs or len(args) > 2 or alpha.dim() == 0:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        ret = alpha.new_empty(alpha.shape)
        gamma_sum = ret.sum(-1, keepdim=True)
        del gamma_sum
    _host_draw(cap, func, args, kwargs, ret)
    return ret


DISPATCH[aten._standard_gamma.default] = _standard_gamma
DISPATCH[aten._sample_dirichlet.default] = _sample_dirichlet


def _like_first_contiguous(cap, func, args, kwargs):
    """`_s_binomial_cuda`, `_standard_gamma_grad_cuda` and `_dirichlet_grad_cuda`
    (cuda/Distributions.cpp): `at::empty_like(first, MemoryFormat::Contiguous)` filled by one
    TensorIterator kernel over the operands, nothing else (no meta kernels: without this rule the
    twin sized them by a CPU run and named them unmeasured; `Binomial.sample`, and the backward of
    Gamma/Chi2/StudentT/Beta/Dirichlet `rsample`). The values: the host's kernel over the
    operands' values where every one carries them (a binomial draw from the host's generator)."""
    first = args[0]
    if (
        not registered(first)
        or len(args) > 3
        or any(k != "generator" or v is not None for k, v in kwargs.items())
    ):
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        out = first.new_empty(first.shape)
    if any(isinstance(a, torch.Tensor) and value(a) is None for a in args):
        set_value(out, None)
        return out
    r = cap.cpu_result(func, args, kwargs)
    if isinstance(r, torch.Tensor) and r.shape == out.shape:
        set_value(out, r, any(assumed(a) for a in args if isinstance(a, torch.Tensor)))
    else:
        set_value(out, None)
    return out


for _f in (aten.binomial.default, aten._standard_gamma_grad.default, aten._dirichlet_grad.default):
    DISPATCH[_f] = _like_first_contiguous


SCRATCH_UNMODELLED.discard("aten::multinomial")


def _randperm(cap, func, call, outs):
    """`randperm_out_cuda` (cuda/Randperm.cu) into a contiguous output of n > 0: an `arange` of n in
    the output's dtype as the values, random keys of `bits` = ceil(log2(n - (6 n^2 + 1) /
    (12 log 0.9))) bits (int32 up to 32 bits, else int64) and their sorted copy (`empty_like`), then
    `cuda::cub::radix_sort_pairs` of keys and values on those bits; the keys, then the arange die.
    Before the arange, an 8-byte `at::empty` is made and freed (blind135/ee05's H200 history and
    per-op truth: 6 allocations, 157,191 bytes for n = 4096 int64)."""
    out = outs[0] if isinstance(outs, (list, tuple)) else outs
    if not (isinstance(out, torch.Tensor) and registered(out)) or out.dim() != 1 or out.numel() == 0:
        return
    if not out.is_contiguous():
        return
    n = out.numel()
    op = "aten::randperm"
    small = cap.malloc(8, op, "temporary")
    del small
    values = cap.malloc(n * out.element_size(), op, "temporary")
    bits = min(64, math.ceil(math.log2(n - (6 * n * n + 1) / (math.log(0.9) * 12))))
    key = 4 if bits <= 32 else 8
    keys = cap.malloc(n * key, op, "temporary")
    keys_out = cap.malloc(n * key, op, "temporary")
    _cub(cap, "sort", n, key, op, "radix sort", value_bytes=out.element_size(), end_bit=bits)
    del keys, keys_out, values


for _f in (aten.randperm.default, aten.randperm.generator):
    AFTER[_f] = _randperm
