"""The memory of Inductor's pad_mm benchmark at compile time (`_should_pad`,
torch/_inductor/fx_passes/pad_mm.py, PyTorch 2.11).

For a matmul of the graph that `can_pad` (a dimension not a multiple of 8 in fp16/bf16, of 4 in
fp32), `_should_pad` times the matmul as it is and padded on the GPU, once per key of the process
(`should_pad_bench_key`, cached by `get_pad_cache` and `should_pad_memoizer`; the base time once per
shape), on random operands it allocates through the caching allocator. Which of the two is faster
is a timing the twin does not know (taken as not padded); the allocations are modelled here, in
order: the random operands, the padded copies made before timing, the timed calls (their outputs,
padded temporaries, cuBLAS's workspace) and `InductorBenchmarker.benchmark_gpu`'s L2-flush buffer
(runtime/benchmarking.py)."""

from __future__ import annotations

import math
import types

import torch

from ._kernels.matmul import _batch_needs_copy, _matrix_needs_copy, addmm_uses_lt, cublaslt_preferred

_OP = "inductor::pad_mm_benchmark"


def _compute_bound(m: int, k: int, n: int, dtype: torch.dtype) -> bool:
    """`is_mm_compute_bound`: arithmetic intensity above half the machine balance, TFLOPS from
    `datasheet_tops` (torch/_inductor/analysis/device_info.py, looked up by
    `torch.cuda.get_device_name()`) over the DRAM bandwidth (`triton.testing.get_dram_gbps`). The
    twin's devices are not in that table under their own names ("NVIDIA H200", "NVIDIA H100 80GB
    HBM3"; only "NVIDIA L4" is), and the fallback, Triton's `get_max_tensorcore_tflops`, is given
    `max_clock_rate()` in MHz where it multiplies a clock in kHz: under 1 TFLOPS, a balance under
    0.2 FLOP/byte, which every matmul's intensity (at least 1/3) exceeds. For the L4 the
    datasheet's TFLOPS over its datasheet bandwidth stands in for the driver's."""
    from torch._inductor.analysis.device_info import lookup_device_info

    denominator = m * k + n * k + m * n
    if denominator == 0:
        return False
    info = lookup_device_info(torch.cuda.get_device_name())
    tf32 = torch.backends.cuda.matmul.fp32_precision == "tf32"
    key = "torch.tf32" if dtype == torch.float32 and tf32 else dtype
    if info is None or key not in info.tops:
        return True
    balance = 1000 * info.tops[key] / info.dram_bw_gbs * 0.5
    return m * n * k / denominator > balance


def _real_bytes(t: torch.Tensor) -> int:
    """`realize_tensor`'s `torch.randn(real_size)`: the extent the size and stride hints span."""
    from torch._inductor.fx_passes.pad_mm import realize_symbols

    sizes, strides = realize_symbols(t.size()), realize_symbols(t.stride())
    return (sum((d - 1) * s for d, s in zip(sizes, strides, strict=True)) + 1) * t.element_size()


class _Strided:
    """An operand's sizes and strides as `_matrix_needs_copy` and `_batch_needs_copy` read them (the
    realized operand `torch.as_strided` makes from the fake's hints): no fake tensor is made, whose
    making would allocate `init_gpu_context`'s 4 bytes the GPU's benchmark does not."""

    def __init__(self, sizes, strides):
        self.shape, self._strides = torch.Size(sizes), tuple(strides)

    def stride(self):
        return self._strides

    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in reversed(list(zip(self.shape, self._strides, strict=True))):
            if size != 1 and stride != expected:
                return math.prod(self.shape) == 0
            expected *= size
        return True

    def t(self):
        return _Strided(self.shape[::-1], self._strides[::-1])


def _dense(shape, dtype) -> types.SimpleNamespace:
    """A contiguous operand as `addmm_uses_lt` reads it (a padded copy, `constant_pad_nd`'s or
    `cat`'s output)."""
    return types.SimpleNamespace(
        shape=torch.Size(shape), dtype=dtype, dim=lambda: len(shape), is_contiguous=lambda: True
    )


