"""Matrix products: cuBLAS/cuBLASLt handles, workspaces and the copies of operands cuBLAS cannot
address (`aten/src/ATen/native/cuda/Blas.cpp`, `GroupedBlas.cpp`, `Linear.cpp`, `Distance.cpp`)."""

from __future__ import annotations

import math

import torch

from .._tensor import non_overlapping_and_dense, registered
from .registry import AFTER, DISPATCH
from .typenames import scalar_type_name, type_meta_name

aten = torch.ops.aten


# ---- matrix products -----------------------------------------------------------------


def _matrix_needs_copy(t: torch.Tensor) -> bool:
    """`prepare_matrix_for_cublas`: a 2-D operand cuBLAS cannot address is
    copied contiguous first."""
    if t.is_contiguous() or t.t().is_contiguous():
        return False
    s, st = t.shape, t.stride()
    if (st[0] == 1 and st[1] >= max(s[0], 1)) or (st[1] == 1 and st[0] >= max(s[1], 1)):
        return False
    return True


def _batch_needs_copy(t: torch.Tensor, m: int, n: int, transpose_result: bool = True) -> bool:
    """`prepare_batch_matrix_for_cublas` (the fast and leading dimensions swap with
    `transpose_result`; a contiguous result makes it true)."""
    st = t.stride()
    fast, lead = (2, 1) if transpose_result else (1, 2)
    if st[fast] == 1 and st[lead] >= max(m, 1):
        return False
    if st[lead] == 1 and st[fast] >= max(n, 1):
        return False
    if t.is_contiguous() and st[1] != 0 and st[2] != 0:
        return False
    return True


def _batch_result(result: torch.Tensor):
    """`baddbmm_out_cuda_impl`'s `result_` (cuda/Blas.cpp): column-major batches (`transpose_result`
    false) or row-major ones (true) are written in place; any other result (an `out=` or in-place
    `self` neither of whose inner strides is 1 with a leading dimension that fits) is computed into a
    `result.transpose(1, 2).clone(Contiguous)` (`transpose_result` false) and copied back. Returns
    (transpose_result, whether that clone is made)."""
    s, st = result.shape, result.stride()
    if st[1] == 1 and (s[2] == 1 or st[2] >= max(1, s[1])):
        return False, False
    if st[2] == 1 and (s[1] == 1 or st[1] >= max(1, s[2])):
        return True, False
    return False, True


def _matrix_result_needs_copy(t: torch.Tensor) -> bool:
    """`cublasCommonArgs`' `prepare_matrix_for_cublas(c, transpose_result)` (cuBlasCommonArgs.h):
    a 2-D result cuBLAS cannot address is computed into a contiguous clone, copied back after the
    gemm (`result.copy_(*args.result)`, Blas.cpp)."""
    return not non_overlapping_and_dense(t) and _matrix_needs_copy(t)


def _temp(cap, t: torch.Tensor, op: str):
    return cap.malloc(t.numel() * t.element_size(), op, "temporary")


# `TypeName<T>` (aten/src/ATen/cuda/tunable/TunableGemm.h), in TunableOp's op signatures
_TUNABLE_TYPE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


def _prepare_for_cublas(t: torch.Tensor):
    """`prepare_matrix_for_cublas` (Blas.cpp): (transposed, strides of what cuBLAS reads); a
    matrix it cannot address is read from its contiguous clone."""
    s, st = tuple(t.shape), tuple(t.stride())
    if non_overlapping_and_dense(t):
        return t.is_contiguous(), st, s
    if st[0] == 1 and st[1] >= max(1, s[0]):
        return False, st, s
    if st[1] == 1 and st[0] >= max(1, s[1]):
        return True, st, s
    return True, (s[1], 1), s


def tunable_gemm(kind: str, mat1, mat2, result):
    """The TunableOp key and operand bytes of a 2-D product's GEMM (`Capture.tunable_copies`):
    `cublasCommonArgs(mat1, mat2, result)`'s m, n, k, leading dimensions and transposes
    (Blas.cpp), the op signature (`GemmTunableOp_<T>_<AB>` or `GemmAndBiasTunableOp_...`) and the
    params' (`<ta><tb>_m_n_k_ld_lda_ldb_ldc`), and `GetSizeC`, `GetSizeA`, `GetSizeB`
    (GemmCommon.h: the larger of the strided and the dense extent)."""
    name = _TUNABLE_TYPE.get(mat1.dtype)
    if name is None:
        return None
    tr, rst, _ = _prepare_for_cublas(result)
    ta, ast, asz = _prepare_for_cublas(mat2 if tr else mat1)
    tb, bst, bsz = _prepare_for_cublas(mat1 if tr else mat2)
    s1, s2 = tuple(mat1.shape), tuple(mat2.shape)
    if tr:
        ta, tb, s1, s2 = not ta, not tb, asz, bsz
    m, k, n = s1[1 if tr else 0], s1[0 if tr else 1], s2[0 if tr else 1]
    lda, ldb, ldc = ast[1 if ta == tr else 0], bst[1 if tb == tr else 0], rst[0 if tr else 1]
    item = mat1.element_size()
    size_a = item * max(lda * (m if ta else k), m * k)
    size_b = item * max(ldb * (k if tb else n), k * n)
    size_c = item * max(ldc * n, m * n)
    ca, cb = "t" if ta else "n", "t" if tb else "n"
    op = f"{kind}_{name}_{ca.upper()}{cb.upper()}"
    params = f"{ca}{cb}_{m}_{n}_{k}_ld_{lda}_{ldb}_{ldc}"
    return (op, params), (size_c, size_a, size_b)


