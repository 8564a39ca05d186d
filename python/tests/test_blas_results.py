"""Products written into a result cuBLAS cannot address (`out=`, an in-place `self`): cuda/Blas.cpp's
`baddbmm_out_cuda_impl` and `cublasCommonArgs` compute into a contiguous clone and copy it back, and a
column-major batched result swaps the operands' roles (blind279/jt04's `bmm(out=)` into transposed
`empty` views, which cuBLAS addresses, and strided views, which it does not)."""

from __future__ import annotations

import torch
import vramscope
from conftest import counted

BF16 = torch.bfloat16


def _bytes_during(setup, op, gpu="h100"):
    """(allocations, requested bytes, peak bytes over the start) of `op(*setup())`, the cuBLAS
    handle's workspace taken by a warm-up product first."""
    with vramscope.capture(gpu=gpu):
        torch.bmm(torch.empty(2, 4, 4, device="cuda"), torch.empty(2, 4, 4, device="cuda"))
        torch.mm(torch.empty(4, 4, device="cuda"), torch.empty(4, 4, device="cuda"))
        args = setup()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        _, (count, req) = counted(lambda: op(*args))
        peak = torch.cuda.max_memory_allocated() - start
    return count, req, peak


def _bmm_operands(k=4, b=4096, p=256, q=256):
    x = torch.empty(b, k, p, device="cuda", dtype=BF16).transpose(0, 1)  # (k, b, p), blind279/jt04
    w = torch.empty(k, q, p, device="cuda", dtype=BF16).transpose(-1, -2)  # (k, p, q)
    return x, w


def test_bmm_into_a_transposed_empty_view_writes_in_place():
    # fly's BlockdiagButterflyMultiply: `torch.empty(batch, k, q).transpose(0, 1)` has strides
    # (q, k * q, 1): row-major batches cuBLAS addresses (transpose_result), no clone
    def setup():
        x, w = _bmm_operands()
        out = torch.empty(4096, 4, 256, device="cuda", dtype=BF16).transpose(0, 1)
        return x, w, out

    assert _bytes_during(setup, lambda x, w, out: torch.bmm(x, w, out=out)) == (0, 0, 0)


def test_bmm_into_a_strided_view_computes_into_a_clone_first():
    # neither inner stride 1: `result.transpose(1, 2).clone(Contiguous).transpose(1, 2)`, then
    # `result.copy_(*result_)` (Blas.cpp); the clone is the result's size (4 x 4096 x 256 bf16)
    def setup():
        x, w = _bmm_operands()
        out = torch.empty(4, 4096, 512, device="cuda", dtype=BF16)[:, :, ::2]
        return x, w, out

    assert _bytes_during(setup, lambda x, w, out: torch.bmm(x, w, out=out)) == (1, 8388608, 8388608)


def test_column_major_bmm_result_writes_in_place():
    # strides (M * N, 1, M): transpose_result false, batch1 and batch2 prepared in that order (the
    # same copies as the row-major case's, the roles swapped); no clone of the result
    def setup():
        x, w = _bmm_operands()
        out = torch.empty(4, 256, 4096, device="cuda", dtype=BF16).transpose(1, 2)
        return x, w, out

    assert _bytes_during(setup, lambda x, w, out: torch.bmm(x, w, out=out)) == (0, 0, 0)


def test_baddbmm_in_place_on_a_strided_self_takes_the_clone():
    # `baddbmm_` runs baddbmm_out_cuda_impl with `self` as the result: a strided slice of scores
    def setup():
        x, w = _bmm_operands(b=1024)
        s = torch.empty(4, 1024, 512, device="cuda", dtype=BF16)[:, :, ::2]
        return s, x, w

    assert _bytes_during(setup, lambda s, x, w: s.baddbmm_(x, w)) == (1, 2097152, 2097152)


def test_mm_into_a_strided_out_computes_into_a_clone_first():
    # cublasCommonArgs' `prepare_matrix_for_cublas(c, transpose_result)`: a (1024, 512) fp32 result
    # with strides (1024, 2) is cloned contiguous (2,097,152 bytes) and copied back
    def setup():
        a = torch.empty(1024, 256, device="cuda")
        b = torch.empty(256, 512, device="cuda")
        out = torch.empty(1024, 1024, device="cuda")[:, ::2]
        return a, b, out

    assert _bytes_during(setup, lambda a, b, out: torch.mm(a, b, out=out)) == (1, 2097152, 2097152)


def test_mm_into_a_row_slice_writes_in_place():
    # a slice of rows keeps a stride of 1 and a leading dimension that fits: no clone
    def setup():
        a = torch.empty(1024, 256, device="cuda")
        b = torch.empty(256, 512, device="cuda")
        out = torch.empty(1024, 1024, device="cuda")[:, :512]
        return a, b, out

    assert _bytes_during(setup, lambda a, b, out: torch.mm(a, b, out=out)) == (0, 0, 0)


def test_baddbmm_in_place_takes_the_cublas_workspace_on_first_use():
    # baddbmm_ -> baddbmm_out_cuda_impl -> bgemm on the current handle: its workspace (32 MiB on an
    # H100) comes with the first product, as bmm's does; the twin had no rule for baddbmm_
    with vramscope.capture(gpu="h100"):
        s = torch.empty(4, 256, 256, device="cuda")
        x = torch.empty(4, 256, 64, device="cuda")
        before = torch.cuda.memory_allocated()
        s.baddbmm_(x, x.transpose(1, 2))
        took = torch.cuda.memory_allocated() - before
    with vramscope.capture(gpu="h100"):
        a = torch.empty(4, 256, 64, device="cuda")
        before = torch.cuda.memory_allocated()
        out = torch.bmm(a, a.transpose(1, 2))
        bmm_took = torch.cuda.memory_allocated() - before - out.untyped_storage().nbytes()
    assert took == bmm_took > 0


def _first_addmm(out_of):
    """What a first `addmm(bias, m1, m2, out=...)` leaves allocated and its peak, on an H100."""
    with vramscope.capture(gpu="h100"):
        bias = torch.empty(512, device="cuda")
        m1 = torch.empty(1024, 256, device="cuda")
        m2 = torch.empty(256, 512, device="cuda")
        out = out_of()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        torch.addmm(bias, m1, m2, out=out)
        return torch.cuda.memory_allocated() - before, torch.cuda.max_memory_allocated() - before


def test_addmm_into_a_strided_out_takes_cublas_not_cublaslt():
    # isInputCompliesAddmmCudaLt wants `result.is_contiguous()`: a contiguous out takes
    # gemm_and_bias (cuBLAS's handle and cuBLASLt's workspace), a strided one cuBLAS's gemm alone,
    # through the result's contiguous clone (2,097,152 bytes, gone after the copy back)
    lt, lt_peak = _first_addmm(lambda: torch.empty(1024, 512, device="cuda"))
    plain, plain_peak = _first_addmm(lambda: torch.empty(1024, 1024, device="cuda")[:, ::2])
    assert lt == lt_peak and lt > plain
    assert plain_peak == plain + 2097152