#: pad_mm's timed choices measured as "padded", by GPU name: (op, dtype, (M, K, N), mat1 and mat2
#: column-major, mat1 and mat2 padded before timing). The H200's from blind252's generated wrappers
#: and histories (`empty_strided_cuda` of the padded shapes, 50,264 and 30,528 columns): is01's GPT-2
#: lm_head in bf16 (the forward at 4,096 and 8,192 rows, both backward products) and is03's BERT
#: decoder in fp16 (its addmm, and the backward's input-gradient mm; its weight-gradient mm stayed
#: unpadded). Any other timed matmul is taken as not padded (named unmeasured): blind251/
#: ir03's five 4-row addmm keys and compile/c09's 2-row decode stayed unpadded there.
_PADDED = {
    "NVIDIA H200": {
        ("mm", torch.bfloat16, (4096, 768, 50257), False, True, True, False),
        ("mm", torch.bfloat16, (8192, 768, 50257), False, True, True, False),
        ("mm", torch.bfloat16, (4096, 50257, 768), False, False, True, True),
        ("mm", torch.bfloat16, (50257, 4096, 768), True, False, False, True),
        ("addmm", torch.float16, (4096, 768, 30522), False, True, True, False),
        ("mm", torch.float16, (4096, 30522, 768), False, False, True, True),
    },
    # blind283/jx05's (timm CSATv2, bf16 autocast, batch 64): the 29 matmuls pad_mm times there,
    # replayed with `_should_pad`'s own timing on the H100 (fixtures/run/probes/
    # na67_pad_mm_timed_choices_csatv2_h100.txt, ori/pad time ratio over the 1.1 threshold); the
    # 386-wide transformer's products but those with M = 386 or the 256/1000-wide ones, and two of
    # the 49-wide attention products. Timings: 1.107 and 1.102 (the second and last) are coin
    # tosses, and the H100's two jx05 runs differ in what they padded
    "NVIDIA H100 80GB HBM3": {
        ("mm", torch.bfloat16, (64, 64, 49), False, True, True, False),
        ("mm", torch.bfloat16, (64, 64, 49), True, False, False, True),
        ("mm", torch.bfloat16, (1544, 4096, 386), True, False, False, True),
        ("mm", torch.bfloat16, (4096, 1544, 386), False, False, True, True),
        ("mm", torch.bfloat16, (4096, 386, 1544), False, False, True, True),
        ("mm", torch.bfloat16, (4096, 768, 386), False, False, True, True),
        ("mm", torch.bfloat16, (768, 4096, 386), True, False, False, True),
        ("addmm", torch.bfloat16, (4096, 1544, 386), False, True, True, False),
        ("addmm", torch.bfloat16, (4096, 386, 1544), False, True, True, False),
        ("mm", torch.bfloat16, (4096, 386, 768), False, True, True, False),
    },
}


def measured_padded(op_name, dtype, mkn, mat1, mat2, pre1: bool, pre2: bool) -> bool:
    """Whether the simulated GPU's timed choice for this matmul is measured as padded (`_PADDED`)."""
    from torch._inductor.fx_passes.pad_mm import realize_symbols

    def column_major(t) -> bool:
        return realize_symbols(t.stride())[-1] != 1

    entry = (op_name, dtype, tuple(mkn), column_major(mat1), column_major(mat2), pre1, pre2)
    return entry in _PADDED.get(torch.cuda.get_device_name(), ())