def tunable_bgemm(b1, b2, result):
    """The TunableOp key and operand bytes of `baddbmm_out_cuda_impl`'s product (a contiguous
    result): `prepare_batch_matrix_for_cublas` of `batch2`, then `batch1`; one batch goes to `gemm`
    (`GemmTunableOp`), more to `bgemm` (`GemmStridedBatchedTunableOp`, params
    `<ta><tb>_m_n_k_B_batch_ld_lda_ldb_ldc`, sizes the larger of stride x batch and the dense
    extent; GemmCommon.h)."""
    name = _TUNABLE_TYPE.get(b1.dtype)
    if name is None:
        return None
    rs, rst = tuple(result.shape), tuple(result.stride())
    if rst[1] == 1 and (rs[2] == 1 or rst[2] >= max(1, rs[1])):
        tr = False
    elif rst[2] == 1 and (rs[1] == 1 or rst[1] >= max(1, rs[2])):
        tr = True
    else:
        tr, rst = False, (rs[1] * rs[2], 1, rs[1])
    lead = 1 if tr else 2
    m, n = rs[2 if tr else 1], rs[lead]
    k = (b2 if tr else b1).shape[lead]

    def prep(t, rows, cols):
        s, st = tuple(t.shape), tuple(t.stride())
        fast = 2 if tr else 1
        if st[fast] == 1 and st[lead] >= max(1, rows):
            return False, st[lead], st[0]
        if st[lead] == 1 and st[fast] >= max(1, cols):
            return True, st[fast], st[0]
        if not (t.is_contiguous() and st[1] != 0 and st[2] != 0):
            st = (s[1] * s[2], s[2], 1)
        return not tr, st[1], st[0]

    ta, lda, sa = prep(b2 if tr else b1, m, k)
    tb, ldb, sb = prep(b1 if tr else b2, k, n)
    ldc, sc, batch = rst[lead], rst[0], rs[0]
    ca, cb = "t" if ta else "n", "t" if tb else "n"
    item = b1.element_size()
    if batch == 1:
        size_a = item * max(lda * (m if ta else k), m * k)
        size_b = item * max(ldb * (k if tb else n), k * n)
        size_c = item * max(ldc * n, m * n)
        op = f"GemmTunableOp_{name}_{ca.upper()}{cb.upper()}"
        return (op, f"{ca}{cb}_{m}_{n}_{k}_ld_{lda}_{ldb}_{ldc}"), (size_c, size_a, size_b)
    size_a = item * max(sa * batch, m * k * batch)
    size_b = item * max(sb * batch, k * n * batch)
    size_c = item * max(sc * batch, m * n * batch)
    op = f"GemmStridedBatchedTunableOp_{name}_{ca.upper()}{cb.upper()}"
    params = f"{ca}{cb}_{m}_{n}_{k}_B_{batch}_ld_{lda}_{ldb}_{ldc}"
    return (op, params), (size_c, size_a, size_b)


def cublaslt_preferred() -> bool:
    """`torch.backends.cuda.preferred_blas_library("cublaslt")`: `gemm_internal` and `bgemm_internal`
    (CUDABlas.cpp) run every GEMM, of every dtype, through `bgemm_internal_cublaslt`, which takes
    `getCurrentCUDABlasLtHandle()` and cuBLASLt's own workspace (`CublasLtWorkspace`) as
    `gemm_and_bias` does; `gemm_tunable`/`bgemm_tunable` (TunableOp on) do not ask."""
    return (
        torch._C._get_blas_preferred_backend() == torch._C._BlasBackend.Cublaslt
        and not torch._C._cuda_tunableop_is_enabled()
    )


def _gemm_2d(cap, op: str, mat1, mat2, lt: bool, result=None) -> None:
    """`cublasCommonArgs(mat1, mat2, result)`: `mata` from `mat2`, then
    `matb` from `mat1`; the gemm (through TunableOp when it is on: `gemm` or, on the cuBLASLt
    path, `launchTunableGemmAndBias`); the copies die with the args."""
    # a result cuBLAS cannot address (an `out=`): its contiguous clone first, copied back after
    c = _temp(cap, result, op) if result is not None and _matrix_result_needs_copy(result) else None
    a = _temp(cap, mat2, op) if _matrix_needs_copy(mat2) else None
    b = _temp(cap, mat1, op) if _matrix_needs_copy(mat1) else None
    tune = None
    if result is not None and torch._C._cuda_tunableop_is_enabled():
        tune = tunable_gemm("GemmAndBiasTunableOp" if lt else "GemmTunableOp", mat1, mat2, result)
    # CUDABlas.cpp's gemm (and cuBLASLt's gemm_and_bias) first alerts under deterministic algorithms
    cap.cublas_alert()
    cap.blas(op, mat1.dtype, lt or cublaslt_preferred(), tune)
    del b, a, c


def _mm(cap, func, call, outs):
    (args, _kw) = call
    mat1, mat2 = args[0], args[1]
    if outs[0].numel() > 0 and mat1.shape[1] > 0:
        _gemm_2d(cap, "mm", mat1, mat2, False, outs[0])


def addmm_uses_lt(args, kw) -> bool:
    """`isInputCompliesAddmmCudaLt` (Blas.cpp): `addmm` takes the `gemm_and_bias` path, whose
    epilogue adds the bias (no copy of it into the output first). Only `mat2` must have more than one
    row and column: a single-row `mat1` takes it too (blind45/as04's H200 history: a batch-1
    `nn.Linear` allocates cuBLASLt's workspace under `gemm_and_bias`)."""
    bias, mat1, mat2 = args[0], args[1], args[2]
    beta = kw.get("beta", args[3] if len(args) > 3 else 1)
    n = mat2.shape[1]
    squeezed_1d = sum(1 for s in bias.shape if s != 1) <= 1
    return (
        beta == 1
        and bias.is_contiguous()
        and (bias.dim() == 1 or squeezed_1d)
        and bias.shape[-1:] == (n,)
        and mat1.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16)
        and mat2.shape[0] > 1
        and n > 1
    )


