"""Normalization layers as PyTorch 2.11's CUDA kernels run them: their outputs, in the order the
kernels allocate them, and the scratch each takes beyond its outputs.

- `native_batch_norm` / `native_batch_norm_backward`: `aten/src/ATen/native/cuda/Normalization.cu`
  and `Normalization.cuh` (the channels-last kernels' grid reduction staging and semaphores).
- `native_group_norm` / `native_group_norm_backward`: `aten/src/ATen/native/group_norm.cpp` and
  `cuda/group_norm_kernel.cu` (the fused parameters `a`, `b`; `ds`, `db`, `c1`, `c2`, `c3`).
- `native_layer_norm` / `native_layer_norm_backward`: `cuda/layer_norm_kernel.cu` (`expect_contiguous`
  copies; a contiguous output whatever the input's strides).
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import suggest_memory_format

from . import _forward_ad as _fad
from ._kernels import DISPATCH, META_AUTOGRAD, SCRATCH_UNMODELLED, _acc_bytes, reduce_scratch
from ._kernels.typenames import scalar_type_name
from ._tensor import _reads_cuda, registered

aten = torch.ops.aten

# Normalization.cuh's launch constants (CUDA build). Recalled from that file, not re-read this session;
# with them flexible_launch_configs reproduces every staging size the GPU counted
# (fixtures/run/truth_h200.tar.xz, script 06; test_norm.py).
MAX_BLOCK_SIZE = 512
ELEMENTS_PER_THREAD = 16
OPTIMAL_TILE_W = 32
MAX_H_BLOCK = 128


def _last_pow2(n: int) -> int:
    """`lastPow2`: the largest power of two not above n (at least 1)."""
    return 1 << (max(n, 1).bit_length() - 1)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def flexible_launch_configs(reduction: int, stride: int, coop: bool) -> tuple[int, int]:
    """`flexible_launch_configs` (Normalization.cuh): the grid (x, y) of the channels-last kernels."""
    block_x = min(_last_pow2(stride), OPTIMAL_TILE_W)
    block_y = min(_last_pow2(_ceil_div(reduction, ELEMENTS_PER_THREAD)), MAX_BLOCK_SIZE // block_x)
    if block_x * block_y != MAX_BLOCK_SIZE:
        block_x = min(_last_pow2(stride), MAX_BLOCK_SIZE // block_y)
    grid_x = _ceil_div(stride, block_x)
    grid_y = min(_ceil_div(reduction, block_y * ELEMENTS_PER_THREAD), MAX_H_BLOCK)
    if coop and grid_y < 8:
        grid_y = 1
    return grid_x, grid_y


def _channels_last_kernels(t) -> bool:
    """`batch_norm_use_channels_last_kernels` (Normalization.cuh)."""
    if t.is_contiguous():
        return t.dim() >= 2 and t.stride(1) == 1
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return False


def _grid_scratch(cap, t, per_channel: int, op: str) -> None:
    """The staging buffer (`per_channel` accumulators per channel and grid row) and the semaphores
    (`at::zeros({grid.x}, kInt)`) of a channels-last grid reduction, when the grid has rows."""
    c = t.size(1)
    reduction = t.numel() // max(c, 1)
    grid_x, grid_y = flexible_launch_configs(reduction, c, coop=True)
    if grid_y > 1:
        staging = cap.malloc(per_channel * c * grid_y * _acc_bytes(t.dtype), op, "temporary")
        semaphores = cap.malloc(grid_x * 4, op, "temporary")
        # C++ destroys the locals in reverse: `semaphores` first (blind37/ak02's H200 history)
        del semaphores, staging


def _cudnn_selected(x, weight, bias, running_mean, running_var, training, eps) -> bool:
    """`_select_batch_norm_backend` (Normalization.cpp) choosing cuDNN: not bf16, half input only
    with float weights, affine, running statistics (or none, in training), 3-D or more, at most
    880,801 samples in training and 65,535 in evaluation, fewer than 2^31 elements (cuDNN's minimum
    epsilon is 0)."""
    return (
        x.dtype != torch.bfloat16
        and weight is not None
        and bias is not None
        and weight.dtype != torch.bfloat16
        and (x.dtype != torch.float16 or weight.dtype == torch.float32)
        and (
            (running_mean is not None and running_var is not None)
            or (running_mean is None and running_var is None and training)
        )
        and x.dim() >= 3
        and x.shape[0] <= (880801 if training else 65535)
        and eps >= 0
        and x.numel() < 2**31 - 1
    )


#: cuDNN's workspace for `CUDNN_BATCHNORM_SPATIAL_PERSISTENT` (cuDNN's own sizes, not in PyTorch's
#: source: `cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize`, `...BackwardExWorkspaceSize`),
#: measured on an H200 (validation/run/bn_sweep.py; fixtures/run/bn_sweep_h200.jsonl.xz and
#: fixtures/run/bn_sweep_few_h200.jsonl.xz, their README rows): per chunk of channels 4 bytes, and per
#: block of pixels 8 bytes a chunk's channel (4 more forward), plus a fixed part. Blocks: forward 64
#: pixels for a float32 input, 160 for a half one (with float weights, as autocast leaves batch
#: norm); backward 96 for both. {which: (fixed, extra per block, {dtype: pixels})}
CUDNN_PERSISTENT_WORKSPACE = {
    "forward": (1072, 4, {torch.float32: 64, torch.float16: 160}),
    "backward": (1056, 0, {torch.float32: 96, torch.float16: 96}),
}
#: the largest channels and samples x positions bn_sweep.py measured
_PERSISTENT_MEASURED = (2048, 12_845_056)


def _channel_chunk(channels: int) -> tuple[int, int]:
    """(channels a chunk holds, blocks' pixels multiple) as the sweeps found them: 64 channels when
    they are a multiple of 4, 4 channels over 4x the pixels when fewer than 4, else 16."""
    if channels % 4 == 0:
        return 64, 1
    return (4, 4) if channels < 4 else (16, 1)


def persistent_workspace_bytes(dtype, channels: int, pixels: int, which: str) -> int | None:
    """cuDNN's persistent batch-norm workspace in bytes for an input of `dtype` with `channels`
    and `pixels` = N x spatial elements per channel (`CUDNN_PERSISTENT_WORKSPACE`); None for a
    dtype not measured."""
    fixed, extra, block = CUDNN_PERSISTENT_WORKSPACE[which]
    if dtype not in block:
        return None
    width, times = _channel_chunk(channels)
    chunks = -(-channels // width)
    return chunks * (4 + (8 * width + extra) * -(-pixels // (block[dtype] * times))) + fixed


def _persistent(x) -> bool:
    """`getCudnnBatchNormMode` (cudnn/BatchNorm.cpp) in training: `SPATIAL_PERSISTENT` for an
    input whose suggested memory format is channels-last (2-D or 3-D), else `SPATIAL`, which takes
    no workspace (no allocation beyond the outputs in the H200's per-op truth)."""
    return suggest_memory_format(x) in (torch.channels_last, torch.channels_last_3d)


def _persistent_workspace(cap, x, which: str, op: str):
    """cuDNN's persistent batch-norm workspace (`at::empty(workspace_size)`), freed on return."""
    c = x.size(1)
    pixels = x.numel() // max(c, 1)
    nbytes = persistent_workspace_bytes(x.dtype, c, pixels, which)
    if nbytes is None or c > _PERSISTENT_MEASURED[0] or pixels > _PERSISTENT_MEASURED[1]:
        cap.note_unmeasured(
            f"cuDNN's channels-last batch-norm {which} workspace ({x.dtype}, {tuple(x.shape)})"
            + ("" if nbytes is None else f": {nbytes} bytes by the formula, beyond its measured range")
        )
        if nbytes is None:
            return None
    return cap.malloc(nbytes, op, "temporary")


def _native_batch_norm(cap, func, args, kwargs):
    """`batch_norm_cuda`: output, save_mean, save_invstd; in training, the statistics of a
    channels-last input (`batch_norm_choose_impl`) take `batch_norm_stats_channels_last_cuda_template`'s
    staging (4 accumulators per channel and grid row) and semaphores, those of a general one
    `_var_mean_stats`. Where `_batch_norm_impl_index` picks cuDNN: in evaluation `cudnn_batch_norm`
    makes the output only (its save_mean and save_var are empty: cudnn/BatchNorm.cpp; blind21/u06's
    H200 memory history); in training the output, save_mean and save_var, then, for a channels-last
    input, the persistent kernel's workspace (freed on return), none for another."""
    x = args[0]
    training = args[5] if len(args) > 5 else kwargs.get("training")
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::native_batch_norm"
    out = func(*args)
    cudnn = _cudnn_selected(*args[:5], training, args[7])
    if not training and cudnn:
        if not (x.is_contiguous() or _channels_last_kernels(x)):
            cap.note_unmeasured("cuDNN's batch norm of a non-dense input (its contiguous copy)")
        empty = (cap.track(torch.empty(0, dtype=t.dtype, device="meta"), op) for t in out[1:])
        return (cap.track(out[0], "aten::cudnn_batch_norm"), *empty)
    if training and cudnn and x.numel() > 0 and _persistent(x):
        op = "aten::cudnn_batch_norm"
        if not x.is_contiguous(memory_format=suggest_memory_format(x)):
            cap.note_unmeasured("cuDNN's batch norm of a non-dense input (its contiguous copy)")
        for t in out:
            cap.track(t, op)
        workspace = _persistent_workspace(cap, x, "forward", op)
        del workspace
        return out
    for t in out:
        cap.track(t, op)
    if training and x.numel() > 0:
        impl = _bn_impl(x)
        if impl == "channels_last":
            _grid_scratch(cap, x, 4, op)
        elif impl == "general":
            _var_mean_stats(cap, x, out[1].dtype, op)
    error = _elementwise_dtype_error(x, args[1], args[2])
    if error is not None:
        # the output and statistics die with the error (blind300/ko02 on the H100: a `.half()`
        # channels-last BatchNorm under bf16 autocast raised "expected scalar type Float but found Half")
        del out
        raise RuntimeError(error)
    return out


def _elementwise_dtype_error(x, weight, bias) -> str | None:
    """The error `batch_norm_elementwise` (cuda/Normalization.cu) raises, after the statistics, for
    parameters it cannot read, or None. Contiguous: parameters of another dtype than the input
    (`is_mixed_type`: the first defined one's) are read as the input's accumulate type through
    `get_packed_accessor` ("Expected weight to have type Float but got Half"); channels-last
    (`batch_norm_elemt_channels_last_cuda_template`, Normalization.cuh, contiguous parameters): a
    weight (else bias) of another dtype makes both read as the accumulate type, otherwise the bias as
    the input's, through `const_data_ptr` ("expected scalar type Float but found Half"); the general
    path's TensorIterator casts every operand. 32-bit indexing assumed beyond 2^31 elements."""
    impl = _bn_impl(x) if x.numel() <= 2**31 - 1 else "general"
    params = [t for t in (weight, bias) if t is not None]
    if impl == "general" or not params:
        return None
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    if impl == "contiguous":
        stat = acc if params[0].dtype != x.dtype else x.dtype
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and t.dtype != stat:
                want, got = scalar_type_name(stat), scalar_type_name(t.dtype)
                return f"Expected {name} to have type {want} but got {got}"
        return None
    if not all(t.is_contiguous() for t in params):
        return None  # the channels-last case falls through to the general path
    read = acc if params[0].dtype != x.dtype else None
    for t in (weight, bias) if read is not None else (bias,):
        want = read or x.dtype
        if t is not None and t.dtype != want:
            return f"expected scalar type {scalar_type_name(want)} but found {scalar_type_name(t.dtype)}"
    return None


def _var_mean_stats(cap, x, stats_dtype, op: str) -> None:
    """`batch_norm_mean_var`'s general path (Normalization.cu; a channels-last 3-D or strided input):
    `var_mean_out` over every dimension but 1, whose two-result `make_reduction` (ReduceOpsUtils.h)
    reduces `self.to(stats dtype)` where the input's dtype differs, but a half input into float
    statistics as it is, with `WelfordOps`' 16-byte float accumulators (32 for double) in the
    reduction's global buffer (blind44/ar02's H200 per-op truth: a float32 copy of each bf16
    `channels_last_3d` input, then the buffer and semaphores; bn_sweep_h200.jsonl.xz: no copy of a
    float16 one)."""
    copy = None
    elem = x.element_size()
    if x.dtype != stats_dtype and not (x.dtype == torch.float16 and stats_dtype == torch.float32):
        elem = torch.empty((), dtype=stats_dtype).element_size()
        copy = cap.malloc(x.numel() * elem, "aten::_to_copy", "temporary")
    fmt = suggest_memory_format(x)
    strides = (
        list(torch.empty(x.shape, device="meta", memory_format=fmt).stride()) if copy else list(x.stride())
    )
    acc = 32 if stats_dtype == torch.float64 else 16
    reduce_scratch(cap, list(x.shape), strides, [d != 1 for d in range(x.dim())], elem, acc, op)
    del copy


def _native_batch_norm_backward(cap, func, args, kwargs):
    """`batch_norm_backward_cuda`: the fused kernel (outputs only) unless the input takes the
    channels-last kernels or no reduction is needed; then, where the forward ran in evaluation and
    saved no statistics, the running mean in the accumulate type (a copy only where its dtype
    differs) and `invstd` recomputed from the running variance, one per channel, both held to the
    op's end; `batch_norm_backward_reduce_cuda` (sum_dy, sum_dy_xmu, the weight's and bias's
    gradients, and in its channels-last template a staging of 2 accumulators per channel and grid
    row with semaphores) and the elementwise input gradient, allocated last."""
    if kwargs or len(args) != 10:
        return NotImplemented
    grad, x, w, rm, rv, sm, si, train, eps, mask = args
    if not (registered(grad) and registered(x)):
        return NotImplemented
    cap.ops += 1
    op = "aten::native_batch_norm_backward"
    gi, gw, gb = func(*args)
    # the forward's choice, its bias taken as defined with its weight (nn.BatchNorm's affine)
    if train and x.numel() > 0 and _cudnn_selected(x, w, w, rm, rv, True, eps):
        return _cudnn_backward(cap, grad, x, w, (gi, gw, gb), mask)
    needs_reduction = train or mask[1] or mask[2]
    if not _channels_last_kernels(x) and needs_reduction and mask[0]:
        # `batch_norm_backward_cuda_template`: `at::empty_like(input, LEGACY_CONTIGUOUS_MEMORY_FORMAT)`,
        # contiguous whatever the gradient's layout (blind69/bq01's H200 per-op truth: LeViT's
        # channels-last gradient of an NCHW input reaches the convolution's backward as NCHW)
        if gi is not None and not gi.is_contiguous():
            gi = torch.empty(gi.shape, dtype=gi.dtype, device=gi.device)
        for t in (gi, gw, gb):
            if t is not None:
                cap.track(t, op)
        return gi, gw, gb
    c = x.size(1)
    acc = _acc_bytes(x.dtype)
    held = []
    acc_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    if needs_reduction and sm is not None and sm.numel() == 0 and rm is not None and rm.dtype != acc_dtype:
        held.append(cap.malloc(c * acc, op, "temporary"))  # running_mean->to(acc_type)
    if si is not None and si.numel() == 0 and rv is not None:
        # `at::empty({n_channels}, acc_type)` then `batch_norm_calc_invstd` (blind50/ax01's H200
        # history: 2,048 bytes per 512-channel evaluation backward, freed after the input's gradient)
        held.append(cap.malloc(c * acc, op, "temporary"))
    if needs_reduction:
        cl = _channels_last_kernels(grad) and _channels_last_kernels(x)
        if cl or mask[0]:
            held += [cap.malloc(c * acc, op, "temporary"), cap.malloc(c * acc, op, "temporary")]
        for want, t in ((mask[1], gw), (mask[2], gb)):
            if want and t is not None:
                cap.track(t, op)
            elif cl and w is not None:
                held.append(cap.malloc(c * w.element_size(), op, "temporary"))
        if cl and x.numel() > 0:
            _grid_scratch(cap, x, 2, op)
    if mask[0] and gi is not None:
        gi = _unfused_grad_input(gi, grad, x, train)
        cap.track(gi, op)
    del held
    return gi, gw, gb


def _cudnn_backward(cap, grad, x, w, grads, mask):
    """`cudnn_batch_norm_backward` (cudnn/BatchNorm.cpp) in training: the output's gradient made
    contiguous in the input's format, then grad_input (that format), grad_weight and grad_bias, all
    three whatever the mask (the unwanted ones die on return), and for a channels-last input the
    persistent kernel's workspace (blind78/bz01's H200 per-op truth: PatchTST's transposed 3-D
    gradients copied)."""
    op = "aten::cudnn_batch_norm_backward"
    fmt = suggest_memory_format(x)
    copy = None
    if not grad.is_contiguous(memory_format=fmt):
        copy = cap.malloc(grad.numel() * grad.element_size(), op, "temporary")
    out, held = [], []
    shapes = (x, w, w)
    for want, t, like in zip(mask, grads, shapes, strict=True):
        if want and t is not None:
            if t is grads[0] and not t.is_contiguous(memory_format=fmt):
                t = torch.empty(t.shape, dtype=t.dtype, device=t.device, memory_format=fmt)
            out.append(cap.track(t, op))
        else:
            held.append(cap.malloc(like.numel() * like.element_size(), op, "temporary"))
            out.append(None)
    # `cudnn_batch_norm_backward` gets its handle after the three results: the autograd thread's
    # first cuDNN call takes the driver's piece
    cap.cudnn_thread_handle()
    workspace = _persistent_workspace(cap, x, "backward", op) if _persistent(x) else None
    # C++ destroys the workspace, then the contiguous gradient; the unwanted results die in the
    # caller
    del workspace, copy, held
    return tuple(out)


def _bn_impl(t) -> str:
    """`batch_norm_choose_impl` (Normalization.cu) of one tensor, 32-bit indexing assumed: channels-last
    3-D inputs are "general" there (while `batch_norm_use_channels_last_kernels` takes them)."""
    if t.is_contiguous():
        return "channels_last" if t.dim() >= 2 and t.stride(1) == 1 else "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return "general"


def _unfused_grad_input(gi, grad, x, train: bool):
    """The layout `batch_norm_backward_cuda` gives the input's gradient outside its fused kernel
    (Normalization.cu): in training, the elementwise kernel of the pair's common layout (the
    input's, as `empty_like`) or, where the input and the gradient differ, `at::empty` in the
    input's suggested memory format; in evaluation `at::empty(input.sizes())`, contiguous. The
    Python meta kernel takes the gradient's layout (blind37/ak02's H200 per-op truth: an NCHW
    gradient of a channels-last input gives a channels-last result)."""
    if train:
        a, b = _bn_impl(x), _bn_impl(grad)
        if a == b and a != "general":
            return gi
        fmt = suggest_memory_format(x)
    else:
        fmt = torch.contiguous_format
    if gi.is_contiguous(memory_format=fmt):
        return gi
    return torch.empty(gi.shape, dtype=gi.dtype, device=gi.device, memory_format=fmt)


def _native_group_norm(cap, func, args, kwargs):
    """`native_group_norm`: Y, mean, rstd, then (H*W > 1, with a weight or a bias) the kernel's
    fused parameters `a` and `b`, (N, C) accumulators each (`GroupNormKernelImplInternal`: without
    either, Y is one TensorIterator pass over mean and rstd; functorch's batching rule calls it so)."""
    x = args[0]
    if kwargs or not registered(x):
        return NotImplemented
    n, c, hxw = args[3], args[4], args[5]
    cap.ops += 1
    op = "aten::native_group_norm"
    out = func(*args)
    for t in out:
        cap.track(t, op)
    # H*W == 1: `GroupNorm1dForward`, TensorIterators over mean and rstd, nothing allocated
    if x.numel() > 0 and hxw > 1:
        if args[1] is not None or args[2] is not None:
            a = cap.malloc(n * c * _acc_bytes(x.dtype), op, "temporary")
            b = cap.malloc(n * c * _acc_bytes(x.dtype), op, "temporary")
            # group_norm_kernel.cu's locals die in reverse order of declaration: b, then a
            del b, a
    return out


def _native_group_norm_backward(cap, func, args, kwargs):
    """`native_group_norm_backward`: dX, dgamma, dbeta, then the kernel's `ds`, `db` ((N, C)
    accumulators) and, for dX, `c2`, `c3` ((N, G)) and `c1` ((N, C), the iterator's output, with a
    weight), the last three freed at the end of their block. C++ destroys locals in the reverse of
    their declaration (group_norm_kernel.cu declares c1, c2, c3 in that order, and ds before db):
    c3, c2, c1 go first, then db, then ds (blind188/gf06's H200 history)."""
    if kwargs or len(args) != 10:
        return NotImplemented
    dy, x, _mean, _rstd, gamma, n, c, hxw, group, mask = args
    if not (registered(dy) and registered(x)):
        return NotImplemented
    cap.ops += 1
    op = "aten::native_group_norm_backward"
    out = func(*args)
    for t in out:
        if t is not None:
            cap.track(t, op)
    if x.numel() == 0:
        return out
    acc = _acc_bytes(x.dtype)
    ds = cap.malloc(n * c * acc, op, "temporary")
    db = cap.malloc(n * c * acc, op, "temporary")
    if mask[0]:
        c2 = cap.malloc(n * group * acc, op, "temporary")
        c3 = cap.malloc(n * group * acc, op, "temporary")
        # H*W == 1: `GroupNorm1dBackward` (ds and db made and left unused) folds c1 into its kernel
        c1 = cap.malloc(n * c * acc, op, "temporary") if gamma is not None and hxw > 1 else None
        del c3, c2, c1
    del db, ds
    return out


def _copy_unless_contiguous(cap, t, op):
    """`t.expect_contiguous()`: a copy when `t` is not contiguous."""
    if t is None or t.is_contiguous():
        return None
    return cap.malloc(t.numel() * t.element_size(), op, "temporary")


def _native_layer_norm(cap, func, args, kwargs):
    """`layer_norm_cuda`: the input, weight and bias made contiguous, then Y (contiguous whatever the
    input's strides), mean and rstd."""
    x = args[0]
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::native_layer_norm"
    copies = [_copy_unless_contiguous(cap, t, op) for t in (x, *args[2:4])]
    out = func(x.contiguous(), *args[1:])
    for t in out:
        cap.track(t, op)
    del copies
    return out


def _gamma_beta_blocks(cap, m: int, n: int) -> int:
    """Rows of `LaunchGammaBetaBackwardCUDAKernel`'s partial sums (layer_norm_kernel.cu): 0 unless
    M > 64Ki and N / 32 < SMs / 2, then min(ceil(M / 32), (64Ki / 2) / ceil(N / 32))."""
    if not (m > 64 * 1024 and n // 32 < cap.device.multi_processor_count // 2):
        return 0
    blocks_x = -(-n // 32)
    return min(-(-m // 32), (64 * 1024 // 2) // blocks_x)


def _native_layer_norm_backward(cap, func, args, kwargs):
    """`layer_norm_backward_cuda`: the input, weight and bias made contiguous, then dX (contiguous),
    dgamma, dbeta, then `LayerNormBackwardKernelImpl(dY.contiguous(), ...)` (layer_norm_kernel.cu), whose
    copy of a strided gradient dies at the kernel's return, before the input's copy (blind27/aa07's
    H200 history). Over many rows of few columns the gamma/beta kernel writes per-block partial
    sums, then `*dgamma = dgamma_blocks.sum(0)` (and dbeta's) replaces the outputs allocated
    first, the partial sums dying at the kernel's return (blind10/j02's H200 record)."""
    if kwargs or len(args) != 8:
        return NotImplemented
    dy, x = args[0], args[1]
    if not (registered(dy) and registered(x)):
        return NotImplemented
    cap.ops += 1
    op = "aten::native_layer_norm_backward"
    copies = [_copy_unless_contiguous(cap, t, op) for t in (x, *args[5:7])]
    # dX is `empty_like(*X, LEGACY_CONTIGUOUS_MEMORY_FORMAT)`: contiguous, where the meta kernel
    # would give it dY's strides
    out = func(dy.contiguous(), x.contiguous(), *args[2:])
    n = math.prod(args[2])
    m = x.numel() // n if n else 0
    rows = _gamma_beta_blocks(cap, m, n) if m and n else 0
    if rows == 0:
        for t in out:
            if t is not None:
                cap.track(t, op)
        dy_copy = _copy_unless_contiguous(cap, dy, op) if m and n else None
        del dy_copy, copies
        return out
    dx, dgamma, dbeta = out
    if dx is not None:
        cap.track(dx, op)
    grads = [t for t in (dgamma, dbeta) if t is not None]
    # dgamma and dbeta as first allocated (`at::native::empty_like`), each freed when its sum replaces it
    first = [cap.malloc(t.numel() * t.element_size(), op, "temporary") for t in grads]
    dy_copy = _copy_unless_contiguous(cap, dy, op)
    blocks = [cap.malloc(rows * n * t.element_size(), op, "temporary") for t in grads]
    for i, t in enumerate(grads):
        cap.track(t, "aten::sum")
        elem = t.element_size()
        reduce_scratch(cap, [rows, n], None, [True, False], elem, _acc_bytes(t.dtype), "aten::sum")
        first[i] = None
    del blocks, first
    del dy_copy
    del copies
    return out


def _cudnn_batch_norm(cap, func, args, kwargs):
    """`cudnn_batch_norm` itself, which the twin calls under torch.func's transforms (`_batch_norm`):
    in training, as `_native_batch_norm` where cuDNN is picked (the output, save_mean, save_var and,
    for a channels-last input, the persistent kernel's workspace), and an empty reserve."""
    if kwargs or len(args) != 8 or not registered(args[0]) or not args[5]:
        return NotImplemented
    cap.ops += 1
    x, op = args[0], "aten::cudnn_batch_norm"
    out = func(*args)
    for t in out:
        cap.track(t, op)
    if x.numel() > 0 and _persistent(x):
        workspace = _persistent_workspace(cap, x, "forward", op)
        del workspace
    return out


def _cudnn_batch_norm_backward(cap, func, args, kwargs):
    """`cudnn_batch_norm_backward` itself (under torch.func's `grad` without `vmap`, after
    `_batch_norm`): the three gradients and, for a channels-last input, the persistent kernel's
    workspace (`_cudnn_backward`; CudnnBatchNormBackward0 made the gradient contiguous)."""
    if kwargs or len(args) != 9 or not registered(args[0]):
        return NotImplemented
    cap.ops += 1
    x, op = args[0], "aten::cudnn_batch_norm_backward"
    out = func(*args)
    for t in out:
        cap.track(t, op)
    cap.cudnn_thread_handle()
    workspace = _persistent_workspace(cap, x, "backward", op) if x.numel() > 0 and _persistent(x) else None
    del workspace
    return out


# ---- SyncBatchNorm ---------------------------------------------------------------------------
# `nn.SyncBatchNorm` in training under a process group (torch/nn/modules/_functions.py) calls the
# CUDA-only ops below (no meta kernel, no CPU kernel): batch_norm_stats, then the gathered
# statistics' batch_norm_gather_stats_with_counts and batch_norm_elemt; in backward
# batch_norm_backward_reduce and batch_norm_backward_elemt. Their allocations, from
# `aten/src/ATen/native/cuda/Normalization.cu` and `Normalization.cuh` (PyTorch 2.11).


def _meta(shape, dtype, like=None, memory_format=None):
    """A plain meta tensor of `shape` and `dtype`, or `empty_like(like, memory_format=...)`."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        if like is not None:
            fmt = torch.preserve_format if memory_format is None else memory_format
            return torch.empty_like(like, device="meta", memory_format=fmt)
        return torch.empty(shape, dtype=dtype, device="meta")


def _stats_dtype(x) -> torch.dtype:
    """`at::toAccumulateType(x, /*is_cuda=*/true)` of a floating input."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _reshape_copy(cap, t, op):
    """`t.reshape({N, C, -1})` of the non-channels-last templates: a copy where `t`'s strides
    cannot be viewed so (a dense input views; another is named unmeasured and not copied)."""
    if t.numel() and not t.is_contiguous() and not _channels_last_kernels(t):
        cap.note_unmeasured(f"{op} of a non-dense input (the reshape's copy)")


def _batch_norm_stats(cap, func, args, kwargs):
    """`batch_norm_stats_cuda`: save_mean and save_invstd, one per channel in the accumulate type;
    a channels-last input's `batch_norm_stats_channels_last_cuda_template` stages 4 accumulators per
    channel and grid row (with semaphores) as `native_batch_norm`'s."""
    x = args[0]
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::batch_norm_stats"
    c = x.size(1)
    out = (cap.track(_meta((c,), _stats_dtype(x)), op), cap.track(_meta((c,), _stats_dtype(x)), op))
    if x.numel() > 0:
        if _channels_last_kernels(x):
            _grid_scratch(cap, x, 4, op)
        else:
            _reshape_copy(cap, x, op)
    return out


def _batch_norm_gather_stats_with_counts(cap, func, args, kwargs):
    """`batch_norm_gather_stats_cuda_template`: the reduced mean and invstd, (C,) each, in the
    gathered statistics' dtype (float for half or bfloat16 ones)."""
    x, mean = args[0], args[1]
    if kwargs or not (registered(x) and registered(mean)):
        return NotImplemented
    cap.ops += 1
    op = "aten::batch_norm_gather_stats_with_counts"
    dtype = torch.float32 if mean.dtype in (torch.float16, torch.bfloat16) else mean.dtype
    c = mean.size(1)
    return cap.track(_meta((c,), dtype), op), cap.track(_meta((c,), dtype), op)


def _batch_norm_elemt(cap, func, args, kwargs):
    """`batch_norm_elemt_cuda`: `at::empty_like(self, self.suggest_memory_format())`, nothing else."""
    x = args[0]
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::batch_norm_elemt"
    if not _channels_last_kernels(x):
        _reshape_copy(cap, x, op)
    out = cap.track(_meta(None, None, like=x, memory_format=suggest_memory_format(x)), op)
    # the same `batch_norm_elementwise` as native batch norm's: its parameters' dtype check
    error = _elementwise_dtype_error(x, args[1], args[2])
    if error is not None:
        del out
        raise RuntimeError(error)
    return out


def _batch_norm_backward_reduce(cap, func, args, kwargs):
    """`batch_norm_backward_reduce_cuda`: with the output's gradient and the input both taking the
    channels-last kernels (a contiguous weight, mean and invstd), its channels-last template makes
    sum_dy and sum_dy_xmu (the mean's dtype), grad_weight and grad_bias (the weight's; (0,) of the
    mean's without a weight) whatever the flags, then stages 2 accumulators per channel and grid
    row; otherwise sum_dy and sum_dy_xmu (like the mean) for the input's gradient, grad_weight and
    grad_bias (the weight's dtype) where asked, the others undefined."""
    if kwargs or len(args) != 8:
        return NotImplemented
    grad, x, mean, invstd, w, input_g, weight_g, bias_g = args
    if not (registered(grad) and registered(x) and registered(mean)):
        return NotImplemented
    cap.ops += 1
    op = "aten::batch_norm_backward_reduce"
    c = x.size(1)
    if (
        _channels_last_kernels(grad)
        and _channels_last_kernels(x)
        and (w is None or w.is_contiguous())
        and mean.is_contiguous()
        and invstd.is_contiguous()
    ):
        sum_dy = cap.track(_meta((c,), mean.dtype), op)
        sum_dy_xmu = cap.track(_meta((c,), mean.dtype), op)
        shape, dtype = ((c,), w.dtype) if w is not None else ((0,), mean.dtype)
        gw = cap.track(_meta(shape, dtype), op)
        gb = cap.track(_meta(shape, dtype), op)
        if x.numel() > 0:
            _grid_scratch(cap, x, 2, op)
        return sum_dy, sum_dy_xmu, gw, gb
    _reshape_copy(cap, x, op)
    _reshape_copy(cap, grad, op)
    sum_dy = sum_dy_xmu = gw = gb = None
    if input_g:
        sum_dy = cap.track(_meta(mean.shape, mean.dtype), op)
        sum_dy_xmu = cap.track(_meta(mean.shape, mean.dtype), op)
    if weight_g:
        gw = cap.track(_meta((c,), w.dtype), op)
    if bias_g:
        gb = cap.track(_meta((c,), w.dtype), op)
    return sum_dy, sum_dy_xmu, gw, gb


def _batch_norm_backward_elemt(cap, func, args, kwargs):
    """`batch_norm_backward_elemt_cuda`: the input's gradient, `empty_like(input)` in the
    channels-last template (the output's gradient taking the channels-last kernels), else
    contiguous (`empty_like(input_reshaped, LEGACY_CONTIGUOUS_MEMORY_FORMAT)`)."""
    grad, x = args[0], args[1]
    if kwargs or not (registered(grad) and registered(x)):
        return NotImplemented
    cap.ops += 1
    op = "aten::batch_norm_backward_elemt"
    if _channels_last_kernels(grad):
        return cap.track(_meta(None, None, like=x), op)
    _reshape_copy(cap, x, op)
    _reshape_copy(cap, grad, op)
    return cap.track(_meta(None, None, like=x, memory_format=torch.contiguous_format), op)


DISPATCH[aten.batch_norm_stats.default] = _batch_norm_stats
DISPATCH[aten.batch_norm_gather_stats_with_counts.default] = _batch_norm_gather_stats_with_counts
DISPATCH[aten.batch_norm_elemt.default] = _batch_norm_elemt
DISPATCH[aten.batch_norm_backward_reduce.default] = _batch_norm_backward_reduce
DISPATCH[aten.batch_norm_backward_elemt.default] = _batch_norm_backward_elemt


DISPATCH[aten.native_batch_norm.default] = _native_batch_norm
DISPATCH[aten.cudnn_batch_norm.default] = _cudnn_batch_norm
DISPATCH[aten.cudnn_batch_norm_backward.default] = _cudnn_batch_norm_backward
DISPATCH[aten.native_batch_norm_backward.default] = _native_batch_norm_backward
DISPATCH[aten.native_group_norm.default] = _native_group_norm
DISPATCH[aten.native_group_norm_backward.default] = _native_group_norm_backward
DISPATCH[aten.native_layer_norm.default] = _native_layer_norm
DISPATCH[aten.native_layer_norm_backward.default] = _native_layer_norm_backward
for _name in (
    "aten::native_batch_norm",
    "aten::native_batch_norm_backward",
    "aten::native_group_norm_backward",
):
    SCRATCH_UNMODELLED.discard(_name)


# ---- RMSNorm -------------------------------------------------------------------------------
# `rms_norm` (layer_norm.cpp) runs the fused kernel on CUDA, `_fused_rms_norm` (layer_norm_kernel.cu):
# the input made contiguous, Y and the fp32 rstd ((*batch, 1, ...)); autograd saves input, weight and
# rstd (derivatives.yaml), and `_fused_rms_norm_backward` allocates dX and dgamma. On meta tensors
# rms_norm decomposes into pow/mean/rsqrt/mul, so the rule sits at the torch-function level; a
# DTensor's `_fused_rms_norm` takes AutogradCUDA's kernel (`_capture._autograd_meta`), and its
# FusedRmsNormBackward0 calls `_fused_rms_norm_backward` as an op on the local tensors
# (`_fused_rms_norm_backward`). A jagged nested tensor dispatches at AutogradNestedTensor, whose
# kernel is the composite on the GPU as on meta (torch 2.11's dispatch table; the dt75 probe).


def _rms_results(cap, x, op, *shapes_dtypes):
    """Plain meta results of the given (shape, dtype), allocated in the twin in order."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        outs = [None if s is None else torch.empty(s, dtype=d, device="meta") for s, d in shapes_dtypes]
    for t in outs:
        if t is not None:
            cap.track(t, op)
    return outs


class _FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cap, x, weight, normalized_shape, eps, both=False):
        op = "aten::_fused_rms_norm"
        copy = _copy_unless_contiguous(cap, x, op)
        stat = list(x.shape[: x.dim() - len(normalized_shape)]) + [1] * len(normalized_shape)
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        y, rstd = _rms_results(cap, x, op, (x.shape, x.dtype), (stat, acc))
        del copy
        # saved as autograd saves `_fused_rms_norm`'s result1: released after the backward
        ctx.cap, ctx.normalized_shape = cap, normalized_shape
        ctx.save_for_backward(x, weight, rstd)
        if both:
            # the op's (Y, rstd): rstd's own gradient is not modelled (a graph's getitem drops it)
            ctx.mark_non_differentiable(rstd)
            ctx.set_materialize_grads(False)  # no zeros for rstd's gradient
            return y, rstd
        return y

    @staticmethod
    def backward(ctx, gy, *_):
        x, weight, _rstd = ctx.saved_tensors
        if gy is None:
            return None, None, None, None, None, None
        want_w = weight is not None and ctx.needs_input_grad[2]
        gx, gw = _rms_norm_backward_kernel(
            ctx.cap, gy, x, weight, ctx.normalized_shape, ctx.needs_input_grad[1], want_w
        )
        return None, gx, gw, None, None, None


def _rms_norm_backward_kernel(cap, gy, x, weight, normalized_shape, want_x, want_w):
    """`_fused_rms_norm_backward`'s CUDA kernel: (dX, dgamma), each None where not wanted. As layer
    norm's backward: X expected contiguous, dX, dgamma, then `dY.contiguous()` at the kernel's call
    (the H200's order in fixtures/run/sweeps/op_rules_h200.jsonl), a copy when dY is strided or
    expanded (a `sum()`'s gradient: the H100's dt75 probe, DTensor rms_norm float32)."""
    op = "aten::_fused_rms_norm_backward"
    x_copy = _copy_unless_contiguous(cap, x, op)
    n = math.prod(normalized_shape)
    m = x.numel() // n if n else 0
    rows = _gamma_beta_blocks(cap, m, n) if want_w and m and n else 0
    if rows:
        # the layer norm backward's kernel with the rms flag: over many rows of few columns the
        # gamma kernel writes per-block partial sums and `*dgamma = dgamma_blocks.sum(0)`
        # replaces the dgamma allocated first, as `_native_layer_norm_backward` (blind200/gr03's
        # H200 per-op truth: the q/k RMSNorm(64) of (16, 1024, 16, 64) bfloat16, 8 allocations)
        (gx,) = _rms_results(cap, x, op, (x.shape, x.dtype) if want_x else (None, None))
        elem = weight.element_size()
        first = cap.malloc(weight.numel() * elem, op, "temporary")
        gy_copy = _copy_unless_contiguous(cap, gy, op)
        blocks = cap.malloc(rows * n * elem, op, "temporary")
        (gw,) = _rms_results(cap, x, "aten::sum", (weight.shape, weight.dtype))
        reduce_scratch(cap, [rows, n], None, [True, False], elem, _acc_bytes(weight.dtype), "aten::sum")
        del first, blocks, gy_copy, x_copy
        return gx, gw
    gx, gw = _rms_results(
        cap,
        x,
        op,
        (x.shape, x.dtype) if want_x else (None, None),
        (weight.shape, weight.dtype) if want_w else (None, None),
    )
    # the kernel runs only where M > 0 and N > 0
    gy_copy = _copy_unless_contiguous(cap, gy, op) if m and n else None
    del gy_copy, x_copy
    return gx, gw


def _fused_rms_norm_backward(cap, func, args, kwargs):
    """`aten._fused_rms_norm_backward` called as an op on simulated tensors: FusedRmsNormBackward0's
    call on a DTensor, which DTensor runs on the local tensors (`fused_rms_norm_bwd_strategy`,
    _math_ops.py), and a GPU program graph's node. The meta kernel (the decomposition) gives the
    outputs but not the CUDA kernel's copy of a strided dY."""
    names = ("grad_out", "input", "normalized_shape", "rstd", "weight", "output_mask")
    a = dict(zip(names, args, strict=False)) | kwargs
    gy, x, weight = a.get("grad_out"), a.get("input"), a.get("weight")
    if set(a) != set(names) or not (registered(gy) and registered(x)):
        return NotImplemented
    if weight is not None and not registered(weight):
        return NotImplemented
    cap.ops += 1
    mask = a["output_mask"]
    return _rms_norm_backward_kernel(
        cap, gy, x, weight, list(a["normalized_shape"]), mask[0], mask[1] and weight is not None
    )


def _fused_rms_norm_args(args, kwargs):
    """`(input, weight, normalized_shape, eps)` of an `rms_norm` call the fused CUDA kernel runs:
    simulated operands, the weight absent or of the input's dtype; None for any other call."""
    names = ("input", "normalized_shape", "weight", "eps")
    a = dict(zip(names, args, strict=False)) | kwargs
    x, weight = a.get("input"), a.get("weight")
    if not registered(x) or (weight is not None and not registered(weight)) or set(a) - set(names):
        return None
    if weight is not None and weight.dtype != x.dtype:
        return None
    shape = a.get("normalized_shape")
    return x, weight, [shape] if isinstance(shape, int) else list(shape), a.get("eps")


def _rms_norm(cap, func, args, kwargs):
    """`torch.rms_norm` / `F.rms_norm` of a simulated tensor: the fused CUDA kernel where the weight
    is absent or of the input's dtype; else `rms_norm_symint` (layer_norm.cpp) warns "Mismatch dtype
    between input and weight" and runs `rms_norm_composite` (the input upcast, pow, mean, rsqrt and
    muls), the decomposition the meta tensors take too (blind99/cu05's H200 per-op truth: a bf16
    input under autocast with an fp32 weight, 7 allocations)."""
    a = _fused_rms_norm_args(args, kwargs)
    if a is None:
        return NotImplemented
    out = _rms_norm_forward_ad(cap, a)
    if out is not NotImplemented:
        return out
    cap.ops += 1
    return _FusedRMSNorm.apply(cap, *a)


def _fused_rms_norm_op(cap, func, args, kwargs):
    """`aten._fused_rms_norm.default` called as an op: the node `run_decompositions` keeps in a GPU
    program's graph (`_compile.run_decompositions_fn`), which `ep.module()` runs. On CUDA it is the
    fused kernel with its autograd formula (input, weight and rstd saved), as under `F.rms_norm`;
    a meta tensor's dispatcher has no kernel for it and would take the composite (pow, mean,
    rsqrt, muls, their fp32 results saved)."""
    a = _fused_rms_norm_args(args, kwargs)
    if a is None:
        return NotImplemented
    cap.ops += 1
    return _FusedRMSNorm.apply(cap, *a, True)


def _rms_norm_op(cap, func, args, kwargs):
    """`aten.rms_norm.default` called as an op (torch.export's training IR keeps it): the kernel
    `F.rms_norm` binds, so `_rms_norm`'s rule."""
    return _rms_norm(cap, func, args, kwargs)


def _batch_norm(cap, func, args, kwargs):
    """`torch.batch_norm` where `_batch_norm_impl_index` (Normalization.cpp) picks cuDNN: the input
    is made contiguous in its suggested memory format first (`input.contiguous(...)`, an autograd
    copy), and cuDNN's batch norm runs on, and saves for backward, that copy (blind78/bz01's H200
    per-op truth: PatchTST's batch norm of transposed (B, C, L) activations). Under torch.func's
    transforms the same holds for the logical tensor: a `vmap`ped input whose batch dimension is
    not in front (a batched-weight convolution's output keeps it after the samples) reads as not
    contiguous, and `contiguous` clones it with the batch dimension moved to the front, so
    functorch's `cudnn_batch_norm` batch rule (BatchRulesNorm.cpp) then copies it again to fold
    that dimension into the channels (blind181/fy04's H200 memory history: `vmap` over first-order
    MAML tasks with BatchNorm2d(track_running_stats=False))."""
    names = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")
    names += ("cudnn_enabled",)
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a.get("input")
    if set(a) - set(names) or len(a) != len(names):
        return NotImplemented
    out = _batch_norm_forward_ad(cap, a)
    if out is not NotImplemented:
        return out
    if not _reads_cuda(x) or not a["cudnn_enabled"]:
        return NotImplemented
    if not _cudnn_selected(
        x, a["weight"], a["bias"], a["running_mean"], a["running_var"], a["training"], a["eps"]
    ):
        return NotImplemented
    fmt = suggest_memory_format(x)
    if a["training"] and not registered(x):
        # under torch.func's transforms the twin runs cuDNN's op itself, so that autograd records
        # CudnnBatchNormBackward0, whose `grad.contiguous(input.suggest_memory_format())` copies
        # a vmapped gradient (blind181/fy04's H200 history), and functorch's cudnn batch rules
        # run as on the GPU (their backward ends in `at::native_batch_norm_backward`, the CUDA
        # kernel, which the twin still takes for cuDNN's: two (B0 * C)-float temporaries more)
        x = x.contiguous(memory_format=fmt)
        args = (x, a["weight"], a["bias"], a["running_mean"], a["running_var"], True, a["momentum"], a["eps"])
        return torch.ops.aten.cudnn_batch_norm(*args)[0]
    if x.is_contiguous(memory_format=fmt):
        return NotImplemented
    a["input"] = x.contiguous(memory_format=fmt)
    return func(*(a[n] for n in names))


def _functional_batch_norm(cap, func, args, kwargs):
    """`F.batch_norm`, which calls `torch.batch_norm` (see `_batch_norm`) with cuDNN enabled as
    `torch.backends.cudnn.enabled` says."""
    names = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    a = dict(zip(names, args, strict=False)) | kwargs
    if set(a) - set(names):
        return NotImplemented
    a = {"weight": None, "bias": None, "training": False, "momentum": 0.1, "eps": 1e-5} | a
    order = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")
    call = [a[n] for n in order] + [torch.backends.cudnn.enabled]
    if a["training"] and registered(a["input"]):
        torch.nn.functional._verify_batch_size(a["input"].size())
    return _batch_norm(cap, torch.batch_norm, call, {})


def _layer_norm_forward_ad(cap, func, args, kwargs):
    """`torch.layer_norm` of a simulated input carrying a forward-AD tangent (`fwAD.make_dual`), its
    weight and bias too where given, nothing requiring grad: `native_layer_norm` on the primals,
    then `layer_norm_jvp` (FunctionsManual.cpp: `_invstd_jvp`, `_norm_jvp`, `_affine_jvp`) as CUDA
    tensors run it, in place (`_forward_ad`). The twin's tensors count as subclass-like
    (`areAnyTensorSubclassLike`: a dispatch mode is on), whose out-of-place path keeps two more
    input-sized temporaries at its peak (blind293/kh01's forward gradients: 6 where the H100's
    forward peaked at 4 activations of the norm)."""
    names = ("input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable")
    a = {"weight": None, "bias": None, "eps": 1e-5} | dict(zip(names, args, strict=False)) | kwargs
    if set(a) - set(names):
        return NotImplemented
    found = _fad.duals(a["input"], a["weight"], a["bias"])
    if found is None:
        return NotImplemented
    level, ((xp, xt), (wp, wt), (bp, bt)) = found
    shape = tuple(a["normalized_shape"])
    cap.ops += 1
    y, mean, rstd = torch.native_layer_norm(xp, shape, wp, bp, a["eps"])
    axis = xp.dim() - len(shape)
    dims = list(range(axis, xp.dim()))
    view_size = [*xp.shape[:axis], *([1] * len(shape))]
    view_affine = [*([1] * axis), *xp.shape[axis:]]
    mean_p, invstd_p = mean.view(view_size), rstd.view(view_size)
    result_t = _fad.norm_jvp(xp, xt, mean_p, invstd_p, dims, math.prod(xp.shape[axis:]))
    # layer_norm_jvp's result_p, when there is a weight
    result_p = (xp - mean_p) * invstd_p if wp is not None else None
    result_t = _fad.affine_jvp(
        result_p,
        result_t,
        _fad.view(wp, view_affine),
        _fad.view(wt, view_affine),
        _fad.view(bt, view_affine),
    )
    del result_p
    return _fad.make_dual(y, result_t, level), mean, rstd


def _batch_norm_forward_ad(cap, a):
    """`torch.batch_norm` of a simulated dual input (see `_layer_norm_forward_ad`): the op on the
    primals (`native_batch_norm`, whose rule models cuDNN's where `_batch_norm_impl_index` picks it),
    then `batch_norm_jvp` in place: in training `_norm_jvp` over the saved statistics, in evaluation
    `input_t * invstd` with `invstd = 1 / sqrt(running_var + eps)` (`Scalar / Tensor` is
    `empty_like(t).fill_(s).div_(t)`: ATen's TensorOperators.h), then `_affine_jvp`. Its saved
    statistics die after the tangent (`_batch_norm_impl_index`'s tuple, element by element)."""
    x, w, b, rm, rv = (a[n] for n in ("input", "weight", "bias", "running_mean", "running_var"))
    training = a["training"]
    if x is None or x.dim() < 2 or not x.is_contiguous(memory_format=suggest_memory_format(x)):
        return NotImplemented
    if not training and (rm is None or rv is None):
        return NotImplemented
    found = _fad.duals(x, w, b)
    if found is None or any(_fad.duals(s) is not None for s in (rm, rv) if s is not None):
        return NotImplemented
    level, ((xp, xt), (wp, wt), (bp, bt)) = found
    cap.ops += 1
    y, save_mean, save_invstd = torch.ops.aten.native_batch_norm(
        xp, wp, bp, rm, rv, training, a["momentum"], a["eps"]
    )
    view_size = [1] * xp.dim()
    view_size[1] = xp.shape[1]
    dims = [d for d in range(xp.dim()) if d != 1]
    if training:
        mean_p, invstd_p = save_mean.view(view_size), save_invstd.view(view_size)
        result_t = _fad.norm_jvp(xp, xt, mean_p, invstd_p, dims, xp.numel() // max(xp.shape[1], 1))
    else:
        mean_p = rm.view(view_size)
        shifted = rv + a["eps"]
        root = shifted.sqrt()
        invstd = torch.empty_like(root).fill_(1).div_(root)
        invstd_p = invstd.view(view_size)
        del invstd, root, shifted
        result_t = xt * invstd_p
    result_p = (xp - mean_p) * invstd_p if wp is not None else None
    result_t = _fad.affine_jvp(
        result_p,
        result_t,
        _fad.view(wp, view_size),
        _fad.view(wt, view_size),
        _fad.view(bt, view_size),
    )
    del result_p, invstd_p, mean_p
    out = _fad.make_dual(y, result_t, level)
    del result_t, y, save_mean, save_invstd
    return out


def _group_norm_forward_ad(cap, func, args, kwargs):
    """`F.group_norm` / `torch.group_norm` of a simulated dual input (see `_layer_norm_forward_ad`):
    `group_norm` (group_norm.cpp) calls `native_group_norm` on the contiguous input, whose autograd
    kernel computes all three outputs' tangents in order (derivatives.yaml): `group_norm_jvp` (the
    input viewed as (1, N * G, -1), `batch_norm_jvp` in training over the saved statistics, then
    `_affine_jvp` per channel), `group_norm_mean_jvp` (a mean) and `group_norm_invstd_jvp`
    (`_invstd_jvp` with the primal and the tangent in swapped places, as the source passes them);
    the statistics and their tangents die when `group_norm` returns Y."""
    names = ("input", "num_groups", "weight", "bias", "eps", "cudnn_enabled")
    a = {"weight": None, "bias": None, "eps": 1e-5} | dict(zip(names, args, strict=False)) | kwargs
    x, groups = a["input"], a["num_groups"]
    if set(a) - set(names) or not isinstance(groups, int) or x is None or x.dim() < 2:
        return NotImplemented
    if not x.is_contiguous() or any(
        t is not None and not t.is_contiguous() for t in (a["weight"], a["bias"])
    ):
        return NotImplemented
    found = _fad.duals(x, a["weight"], a["bias"])
    if found is None:
        return NotImplemented
    level, ((xp, xt), (wp, wt), (bp, bt)) = found
    if func is torch.nn.functional.group_norm:
        torch.nn.functional._verify_batch_size([xp.size(0) * xp.size(1) // groups, groups, *xp.size()[2:]])
    n, c = xp.shape[0], xp.shape[1]
    hxw = xp.numel() // max(n * c, 1)
    cap.ops += 1
    y, mean, rstd = torch.ops.aten.native_group_norm(xp, wp, bp, n, c, hxw, groups, a["eps"])
    flat = [1, n * groups, -1 if n else 1]
    xt_r, xp_r = xt.view(flat), xp.view(flat)
    stat_view = [1, n * groups, 1]
    k = xp_r.shape[2]
    # group_norm_jvp: batch_norm_jvp(train) of the reshaped input, no affine there
    result_t = _fad.norm_jvp(xp_r, xt_r, mean.view(stat_view), rstd.view(stat_view), [0, 2], k).view(xp.shape)
    result_p = None
    if wp is not None:
        result_p = ((xp_r - mean.view(stat_view)) * rstd.view(stat_view)).view(xp.shape)
    affine = [1] * xp.dim()
    affine[1] = c
    result_t = _fad.affine_jvp(
        result_p,
        result_t,
        _fad.view(wp, affine),
        _fad.view(wt, affine),
        _fad.view(bt, affine),
    )
    del result_p
    # group_norm_mean_jvp, then group_norm_invstd_jvp: `_invstd_jvp(input_t, input_p, ...)`
    mean_t = xt_r.mean([2], False).view_as(mean)
    rstd_t = _fad.invstd_jvp(xt_r, xp_r, mean.view(flat), rstd.view(flat), [2], k, False).view_as(rstd)
    out = _fad.make_dual(y, result_t, level)
    # the tuple's elements go in order; each TensorImpl's autograd meta (its tangent) before its storage
    del result_t, y, mean_t, mean, rstd_t, rstd
    return out


def _rms_norm_forward_ad(cap, a):
    """`torch.rms_norm` taking the fused kernel (`_rms_norm`) with a simulated dual input (see
    `_layer_norm_forward_ad`): `_fused_rms_norm` on the primals, then its autograd kernel's tangents
    in order (derivatives.yaml): `rms_norm_jvp` (in place: `rstd_t` summed from `input_t * input_p`,
    `result_t = input_t * rstd_p` plus `input_p * rstd_t`, whose temporary dies with its block,
    `result_p = input_p * rstd_p` with a weight, then `_affine_jvp`) and `rms_norm_rstd_jvp` (rstd's
    own tangent, which dies with rstd when `rms_norm` returns Y)."""
    x, weight, shape, eps = a
    found = _fad.duals(x, weight)
    if found is None:
        return NotImplemented
    level, ((xp, xt), (wp, wt)) = found
    cap.ops += 1
    y, rstd = _FusedRMSNorm.apply(cap, xp, wp, shape, eps, True)
    axis = xp.dim() - len(shape)
    dims = list(range(axis, xp.dim()))
    view_affine = [*([1] * axis), *xp.shape[axis:]]
    numel = math.prod(xp.shape[axis:])
    rstd_t = _fad.rms_rstd_jvp(xp, xt, rstd, dims, numel)
    result_t = xt * rstd
    temp = xp * rstd_t
    result_t += temp
    del temp
    result_p = xp * rstd if wp is not None else None
    result_t = _fad.affine_jvp(
        result_p,
        result_t,
        _fad.view(wp, view_affine),
        _fad.view(wt, view_affine),
        None,
    )
    del result_p, rstd_t
    own_t = _fad.rms_rstd_jvp(xp, xt, rstd, dims, numel)
    out = _fad.make_dual(y, result_t, level)
    del result_t, y, own_t, rstd
    return out


def _layer_norm_fn(cap, func, args, kwargs):
    """`F.layer_norm` and `torch.layer_norm` (its call, with `cudnn_enable`):
    `_layer_norm_forward_ad` where it applies."""
    out = _layer_norm_forward_ad(cap, func, args, kwargs)
    if out is NotImplemented:
        return out
    # `std::get<0>` of native_layer_norm's tuple: its elements die in order, mean before rstd
    # (a Python tuple's die last first)
    y, mean, rstd = out
    del out, mean, rstd
    return y


def _register_rms_norm():
    from ._kernels import FUNCTIONS

    FUNCTIONS[torch.layer_norm] = _layer_norm_fn
    FUNCTIONS[torch.nn.functional.layer_norm] = _layer_norm_fn

    FUNCTIONS[torch.group_norm] = _group_norm_forward_ad
    FUNCTIONS[torch.nn.functional.group_norm] = _group_norm_forward_ad
    FUNCTIONS[torch.batch_norm] = _batch_norm
    FUNCTIONS[torch.nn.functional.batch_norm] = _functional_batch_norm
    FUNCTIONS[torch.rms_norm] = _rms_norm
    FUNCTIONS[torch.nn.functional.rms_norm] = _rms_norm
    FUNCTIONS[torch.ops.aten.rms_norm.default] = _rms_norm_op
    FUNCTIONS[torch.ops.aten._fused_rms_norm.default] = _fused_rms_norm_op
    DISPATCH[aten._fused_rms_norm_backward.default] = _fused_rms_norm_backward


_register_rms_norm()


# ---- Mish -------------------------------------------------------------------------------------
# `mish_backward` has CPU and CUDA kernels (ActivationMishKernel.cu: one TensorIterator,
# `borrowing_binary_op(grad_input, grad_output, self)`, allocating grad_input alone) and a
# CompositeImplicitAutograd one (`math_mish_backward`: softplus, tanh, sigmoid and four products)
# for the backends without: meta tensors take it, the GPU never does (blind189/gg02's H200 history:
# the Diffusion Policy's Mish backwards allocate grad_input only). The math kernel also sits at the
# AutogradMeta key, above the mode, so MishBackward0's call (C++) decomposes before the mode sees
# it: for the capture's life `mish_backward`'s AutogradMeta kernel (`_capture._autograd_meta`, which
# hands a DTensor's to AutogradCUDA) takes `_mish_backward_autograd` for meta tensors, which passes
# it below autograd, as AutogradCUDA's does, and the mode runs it as one op (`_mish_backward`): for a Mish
# called plainly and one called under `torch.func.vmap` alike (blind208/gz01's H200 history: a
# vmapped Q ensemble's Mish backwards allocate the stacked grad_input only). Of ATen's ops only this
# one and `_fused_rms_norm` (above) have a CUDA kernel and a math kernel but no meta one (torch
# 2.11's dispatcher).


def _mish_backward_autograd(grad_output, self):
    """AutogradMeta's `mish_backward`: below autograd to the mode where no gradient is recorded
    (a backward's call); the math kernel where one is (a direct call under grad mode)."""
    op = torch.ops.aten.mish_backward.default
    if torch.is_grad_enabled() and (grad_output.requires_grad or self.requires_grad):
        return op.decompose(grad_output, self)
    with torch._C._AutoDispatchBelowAutograd():
        return op(grad_output, self)


META_AUTOGRAD["mish_backward"] = _mish_backward_autograd


def _mish_backward(cap, func, args, kwargs):
    """`mish_backward` of simulated tensors: grad_input alone, laid out as the binary iterator lays
    it out."""
    from torch.utils._python_dispatch import _disable_current_modes

    from ._tensor import fast_setup_layout

    gy, x = args
    if kwargs or not (registered(gy) and registered(x)):
        return NotImplemented
    with _disable_current_modes():
        g, s = (torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in (gy, x))
        gx = fast_setup_layout(torch.mul(g, s), (g, s))
    return cap.track(gx, "aten::mish_backward")


DISPATCH[torch.ops.aten.mish_backward.default] = _mish_backward