def benchmark(cap, pad_mm, match, mat1, mat2, op, input, seen: dict) -> bool | None:
    """`_should_pad` after `can_pad` (the caller's) on the simulated GPU: its early answers
    (`force_shape_pad`, the bf16 large-K rule, not compute bound) time nothing (None: not padded);
    a timed matmul's choice is `measured_padded`'s (True, False where not measured), once per key
    (`get_cached_should_pad`: a key timed before answers as it did)."""
    from torch._inductor import config
    from torch._inductor.fx_passes.pad_mm import realize_symbols

    aten = torch.ops.aten
    is_bmm = op is aten.bmm
    if is_bmm:
        batch, (m, k), n = (
            [realize_symbols(mat1.shape)[0]],
            realize_symbols(mat1.shape)[1:],
            realize_symbols(mat2.shape)[2],
        )
    elif op is aten.mm or op is aten.addmm:
        batch, (m, k), n = [], realize_symbols(mat1.shape), realize_symbols(mat2.shape)[1]
    else:
        return None
    align1, align2 = pad_mm.get_alignment_size(mat1), pad_mm.get_alignment_size(mat2)
    kp = pad_mm.get_padded_length(k, align1)
    np_ = pad_mm.get_padded_length(n, align2)
    mp = pad_mm.get_padded_length(m, align1)
    if config.force_shape_pad:
        return None
    if "pad_aten_mm_pass" in config.post_grad_fusion_options and pad_mm.should_pad_mm_bf16(
        mat1.dtype, m, n, k
    ):
        return None
    if not _compute_bound(m, k, n, mat1.dtype):
        return None
    key = pad_mm.should_pad_bench_key(match, mat1, mat2, op, input)
    if key in seen:  # `get_cached_should_pad`: timed before in this process
        return seen[key]
    pre1 = pad_mm.should_exclude_padding_time(match, "mat1")
    pre2 = pad_mm.should_exclude_padding_time(match, "mat2")
    name = "bmm" if is_bmm else "addmm" if op is aten.addmm else "mm"
    seen[key] = measured_padded(name, mat1.dtype, (m, k, n), mat1, mat2, pre1, pre2)
    base_key = pad_mm.should_pad_bench_key(match, mat1, mat2, op, input, is_base_time_key=True)
    time_orig = base_key not in seen  # `get_cached_base_mm_benchmark_time`
    seen[base_key] = None

    dtype, elt = mat1.dtype, mat1.element_size()

    def alloc(nbytes: int):
        return cap.malloc(nbytes, _OP, "temporary")

    def elems(shape) -> int:
        return math.prod(shape)

    # the random operands (`realize_tensor`), the bias only where the base time is timed
    held = [alloc(_real_bytes(mat1)), alloc(_real_bytes(mat2))]
    bias = input if op is aten.addmm and input is not None else None
    if bias is not None and time_orig:
        held.append(alloc(_real_bytes(bias)))
    shape1, shape2 = [*batch, m + mp, k + kp], [*batch, k + kp, n + np_]
    # operands padded once, outside the timing (`constant_pad_nd`'s contiguous output)
    if pre1 and (mp or kp):
        held.append(alloc(elems(shape1) * elt))
    if pre2 and (kp or np_):
        held.append(alloc(elems(shape2) * elt))
    if bias is not None and bias.is_cuda:  # `input_pad = torch.randn_like(input)`
        held.append(alloc(bias.numel() * bias.element_size()))

    def gemm(a, b, lt: bool) -> None:
        """The library call's copies of operands cuBLAS cannot address (`None`: a contiguous padded
        copy), then its handle and workspace (`_kernels.matmul`)."""

        def needs_copy(t) -> bool:
            if is_bmm:
                return _batch_needs_copy(t, t.shape[2], t.shape[1])
            return _matrix_needs_copy(t)

        copies = [
            alloc(elems(t.shape) * elt)
            for t in (b, a)
            if t is not None and needs_copy(_Strided(realize_symbols(t.shape), realize_symbols(t.stride())))
        ]
        cap.blas(name, dtype, lt or cublaslt_preferred())
        del copies

    def orig() -> None:
        out = alloc(elems([*batch, m, n]) * elt)
        lt = bias is not None and addmm_uses_lt((bias, mat1, mat2), {})
        gemm(mat1, mat2, lt)
        del out

    def padded() -> None:
        # `pad_mm` / `pad_addmm` / `pad_bmm`: the operands not padded before timing, the bias
        # (`pad_dim`: zeros, then `cat`), the padded product; the result a view of it
        temps = []
        a = None if (mp or kp) else mat1
        b = None if (kp or np_) else mat2
        if not pre1 and (mp or kp):
            temps.append(alloc(elems(shape1) * elt))
        if not pre2 and (kp or np_):
            temps.append(alloc(elems(shape2) * elt))
        padded_bias = None
        if bias is not None:
            shape = list(bias.shape)
            bias_elt = bias.element_size()
            padded_bias = bias
            steps = []
            if np_ and ((bias.dim() == 2 and shape[1] != 1) or (bias.dim() == 1 and shape[0] != 1)):
                steps.append(bias.dim() - 1)
            if mp and bias.dim() == 2 and shape[0] != 1:
                steps.append(0)
            for dim in steps:
                zeros = alloc(
                    elems([*shape[:dim], np_ if dim == bias.dim() - 1 else mp, *shape[dim + 1 :]]) * bias_elt
                )
                shape[dim] += np_ if dim == bias.dim() - 1 else mp
                temps.append(alloc(elems(shape) * bias_elt))
                del zeros
                padded_bias = _dense(shape, bias.dtype)
        out = alloc(elems([*batch, m + mp, n + np_]) * elt)
        lt = padded_bias is not None and addmm_uses_lt(
            (padded_bias, _dense(shape1, dtype), _dense(shape2, dtype)), {}
        )
        gemm(a, b, lt)
        del temps, out

    props = torch.cuda.get_device_properties(torch.cuda.current_device())

    def do_bench(fn) -> None:
        # `InductorBenchmarker.benchmark_gpu`: a warm-up call, then the L2 buffer while every
        # timed call runs (each frees what it made before the next)
        fn()
        buffer = alloc(props.L2_cache_size // 4 * 4)
        fn()
        del buffer

    if time_orig:
        do_bench(orig)
    do_bench(padded)
    del held
    return seen[key]