def _addmm(cap, func, call, outs):
    (args, kw) = call
    mat1, mat2 = args[1], args[2]
    if outs[0].numel() > 0 and mat1.shape[1] > 0:
        # `isInputCompliesAddmmCudaLt` also wants a contiguous result that is not `self` (Blas.cpp:
        # `result.is_same(self)` returns false, then `result.is_contiguous()`): `addmm_` and an
        # `out=` of other strides take cuBLAS's `gemm` after copying the bias into the result
        lt = func is not aten.addmm_.default and outs[0].is_contiguous() and addmm_uses_lt(args, kw)
        _gemm_2d(cap, "addmm", mat1, mat2, lt, outs[0])


def _batch_operands(cap, b1, b2, transpose_result: bool = True):
    """`baddbmm_out_cuda_impl`'s `prepare_batch_matrix_for_cublas` of its operands: with a
    row-major result (`transpose_result`, what a fresh result is) the copies of `batch2`, then
    `batch1`, that cuBLAS cannot address; with a column-major one `batch1`, then `batch2`."""
    if transpose_result:
        m, n, k = b2.shape[2], b1.shape[1], b1.shape[2]
        a = _temp(cap, b2, "bmm") if _batch_needs_copy(b2, m, k) else None
        b = _temp(cap, b1, "bmm") if _batch_needs_copy(b1, k, n) else None
        return a, b
    m, n, k = b1.shape[1], b2.shape[2], b1.shape[2]
    a = _temp(cap, b1, "bmm") if _batch_needs_copy(b1, m, k, False) else None
    b = _temp(cap, b2, "bmm") if _batch_needs_copy(b2, k, n, False) else None
    return a, b


def _bmm(cap, func, call, outs):
    (args, _kw) = call
    if func._schema.name in ("aten::baddbmm", "aten::baddbmm_"):
        b1, b2 = args[1], args[2]
    else:
        b1, b2 = args[0], args[1]
    if outs[0].numel() > 0 and b1.shape[2] > 0:
        # an `out=` result's layout decides the operands' roles; one cuBLAS cannot address is
        # computed into a clone first and copied back (`result_`, Blas.cpp)
        tr, cloned = _batch_result(outs[0])
        c = _temp(cap, outs[0], "bmm") if cloned else None
        a, b = _batch_operands(cap, b1, b2, tr)
        tune = None
        if torch._C._cuda_tunableop_is_enabled():
            tune = tunable_bgemm(b1, b2, outs[0])
        cap.cublas_alert()  # bgemm's, as gemm's
        cap.blas("bmm", b1.dtype, cublaslt_preferred(), tune)
        del b, a, c


for _f in (aten.mm.default, aten.mm.out):
    AFTER[_f] = _mm


def _gemv(cap, func, call, outs):
    """`addmv_out_cuda` (Blas.cpp; `mv` runs it): `gemv` on the matrix as it is when either of its
    strides is 1 with a leading dimension that fits, else on `mat.contiguous()`; a vector of
    stride 0 made contiguous first. `addmv` and the in-place `addmv_` take `self` first."""
    (args, _kw) = call
    if func._schema.name in ("aten::addmv", "aten::addmv_"):
        mat, vec = args[1], args[2]
    else:
        mat, vec = args[0], args[1]
    if outs[0].numel() == 0 or mat.numel() == 0:
        return
    v, m = _gemv_operands(cap, mat, vec)
    cap.cublas_alert()  # gemv's, as gemm's
    # CUDABlas.cpp: `gemv<at::Half>` and `gemv<at::BFloat16>` are a one-row `gemm`, cuBLASLt's when
    # it is preferred; the other dtypes call `cublas<t>gemv`
    cap.blas("mv", mat.dtype, mat.dtype in (torch.float16, torch.bfloat16) and cublaslt_preferred())
    del m, v


def _gemv_operands(cap, mat, vec):
    """`addmv_out_cuda`'s copies before `gemv`: the vector's `contiguous()` when its stride is 0,
    then the matrix's when neither of its strides is 1 with a leading dimension that fits."""
    v = _temp(cap, vec, "mv") if vec.stride(0) == 0 else None
    rows, cols = mat.shape
    addressable = (mat.stride(0) == 1 and mat.stride(1) >= max(1, rows)) or (
        mat.stride(1) == 1 and mat.stride(0) >= max(1, cols)
    )
    m = None if addressable else _temp(cap, mat, "mv")
    return v, m


def _dot(cap, func, call, outs):
    """`dot_cuda`/`vdot_cuda` (Blas.cpp): `cublas<t>dot` (`cublasDotEx` for 16-bit) on the
    current handle, whose workspace comes with it on first use."""
    (args, _kw) = call
    if args[0].numel() > 0:
        cap.blas(func._schema.name.removeprefix("aten::"), args[0].dtype, False)


def _scaled_mm(cap, func, call, outs):
    """`_scaled_mm_out_cuda` (Blas.cpp): the result (`resize_output`), then `scaled_gemm` through
    cuBLASLt, whose `getCUDABlasLtWorkspace()` takes the handle's workspace and its own on first use
    (blind49/aw01's H200 history: 939,524,096, then 33,554,432 and 1,048,576 bytes)."""
    (args, _kw) = call
    if args[0].numel() > 0 and args[1].numel() > 0:
        out = outs[0] if isinstance(outs, (tuple, list)) else outs
        # a float8 result (`scale_result`) is named as a 16-bit product: the native twin's dtypes have
        # no float8 and only float32 against the rest matters (the thread's 16-bit kernels' driver
        # share, which for fp8 kernels is not measured)
        cap.blas("scaled_mm", torch.bfloat16 if out.dtype.itemsize == 1 else out.dtype, True)


for _f in (aten._scaled_mm.default, aten._scaled_mm.out):
    AFTER[_f] = _scaled_mm
# `torch.nn.functional.scaled_mm` (`_scaled_mm_cuda_v2`, ScaledBlas.cpp): its tensorwise, rowwise and
# sm_90 blockwise recipes end in the same `_scaled_gemm`, a cuBLASLt call on the handle's workspaces
for _f in (aten._scaled_mm_v2.default, aten._scaled_mm_v2.out):
    AFTER[_f] = _scaled_mm


def _scaled_mm_types(cap, func, args, kwargs):
    """`_scaled_mm_out_cuda` (Blas.cpp) refuses two float8_e5m2 operands ("Type restrictions imposed
    by CuBLASLt"), before `resize_output` gives its result any memory; PyTorch's meta kernel lets
    them through."""
    a, b = args[0], args[1]
    if registered(a) and a.dtype == b.dtype == torch.float8_e5m2:
        raise RuntimeError("Multiplication of two Float8_e5m2 matrices is not supported")
    return NotImplemented


for _f in (aten._scaled_mm.default, aten._scaled_mm.out):
    DISPATCH[_f] = _scaled_mm_types


def _int_mm(cap, func, call, outs):
    """`_int_mm_out_cuda` (Blas.cpp): `cublasCommonArgs(self, mat2, result)`, then `int8_gemm`, a
    cuBLASLt call with no workspace of its own ("Non-zero workspace doesn't seem to work") on
    `getCurrentCUDABlasLtHandle()`, the cuBLAS handle, whose workspace comes with it on first use
    (blind81/cc05's H200 per-op truth: the first product requested 33,554,432 bytes beyond its
    result, the later ones none). The call is named by its int32 result's dtype (the capture's
    dtypes have no int8): a product not in float32 takes the thread's 16-bit kernels' driver share,
    which for int8 kernels is not measured. `_int_mm_out_cuda`'s size checks come first and raise
    after `_int_mm_cuda` allocated the result, which the exception frees."""
    (args, _kw) = call
    m, k, n = args[0].shape[0], args[0].shape[1], args[1].shape[1]
    if m <= 16:
        raise RuntimeError(f"self.size(0) needs to be greater than 16, but got {m}")
    if k <= 0 or k % 8:
        raise RuntimeError(f"self.size(1) needs to be greater than 0 and a multiple of 8, but got {k}")
    if n <= 0 or n % 8:
        raise RuntimeError(f"mat2.size(1) needs to be greater than 0 and a multiple of 8, but got {n}")
    a = _temp(cap, args[1], "int_mm") if _matrix_needs_copy(args[1]) else None
    b = _temp(cap, args[0], "int_mm") if _matrix_needs_copy(args[0]) else None
    cap.blas("int_mm", torch.int32, False)
    del b, a


for _f in (aten._int_mm.default, aten._int_mm.out):
    AFTER[_f] = _int_mm
for _f in (aten.mv.default, aten.mv.out, aten.addmv.default, aten.addmv.out, aten.addmv_.default):
    AFTER[_f] = _gemv
for _f in (aten.dot.default, aten.dot.out, aten.vdot.default, aten.vdot.out):
    AFTER[_f] = _dot
for _f in (
    aten.addmm.default,
    aten.addmm.out,
    aten.addmm_.default,
    aten._addmm_activation.default,
    aten._addmm_activation.out,
):
    AFTER[_f] = _addmm  # addmm_, addmm_activation_out_cuda: addmm_out_cuda_impl (in place; with an epilogue)
for _f in (aten.bmm.default, aten.bmm.out, aten.baddbmm.default, aten.baddbmm.out, aten.baddbmm_.default):
    AFTER[_f] = _bmm  # baddbmm_: baddbmm_out_cuda_impl with its `self` as the result


# ---- operands of different dtypes -----------------------------------------------------
# PyTorch 2.11's CUDA products refuse operands of different dtypes (autocast casts them first);
# the meta kernels the twin runs let most of them through. Each rule raises where the GPU does,
# after what it allocated before, which the exception frees.


def _on_device(*ts) -> bool:
    """Every operand is a dense simulated (CUDA) tensor."""
    return all(isinstance(t, torch.Tensor) and registered(t) and t.layout == torch.strided for t in ts)


def _mm_dtypes(cap, func, args, kwargs):
    """`mm`: its meta function (LinearAlgebra.cpp `TORCH_META_FUNC(mm)`: shapes, no dtype) gives the
    result `self.options()`, then `addmm_out_cuda_impl` (cuda/Blas.cpp), which `mm_out_cuda` runs,
    checks first "expected mat1 and mat2 to have the same dtype" (TypeMeta names: "float !=
    c10::BFloat16"), before cuBLAS."""
    a, b = args[0], args[1]
    if a.dtype == b.dtype or not _on_device(a, b) or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return NotImplemented
    out = cap.malloc(a.shape[0] * b.shape[1] * a.element_size(), "aten::mm")
    del out
    raise RuntimeError(
        "expected mat1 and mat2 to have the same dtype, but got: "
        f"{type_meta_name(a.dtype)} != {type_meta_name(b.dtype)}"
    )


def _addmm_dtypes(cap, func, args, kwargs):
    """`ADDMM_META` (LinearAlgebra.cpp), the structured meta function of `addmm`, `addmm_` and
    `_addmm_activation` on every backend: the bias's dtype against `mat2`'s, then `mat1`'s
    (ScalarType names: "Float and BFloat16"), before the result (2.11's CPU build raises the same;
    the Python meta kernel the twin runs checks neither). `F.linear` with a bias reaches it."""
    bias, m1, m2 = args[0], args[1], args[2]
    if not _on_device(bias, m1, m2):
        return NotImplemented
    for first, name in ((bias, "self"), (m1, "mat1")):
        if first.dtype != m2.dtype:
            raise RuntimeError(
                f"{name} and mat2 must have the same dtype, but got "
                f"{scalar_type_name(first.dtype)} and {scalar_type_name(m2.dtype)}"
            )
    return NotImplemented


def _expandable(shape, to) -> bool:
    """`expand_size(self, to)` succeeds: each trailing dimension equal or 1."""
    return len(shape) <= len(to) and all(
        s in (1, t) for s, t in zip(reversed(shape), reversed(to), strict=False)
    )


def _bmm_dtypes(cap, func, args, kwargs):
    """`bmm`, `baddbmm`, `baddbmm_`: the meta function (LinearAlgebra.cpp
    `common_checks_baddbmm_bmm`: shapes; `baddbmm`'s first checks `self.dtype() == batch1.dtype()`,
    "Input dtypes must be the same, got: input float, batch1: c10::BFloat16, batch2: ...") gives the
    result `batch2.options()`; `baddbmm_out_cuda_impl` (cuda/Blas.cpp) returns early for an empty
    result or reduction, else prepares the operands (`prepare_batch_matrix_for_cublas`'s copies) and
    dispatches on `batch1`'s dtype, whose `const_data_ptr<scalar_t>()` of `batch2` raises
    "expected scalar type Float but found BFloat16" (TensorMethods.cpp) before cuBLAS."""
    add = func is not aten.bmm.default
    b1, b2 = (args[1], args[2]) if add else (args[0], args[1])
    ts = (args[0], b1, b2) if add else (b1, b2)
    if not _on_device(*ts) or b1.dim() != 3 or b2.dim() != 3:
        return NotImplemented
    shape = (b1.shape[0], b1.shape[1], b2.shape[2])
    if add and not _expandable(args[0].shape, shape):
        return NotImplemented
    if add and args[0].dtype != b1.dtype:
        raise RuntimeError(
            f"Input dtypes must be the same, got: input {type_meta_name(args[0].dtype)}, "
            f"batch1: {type_meta_name(b1.dtype)}, batch2: {type_meta_name(b2.dtype)}"
        )
    if b1.dtype == b2.dtype or b2.shape[0] != b1.shape[0] or b2.shape[1] != b1.shape[2]:
        return NotImplemented
    if not (b1.is_floating_point() or b1.is_complex()) or 0 in shape or b1.shape[2] == 0:
        return NotImplemented
    if func is aten.baddbmm_.default and not args[0].is_contiguous():
        return NotImplemented  # a result cuBLAS may not address: not ruled here
    op = func._schema.name
    out = None if func is aten.baddbmm_.default else cap.malloc(math.prod(shape) * b2.element_size(), op)
    a, b = _batch_operands(cap, b1, b2)
    del b, a, out
    raise RuntimeError(
        f"expected scalar type {scalar_type_name(b1.dtype)} but found {scalar_type_name(b2.dtype)}"
    )


def _mv_dtypes(cap, func, args, kwargs):
    """`mv` (Blas.cpp: the result `empty` of `vec.options()`, then `addmv_`) and `addmv` (its meta
    function: shapes, the result `vec.options()`): `addmv_out_cuda` (cuda/Blas.cpp) does nothing for
    an empty matrix, else copies the operands `gemv` cannot address and dispatches on the matrix's
    dtype, whose `const_data_ptr<scalar_t>()` of the vector (and the result, the vector's dtype)
    raises "expected scalar type Float but found BFloat16" (TensorMethods.cpp) before cuBLAS."""
    self = args[0] if func is aten.addmv.default else None
    mat, vec = (args[1], args[2]) if self is not None else (args[0], args[1])
    ts = (mat, vec) if self is None else (self, mat, vec)
    if mat.dtype == vec.dtype or not _on_device(*ts) or mat.dim() != 2 or vec.dim() != 1:
        return NotImplemented
    if mat.shape[1] != vec.shape[0] or not (mat.is_floating_point() or mat.is_complex()):
        return NotImplemented
    if self is not None and (self.dim() > 1 or self.numel() not in (mat.shape[0], 1)):
        return NotImplemented
    if mat.numel() == 0:
        return NotImplemented
    out = cap.malloc(mat.shape[0] * vec.element_size(), func._schema.name)
    v, m = _gemv_operands(cap, mat, vec)
    del m, v, out
    raise RuntimeError(
        f"expected scalar type {scalar_type_name(mat.dtype)} but found {scalar_type_name(vec.dtype)}"
    )


def _dot_dtypes(cap, func, args, kwargs):
    """`dot_cuda`/`vdot_cuda` (cuda/Blas.cpp) `dot_check`: both 1-D, then the same dtype
    (ScalarType names), before the result."""
    a, b = args[0], args[1]
    if a.dtype == b.dtype or not _on_device(a, b) or a.dim() != 1 or b.dim() != 1:
        return NotImplemented
    raise RuntimeError(
        "dot : expected both vectors to have same dtype, but found "
        f"{scalar_type_name(a.dtype)} and {scalar_type_name(b.dtype)}"
    )


DISPATCH[aten.mm.default] = _mm_dtypes
for _f in (aten.addmm.default, aten.addmm_.default, aten._addmm_activation.default):
    DISPATCH[_f] = _addmm_dtypes
for _f in (aten.bmm.default, aten.baddbmm.default, aten.baddbmm_.default):
    DISPATCH[_f] = _bmm_dtypes
for _f in (aten.mv.default, aten.addmv.default):
    DISPATCH[_f] = _mv_dtypes
for _f in (aten.dot.default, aten.vdot.default):
    DISPATCH[_f] = _dot_dtypes


def _grouped_mm(cap, func, call, outs):
    """`_grouped_mm` (cuda/GroupMM.cu, CUTLASS): after the output, a byte buffer of the groups'
    arguments (60 bytes a group) and the kernel's workspace, 512 bytes an SM; both measured on
    the H200 for 2 to 64 groups (`validation/run/sweeps/scratch_sweep.py`)."""
    (args, kw) = call
    offs = kw.get("offs", args[2] if len(args) > 2 else None)
    a, b = args[0], args[1]
    if offs is not None:
        groups = offs.shape[0]
    elif a.dim() == 3:
        groups = a.shape[0]
    else:
        groups = b.shape[0]
    op = func._schema.name
    arguments = cap.malloc(60 * groups, op, "workspace")
    workspace = cap.malloc(512 * cap.device.multi_processor_count, op, "workspace")
    del workspace, arguments


AFTER[aten._grouped_mm.default] = _grouped_mm


def _scaled_grouped_mm(cap, func, call, outs):
    """`_scaled_grouped_mm` with float32 (rowwise) scales on an sm_90 device: CUTLASS's
    `f8f8bf16_grouped_gemm_impl_sm90` (cuda/ScaledGroupMM.cu) allocates, after the output, a byte
    buffer of the groups' arguments (five pointers per group, the group count rounded up to 2, and
    36 bytes of strides and problem shape a group), then the kernel's workspace, 640 bytes an SM
    (the H200's scratch sweep, session 60: 84480 bytes for 2 to 64 groups and 512 or 4096 rows,
    where the bf16 grouped kernel takes 512 an SM)."""
    (args, kw) = call
    offs = kw.get("offs", args[4] if len(args) > 4 else None)
    a, b = args[0], args[1]
    if offs is not None and a.dim() == 2 and b.dim() == 2:
        groups = offs.shape[0]
    elif a.dim() == 2:
        groups = b.shape[0]
    else:
        groups = a.shape[0]
    op = func._schema.name
    aligned = -(-groups // 2) * 2
    arguments = cap.malloc(aligned * 5 * 8 + groups * 12 + 3 * groups * 8, op, "workspace")
    workspace = cap.malloc(640 * cap.device.multi_processor_count, op, "workspace")
    del workspace, arguments


AFTER[aten._scaled_grouped_mm.default] = _scaled_grouped_mm


def _transposed(mat):
    """`check_valid_strides_and_return_transposed` (GroupedMMUtils.h): column-major in the last two
    dims (true) or row-major (false), the leading stride a multiple of 16 bytes."""
    end = mat.dim() - 1
    st, sz, align = mat.stride(), mat.shape, 16 // mat.element_size()
    if st[end - 1] == 1 and st[end] >= max(1, sz[end - 1]):
        lead, col = st[end], True
    elif st[end] == 1 and st[end - 1] >= max(1, sz[end]):
        lead, col = st[end - 1], False
    else:
        raise RuntimeError(f"Invalid strides/sizes, got {list(st)} for strides and {list(sz)} for sizes")
    if lead % align:
        raise RuntimeError(f"strides should be multiple of 16 bytes, got {lead}")
    return col


def _scaled_grouped_mm_v2(cap, func, args, kwargs):
    """`F.scaled_grouped_mm` (PyTorch 2.10) calls `_scaled_grouped_mm_v2`, which has no meta kernel:
    `_scaled_grouped_mm_cuda_v2` (cuda/GroupedBlas.cpp) checks the operands, then its rowwise recipe
    runs `_f8_f8_bf16_rowwise_grouped_mm` as `_scaled_grouped_mm_cuda` does, so the call comes back
    to the mode as `_scaled_grouped_mm` with the one scale of each side."""
    names = ("mat_a", "mat_b", "scale_a", "recipe_a", "swizzle_a", "scale_b", "recipe_b", "swizzle_b")
    names += ("offs", "bias", "out_dtype", "contraction_dim", "use_fast_accum")
    a = dict(zip(names, args, strict=False)) | kwargs
    mat_a, mat_b, offs = a["mat_a"], a["mat_b"], a.get("offs")
    if not (registered(mat_a) and registered(mat_b)):
        return NotImplemented
    if _transposed(mat_a):
        raise ValueError("Expected mat1 to not be transposed")
    if not _transposed(mat_b):
        raise ValueError("Expected mat2 to be transposed")
    if mat_a.dim() not in (2, 3) or mat_b.dim() not in (2, 3):
        raise ValueError("mat_a and mat_b have to be 2 or 3d")
    if mat_a.size(-1) % 16 or mat_b.size(-2) % 16 or mat_b.size(-1) % 16:
        raise ValueError("Expected trailing dimension of mat_a and mat_b's shape to be divisible by 16")
    if (offs is not None) != (mat_a.dim() == 2 or mat_b.dim() == 2):
        raise ValueError("Have to provide offsets if there is a 2d matrix")
    out_dtype = a.get("out_dtype") or torch.bfloat16
    if out_dtype != torch.bfloat16:
        raise ValueError("Only bf16 high precision output types are supported for grouped gemm")
    scale_a, scale_b = list(a["scale_a"]), list(a["scale_b"])
    rowwise = 1  # at::blas::ScalingType::RowWise
    fp8 = torch.float8_e4m3fn
    if not (
        list(a["recipe_a"]) == list(a["recipe_b"]) == [rowwise]
        and mat_a.dtype == mat_b.dtype == fp8
        and len(scale_a) == len(scale_b) == 1
        and scale_a[0].dtype == scale_b[0].dtype == torch.float32
    ):
        # the MXFP8 / MXFP4 / NVFP4 recipes run fbgemm's kernels, not measured
        raise NotImplementedError("vramscope: _scaled_grouped_mm_v2 is modelled for its rowwise recipe only")
    with cap._modes[1]:  # the rowwise kernel comes back to the mode
        return aten._scaled_grouped_mm.default(
            mat_a,
            mat_b,
            scale_a[0],
            scale_b[0],
            offs=offs,
            bias=a.get("bias"),
            out_dtype=out_dtype,
            use_fast_accum=bool(a.get("use_fast_accum", False)),
        )


DISPATCH[aten._scaled_grouped_mm_v2.default] = _scaled_grouped_mm_v2


def _grouped_mm_fallback(cap, func, args, kwargs):
    """`_grouped_mm` off CUTLASS's fast path (cuda/GroupedBlas.cpp: it needs bfloat16 operands and
    output on an sm_90 or sm_100 device; PyTorch's meta kernel knows only that path): the output
    `create_grouped_gemm_output_tensor` makes (its last dim padded to 16 bytes), the offsets read on
    the host, then one `mm_out` into each group's slice, or one `bmm_out` for two 3-D operands
    (`_grouped_mm_fallback`, GroupedMMUtils.h)."""
    names = ("mat_a", "mat_b", "offs", "bias", "out_dtype")
    a = dict(zip(names, args, strict=False)) | kwargs
    mat_a, mat_b, offs = a["mat_a"], a["mat_b"], a.get("offs")
    if not (registered(mat_a) and registered(mat_b)):
        return NotImplemented
    out_dtype = a.get("out_dtype") or mat_a.dtype
    bf16 = mat_a.dtype == mat_b.dtype == out_dtype == torch.bfloat16
    if bf16 and cap.device.capability[0] in (9, 10):
        return NotImplemented
    if out_dtype != mat_a.dtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2:
        size = [offs.shape[0], mat_a.shape[0], mat_b.shape[1]] if b2 else [mat_a.shape[0], mat_b.shape[-1]]
    else:
        size = [mat_a.shape[1], mat_b.shape[1]] if b2 else [mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1]]
    align = 16 // out_dtype.itemsize
    padded = (size[-1] + align - 1) // align * align
    stride = [padded, 1] if a2 != b2 else [size[1] * padded, padded, 1]
    cap.ops += 1
    with cap._modes[1]:  # the parts come back to the mode
        out = torch.empty_strided(size, stride, dtype=out_dtype, device=mat_a.device)
        if not a2 and not b2:
            torch.bmm(mat_a, mat_b, out=out)
            return out
        ends = offs.cpu().tolist()
        start = 0
        for group, end in enumerate(ends):
            if a2 and not b2:
                torch.mm(mat_a[start:end], mat_b[group], out=out[start:end])
            elif b2 and not a2:
                torch.mm(mat_a[group], mat_b[:, start:end], out=out[:, start:end])
            else:
                torch.mm(mat_a[:, start:end], mat_b[start:end], out=out[group])
            start = end
    return out


DISPATCH[aten._grouped_mm.default] = _grouped_mm_fallback


def _weight_int4pack_mm(cap, func, args, kwargs):
    """`_weight_int4pack_mm_cuda` (cuda/int4mm.cu): the (m, n) bfloat16 result alone, n the packed
    weight's size(0) x 8 (kNTileSizeTensor); PyTorch's meta kernel reads a FakeTensor's
    `fake_device`, which the twin's meta tensors lack (blind124/dt04 raised there)."""
    a, b = args[0], args[1]
    if not (registered(a) and registered(b)):
        return NotImplemented
    if a.dim() != 2 or a.dtype != torch.bfloat16 or not a.is_contiguous():
        raise RuntimeError("_weight_int4pack_mm: A must be a contiguous 2-D bfloat16 tensor")
    if b.dim() != 4 or b.dtype != torch.int32:
        raise RuntimeError(
            "_weight_int4pack_mm: B must be a 4-D int32 tensor from _convert_weight_to_int4pack"
        )
    # the kernel's other checks, before its result (int4mm.cu): B's layout, the group size, the
    # scales and zeros' (k / group, n, 2) shape
    group, sz = args[2], args[3]
    k, n, tiles = a.shape[1], b.shape[0] * 8, b.shape[3] * 2
    k_tiles = -(-k // 16)
    if (
        tiles not in (2, 4, 8)
        or not b.is_contiguous()
        or b.shape[1] != k // (tiles * 16)
        or b.shape[2] != 32
        or group not in (32, 64, 128, 256)
        or sz.dim() != 3
        or k_tiles * 16 < group
        or (k_tiles * 16) % group
        or sz.shape[1] != n
        or sz.shape[2] != 2
    ):
        raise RuntimeError(
            f"_weight_int4pack_mm: the int4 kernel refuses B {tuple(b.shape)}, group size {group} "
            f"and scales and zeros {tuple(sz.shape)} for A {tuple(a.shape)}"
        )
    cap.ops += 1
    out = torch.empty((a.shape[0], b.shape[0] * 8), dtype=torch.bfloat16, device="meta")
    return cap.track(out, "aten::_weight_int4pack_mm")


DISPATCH[aten._weight_int4pack_mm.default] = _weight_int4pack_mm


def _convert_weight_to_int4pack(cap, func, args, kwargs):
    """`_convert_weight_to_int4pack_cuda` (int4mm.cu) checks before its result: a contiguous 2-D
    uint8 input, 2, 4 or 8 inner k-tiles, and k (twice the input's columns) a multiple of
    16 x inner k-tiles; the meta kernel checks only the dims and dtype."""
    w, tiles = args[0], args[1]
    if not registered(w):
        return NotImplemented
    if tiles not in (2, 4, 8) or not w.is_contiguous() or (w.dim() == 2 and (w.shape[1] * 2) % (tiles * 16)):
        raise RuntimeError(
            f"_convert_weight_to_int4pack: the kernel refuses {tuple(w.shape)} with {tiles} inner k-tiles"
        )
    return NotImplemented


DISPATCH[aten._convert_weight_to_int4pack.default] = _convert_weight_to_int4pack


def _weight_int8pack_mm(cap, func, args, kwargs):
    """`_weight_int8pack_mm_cuda` (cuda/int8mm.cu): its parts, `x.to(kFloat)`, `w.contiguous()`,
    `scale.to(kFloat)`, an fp32 (B, N) result, then that result `.to(x.dtype())` (blind124/dt04's
    H200 per-op truth: 4 allocations for a (4, 4096) bfloat16 x by a (32000, 4096) weight)."""
    x, w, scale = args[0], args[1], args[2]
    if not (registered(x) and registered(w) and registered(scale)):
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:  # the parts come back to the mode
        x_f32 = x.to(torch.float32)
        w_c = w.contiguous()
        s_f32 = scale.to(torch.float32)
        out = torch.empty((x.shape[0], w.shape[0]), dtype=torch.float32, device=x.device)
        result = out.to(x.dtype)
        del out, s_f32, w_c, x_f32
    return result


DISPATCH[aten._weight_int8pack_mm.default] = _weight_int8pack_mm


def _linear(cap, func, args, kwargs):
    """`aten::linear` reaching the capture itself (a graph's call under `inference_mode`, as
    `torch.export`'s modules make it) with an input neither 2-D nor contiguous: Linear.cpp's
    `matmul(input, weight.t())` and `add_(bias)`. `_matmul_impl` folds the input into one `mm`
    through `reshape` (a copy here) when `weight.t()` requires grad (`should_fold`), which the view
    does on the GPU (ADInplaceOrView keeps a parameter's flag) but not when made below autograd, as
    here: the fold is taken on the weight's own flag (blind54/bb04's H200 history). The other cases
    take Linear.cpp's own path."""
    input, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    if kwargs or bias is None or not registered(input) or input.dim() < 3 or input.is_contiguous():
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        weight_t = weight.t()
        if weight.requires_grad:
            folded = input.reshape(-1, input.shape[-1])
            output = aten._unsafe_view.default(folded.mm(weight_t), (*input.shape[:-1], weight.shape[0]))
            del folded
        else:
            output = aten.matmul.default(input, weight_t)
        output.add_(bias)
    return output


DISPATCH[aten.linear.default] = _linear


def _euclidean_dist(cap, func, args, kwargs):
    """`_euclidean_dist` (Distance.cpp; `cdist` of more than 25 rows takes it): squared norms
    (`pow(2).sum(-1, true)`) and ones padded onto `-2 * x1` and `x2` by `cat`, one matmul, then
    `clamp_min_(0).sqrt_()` in place; its parts run on the twin as the GPU runs them (blind11/k07;
    blind32/af04: the product's cuBLAS workspace on first use)."""
    x1, x2 = args
    if kwargs or not (registered(x1) and registered(x2)):
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:  # the parts come back to the mode
        x1_norm = x1.pow(2).sum(-1, True)
        x1_pad = torch.ones_like(x1_norm)
        x2_norm = x2.pow(2).sum(-1, True)
        x2_pad = torch.ones_like(x2_norm)
        scaled = x1.mul(-2)
        x1_ = torch.cat([scaled, x1_norm, x1_pad], -1)
        # the cat's initializer list (`-2 * x1`, the moved norm and pad) dies last to first, as
        # C++ destroys it (blind83/ce05's H200 history: the pad, the norm, then `-2 * x1`)
        del x1_pad, x1_norm, scaled
        x2_ = torch.cat([x2, x2_pad, x2_norm], -1)
        del x2_norm, x2_pad
        # `x1_.matmul(x2_.mT())` is `mm` of two matrices and `bmm` of two equal batches
        # (`_matmul_impl`); called here `matmul` would reach the mode itself and miss their rules
        result = (torch.mm if x1_.dim() == 2 else torch.bmm)(x1_, x2_.mT)
        del x1_, x2_
        result.clamp_min_(0).sqrt_()
    return result


DISPATCH[aten._euclidean_dist.default] = _euclidean_dist


def _cdist_backward(cap, func, args, kwargs):
    """`_cdist_backward` (Distance.cpp; `cdist`'s backward where it did not take `_euclidean_dist`:
    p other than 2, or 25 rows or fewer, or `donot_use_mm_for_euclid_dist`): x1 and x2 expanded to
    the broadcast batch and made contiguous, the distances and the gradient too, the result
    `at::empty({batch, r1, m})`; then cuda/DistanceKernel.cu's `cdist_backward_kernel_impl` fills
    a `(batch, r2, r1, m)` buffer and sums it over dim 1 into the result (`at::sum_out`), where p is
    not 0 and nothing is empty; the copies die at the return (the gradient's first)."""
    grad, x1, x2, p, dist = args
    if kwargs or not (registered(x1) and registered(x2)):
        return NotImplemented
    cap.ops += 1
    r1, c1, r2 = x1.shape[-2], x1.shape[-1], x2.shape[-2]
    batch = list(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    batch_product = math.prod(batch)
    with cap._modes[1]:  # the parts come back to the mode
        if r1 == 0 or r2 == 0 or c1 == 0 or batch_product == 0:
            return torch.zeros_like(x1)
        x1c = x1.expand([*batch, r1, c1]).contiguous()
        x2c = x2.expand([*batch, r2, x2.shape[-1]]).contiguous()
        dist_c = dist.contiguous()
        grad_c = grad.contiguous()
        result = x1c.new_empty((batch_product, r1, c1))
        if p == 0.0 or grad.numel() == 0:
            result.fill_(0)
        else:
            buffer = x1c.new_empty((batch_product, r2, r1, c1))
            torch.sum(buffer, 1, out=result)
            del buffer
        del grad_c, dist_c, x2c
        out = result.view(x1c.shape)
        del x1c, result
    return out


DISPATCH[aten._cdist_backward.default] = _cdist_backward


def _pdist_backward(cap, func, args, kwargs):
    """`_pdist_backward` (Distance.cpp): the result `empty_like(self)`, then cuda/DistanceKernel.cu's
    `pdist_backward_kernel_impl` fills an `(n - 1, n, m)` buffer and sums it over dim 0 into the
    result, where p is not 0 and nothing is empty (blind57/be04's H200 per-op truth: (96, 128)
    points, a (95, 96, 128) buffer of 4,669,440 bytes beside the 49,152-byte result)."""
    grad, x, p, _dist = args
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        result = torch.empty_like(x, memory_format=torch.contiguous_format)
        if p == 0.0 or grad.numel() == 0 or x.numel() == 0:
            result.fill_(0)
        else:
            buffer = x.new_empty((x.shape[0] - 1, x.shape[0], x.shape[1]))
            torch.sum(buffer, 0, out=result)
            del buffer
    return result


DISPATCH[aten._pdist_backward.default] = _pdist_backward
