"""`torch.linalg` as PyTorch 2.11's CUDA kernels run it: outputs in the order the kernels allocate
them, cuSOLVER's workspaces, the info tensors and `_linalg_check_errors`' reads, and
`linalg_matrix_exp`'s Taylor approximations as its composite code allocates them.

- `_linalg_eigh`: `TORCH_META_FUNC(_linalg_eigh)` (vectors, then values), `_linalg_eigh_out`
  (`at::zeros` infos, `linalg_eigh_stub`, `_linalg_check_errors`), `linalg_eigh_cusolver` in
  `cuda/linalg/BatchLinearAlgebraLib.cpp` (syevj for float32 of 32 to 512 rows, one workspace per
  matrix, allocated and freed in its loop; syevjBatched for batches of at most 32 rows; else syevd).
- `linalg_cholesky_ex`: `linalg_cholesky_ex_out` (L, info; `cholesky_helper_cusolver`'s potrf
  workspace), then `_linalg_check_errors` where asked.
- `_linalg_check_errors`: `infos.any().item<bool>()` (BatchLinearAlgebra.cpp); `any` of one
  element is `self.to(kBool)` copied into the result (`allany_impl`, ReduceOps.cpp).
- `_linalg_svd`: `_linalg_svd_out` and `svd_cusolver` (gesvdj or gesvdjBatched of a column-major
  clone); `linalg_svdvals`' choice of vectors, also where C++ calls it (`svdvals_only`).
- `_linalg_det`, `_linalg_slogdet`, `_linalg_solve_ex`, `linalg_inv_ex`, `linalg_lu_factor_ex`,
  `linalg_lu_solve`, `linalg_solve_triangular`: LU by cuSOLVER's getrf, `lu_det_P`,
  `lu_solve_kernel`'s routes and `triangular_solve_kernel`'s trsm.
- `linalg_matrix_exp`: `mexp`/`mexp_impl` and `compute_T1` ... `compute_T18_scale_square`
  (`aten/src/ATen/native/LinearAlgebra.cpp`), run op by op through the capture.

cuSOLVER's workspace sizes come from `cusolverDn*_bufferSize` at run time: they are the measured
figures of `WORKSPACE`, `GEQRF_WORKSPACE`, `ORGQR_WORKSPACE` and `GETRF_WORKSPACE` (blind scripts'
records and `cusolver_h200.json`, an H200 sweep) where the twin has them (gesvdj's: `_gesvdj`'s
closed form of an H200's grid), and named unmeasured elsewhere.
"""

from __future__ import annotations

import json
import math
import os

import torch

from ._gesvdj import gesvdj_lwork_bounds
from ._kernels import AFTER, DISPATCH, SCRATCH_UNMODELLED, cuda_error, reduce_scratch
from ._tensor import assumed, registered, set_value, tensors_in, value

aten = torch.ops.aten

#: cuSOLVER device workspaces in bytes by (routine, n, dtype) for one matrix, measured on an H200
#: (memory histories of `apply_syevj<float>`: blind21/u04's 512 x 512, blind101/cw02's 256 x 256)
WORKSPACE = {
    ("syevj", 256, torch.float32): 301088,
    ("syevj", 512, torch.float32): 1124416,
    # blind132/eb02's H200 history (SOAP's eigenbases of 100 and 197 rows)
    ("syevj", 100, torch.float32): 61152,
    ("syevj", 197, torch.float32): 189604,
    # `apply_syevd<float>` (blind117/dm02's H200 history: Shampoo's statistics)
    ("syevd", 1000, torch.float32): 16640076,
    ("syevd", 1024, torch.float32): 17429388,
    ("syevd", 1536, torch.float32): 38661004,
    ("syevd", 2048, torch.float32): 68281228,
    # blind132/eb02's H200 history (a 1 x 1 and a 768 x 768 eigenbasis)
    ("syevd", 1, torch.float32): 265496,
    ("syevd", 768, torch.float32): 9959308,
    # kx69_blind309_workspaces_probe's H100 events (one 16 x 16 complex128 matrix)
    ("syevd", 16, torch.complex128): 1258160,
}


#: `syevj_batched_workspace_bytes`' constant elements by dtype (the H100 lines below)
_SYEVJ_BATCHED_CONSTANT = {torch.float32: 64, torch.float64: 48, torch.complex64: 48, torch.complex128: 40}


def syevj_batched_workspace_bytes(n: int, batch: int, dtype):
    """The device bytes of torch 2.11's batched eigh workspace (cusolverDnXsyevBatched, named by
    lk70_blind322_workspaces_probe's error at 65,536 matrices; `apply_syevj_batched` allocates it once
    for the batch) for `batch` n x n matrices, n <= 32: itemsize x (batch (65,540 + 767 n + 3 n^2) + c)
    with c 64 (float32), 48 (float64, complex64) or 40 (complex128) elements, plus the padding (not
    the piece) that rounds a piece of 5 elements a matrix up to 256 bytes. Exact at all 18 H100
    lines measured: kx69 (16 x 16, 512 and 2,048 matrices), lk70 (3 x 3, 1,024 and 8,192) and
    lu72_blind332_eigh_batched_workspace
    (n = 2, 3, 4, 8, 32 and 2 to 12,336 matrices, all four dtypes). None for a dtype not measured and
    past 2^31 elements (the largest measured is lu04's 846,940,480; lk70's 65,536 3 x 3 float32, 4.45e9,
    raised CUSOLVER_STATUS_INTERNAL_ERROR on the H100: where between them it starts to is not known)."""
    const = _SYEVJ_BATCHED_CONSTANT.get(dtype)
    lwork = batch * (65540 + 767 * n + 3 * n * n) + (const or 0)
    if const is None or lwork >= 2**31:
        return None
    size = torch.empty((), dtype=dtype, device="meta").element_size()
    piece = 5 * size * batch
    return size * lwork + -(-piece // 256) * 256 - piece


def potrf_workspace_bytes(n: int) -> int:
    """`cusolverDnXpotrf_bufferSize`'s device bytes for an n x n matrix, as
    `apply_cholesky_cusolver_potrf_looped` allocates them: 128 + 4 ceil(n/32)^2 rounded up to 32,
    the same for float32, float64, complex64 and complex128 (an H200's sweep of 37 sizes from 1 to
    8,192 in each real type and three in each complex one: fixtures/run/linalg_sparse)."""
    tiles = -(-max(n, 1) // 32)
    return 128 + -(-4 * tiles * tiles // 32) * 32


def _backend() -> str:
    """`torch.backends.cuda.preferred_linalg_library()`: "default", "cusolver" or "magma"."""
    return str(torch._C._get_linalg_preferred_backend()).rsplit(".", 1)[-1].lower()


def _workspace(cap, routine: str, n: int, dtype, op: str):
    """cuSOLVER's device workspace for one matrix (None where it is not measured: named so)."""
    if routine == "potrf":
        return cap.malloc(potrf_workspace_bytes(n), op, "workspace")
    nbytes = WORKSPACE.get((routine, n, dtype))
    if nbytes is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER {routine} workspace ({n} x {n}, {dtype})")
        return None
    return cap.malloc(nbytes, op, "temporary")


def check_errors(cap, info, op: str) -> None:
    """`_linalg_check_errors`: `infos.any()` (one bool) and its `.item()`; `any` of a single info
    is its `to(kBool)` copy, of several a `gpu_reduce_kernel` over the int32 infos (`allany_impl`:
    CUDA reduces from the input's own type). blind21/u04's H200 history: 1 + 1 byte per call."""
    if info.numel() == 0:
        return
    result = cap.malloc(1, op, "temporary")
    if info.numel() == 1:
        as_bool = cap.malloc(1, op, "temporary")
        del as_bool
    else:
        reduce_scratch(cap, list(info.shape), list(info.stride()), [True] * info.dim(), 4, 1, op)
    del result


def _check_errors(cap, func, args, kwargs):
    info = args[0]
    if not registered(info):
        return NotImplemented
    cap.ops += 1
    check_errors(cap, info, "aten::_linalg_check_errors")
    return None


DISPATCH[aten._linalg_check_errors.default] = _check_errors


def _eigh_routine(vectors) -> str:
    """`linalg_eigh_cusolver`'s choice (`use_cusolver_syevj_batched_` is on in CUDA builds)."""
    n = vectors.size(-1)
    batch = math.prod(vectors.shape[:-2])
    if batch > 1 and n <= 32:
        return "syevjBatched"
    if vectors.dtype == torch.float32 and 32 <= n <= 512:
        return "syevj"
    return "syevd"


def _linalg_eigh(cap, func, args, kwargs):
    """`_linalg_eigh` on CUDA: the eigenvectors (or, without them, a column-major clone of A)
    and the eigenvalues, the int32 infos, cuSOLVER's workspace (per matrix, freed in the loop,
    except syevjBatched's one for the batch), then `_linalg_check_errors`; the infos die last."""
    a = args[0]
    if not registered(a):
        return NotImplemented
    names = ("A", "UPLO", "compute_v")
    p = dict(zip(names, args, strict=False)) | kwargs
    compute_v = p.get("compute_v", True)
    cap.ops += 1
    op = "aten::_linalg_eigh"
    values, vectors = func(*args, **kwargs)
    cap.track(vectors, op)
    cap.track(values, op)
    if a.numel() == 0:
        return values, vectors
    working = None if compute_v else cap.malloc(a.numel() * a.element_size(), op, "temporary")
    batch = math.prod(a.shape[:-2])
    info = cap.malloc(4 * batch, op, "temporary")
    n = a.size(-1)
    routine = _eigh_routine(a)
    if routine == "syevjBatched":
        nbytes = syevj_batched_workspace_bytes(n, batch, a.dtype)
        if nbytes is None:
            cap.note_unmeasured(f"{op}'s cuSOLVER syevjBatched workspace ({batch} x {n} x {n}, {a.dtype})")
            work = None
        else:
            work = cap.malloc(nbytes, op, "workspace")
        del work
    else:
        for _ in range(batch):
            work = _workspace(cap, routine, n, a.dtype, op)
            del work
    info_t = torch.empty(a.shape[:-2], dtype=torch.int32, device="meta")
    check_errors(cap, info_t, op)
    del info, working
    return values, vectors


DISPATCH[aten._linalg_eigh.default] = _linalg_eigh


#: `cusolverDnXgeev_bufferSize`'s device bytes by (n, dtype, eigenvectors) for real input, as
#: `apply_xgeev` (cuda/linalg/BatchLinearAlgebraLib.cpp) allocates them, once for the whole batch
XGEEV_WORKSPACE = {
    # pt61_linalg_workspace_probe on an H100 (fixtures/run/probes): eig and eigvals of 32 x 32
    # float64, one matrix and 512 (blind272/jm05's Koopman matrices)
    (32, torch.float64, True): 273408,
    (32, torch.float64, False): 273408,
}


def _xgeev(cap, a, values, vectors, op: str):
    """`linalg_eig` / `linalg_eigvals` of real input on CUDA after the check of `linalg_eig`:
    the int32 infos (`at::zeros`), the complex outputs (vectors first), the real/imaginary values
    (2n reals a matrix), for eig the real eigenvectors, `A.mT().contiguous()`, Xgeev's device
    workspace once for the batch (`XGEEV_WORKSPACE`), the copy of A freed; then
    `all(imag_values == 0).item()`, the real temporaries freed, the complex values (and vectors)
    made and copied out, `_linalg_check_errors`, the infos freed. Every size and its order as
    pt61_linalg_workspace_probe's H100 histories show them (32 x 32 float64, 1 and 512 matrices,
    eigenvalues not all real); the source of 2.11's CUDA path is not in this tree."""
    n = a.size(-1)
    batch = _batch(a)
    elem = a.element_size()
    info = cap.malloc(4 * max(1, batch), op, "temporary")
    if vectors is not None:
        cap.track(vectors, op)
    cap.track(values, op)
    if n == 0 or batch == 0:
        del info
        return
    real_imag = cap.malloc(batch * 2 * n * elem, op, "temporary")
    real_vectors = None if vectors is None else cap.malloc(batch * n * n * elem, op, "temporary")
    a_fortran = cap.malloc(batch * n * n * elem, op, "temporary")
    nbytes = XGEEV_WORKSPACE.get((n, a.dtype, vectors is not None))
    if nbytes is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER Xgeev workspace ({n} x {n}, {a.dtype})")
    else:
        work = cap.malloc(nbytes, op, "workspace")
        del work
    del a_fortran
    zero_imag = cap.malloc(batch * n, op, "temporary")
    everything = cap.malloc(1, op, "temporary")
    reduce_scratch(cap, [batch * n], None, [True], 1, 1, op)
    del everything, zero_imag
    del real_vectors, real_imag
    complex_values = cap.malloc(values.numel() * values.element_size(), op, "temporary")
    complex_vectors = (
        None if vectors is None else cap.malloc(vectors.numel() * vectors.element_size(), op, "temporary")
    )
    del complex_vectors, complex_values
    check_errors(cap, torch.empty(a.shape[:-2], dtype=torch.int32, device="meta"), op)
    del info


def _linalg_eig(cap, func, args, kwargs):
    """`linalg_eig` of real input on CUDA: `isfinite(A).all().item()` (op by op through the
    capture), then `_xgeev`."""
    a = args[0]
    if not registered(a) or kwargs:
        return NotImplemented
    if a.dtype not in (torch.float32, torch.float64):
        cap.note_unmeasured("aten::linalg_eig of complex input (no history of its Xgeev path)")
        return NotImplemented
    cap.ops += 1
    op = "aten::linalg_eig"
    if a.numel() > 0:
        with cap._modes[1]:
            finite = torch.isfinite(a)
            everything = finite.all()
            del everything, finite  # the `.item()`'s temporaries, last made first freed
    values, vectors = func(*args)
    _xgeev(cap, a, values, vectors, op)
    return values, vectors


DISPATCH[aten.linalg_eig.default] = _linalg_eig
SCRATCH_UNMODELLED.discard("aten::linalg_eig")


def _linalg_eigvals(cap, func, args, kwargs):
    """`linalg_eigvals` of real input on CUDA (where it does not go through `linalg_eig`: no input
    that may need a gradient, as under inference_mode): `_xgeev` without eigenvectors and without
    `linalg_eig`'s finiteness check."""
    a = args[0]
    if not registered(a) or kwargs:
        return NotImplemented
    if a.dtype not in (torch.float32, torch.float64):
        cap.note_unmeasured("aten::linalg_eigvals of complex input (no history of its Xgeev path)")
        return NotImplemented
    cap.ops += 1
    values = func(*args)
    _xgeev(cap, a, values, None, "aten::linalg_eigvals")
    return values


DISPATCH[aten.linalg_eigvals.default] = _linalg_eigvals


def _linalg_cholesky_ex(cap, func, args, kwargs):
    """`linalg_cholesky_ex` on CUDA: L and info (its meta function's order), `L.copy_(A)`, then
    `cholesky_helper_cusolver`: one matrix takes potrf and its workspace (`potrf_workspace_bytes`),
    a batch potrfBatched over `get_device_pointers`' array (an int64 `arange`, 8 bytes a matrix),
    freed in the helper (the H200's histories: fixtures/run/linalg_sparse); `_linalg_check_errors`
    when `check_errors`. A MAGMA preference is named unmeasured."""
    a = args[0]
    if not registered(a):
        return NotImplemented
    names = ("self", "upper", "check_errors")
    p = dict(zip(names, args, strict=False)) | kwargs
    cap.ops += 1
    op = "aten::linalg_cholesky_ex"
    L, info = func(*args, **kwargs)
    cap.track(L, op)
    cap.track(info, op)
    if L.numel() == 0:
        return L, info
    batch = math.prod(a.shape[:-2])
    if _backend() == "magma":
        cap.note_unmeasured("aten::linalg_cholesky_ex under MAGMA (preferred_linalg_library)")
    elif batch == 1:
        work = _workspace(cap, "potrf", a.size(-1), a.dtype, op)
        del work
    else:
        pointers = cap.malloc(8 * batch, op, "temporary")
        del pointers
    if p.get("check_errors", False):
        check_errors(cap, info, op)
    return L, info


DISPATCH[aten.linalg_cholesky_ex.default] = _linalg_cholesky_ex


#: `cusolverDn<t>orgqr_bufferSize`'s lwork in bytes by (m, n, k, dtype), as `apply_orgqr` allocates
#: it (`sizeof(scalar_t) * lwork`), measured on an H200 (blind60/bh05's per-op truth:
#: `linalg_householder_product` of 8,192 x 1,024 float32 with 1,024 reflectors, 5,309,440 bytes)
ORGQR_WORKSPACE = {
    (8192, 1024, 1024, torch.float32): 5309440,
}


def orgqr_workspace(m: int, n: int, k: int, dtype) -> int | None:
    """`cusolverDn<t>orgqr_bufferSize`'s lwork in bytes: the measured size, else for n == k <= 64
    reflectors in float32 or float64 33,024 elements plus m * n rounded up to 32 elements, the form
    every one of the 128 sizes of `cusolver_h200.json` in that range takes (m 1 to 65,536, both
    dtypes; fitted to that sweep, as cuSOLVER's source is closed) and blind151/eu06's per-op truth
    (parametrizations.orthogonal's Householder map of 1,024 x 10 float32: 173,056 bytes); past 64
    reflectors the measured lwork grows otherwise (96 x 96: 177,152 bytes where the form says
    168,960), so an unmeasured size there stays None."""
    nbytes = ORGQR_WORKSPACE.get((m, n, k, dtype))
    if nbytes is None and 1 <= k == n <= 64 and m >= n and dtype in (torch.float32, torch.float64):
        nbytes = (33024 + -(-m * n // 32) * 32) * (4 if dtype == torch.float32 else 8)
    return nbytes


def _householder_product(cap, func, args, kwargs):
    """`linalg_householder_product` on CUDA (`linalg_householder_product_out`, BatchLinearAlgebra.cpp):
    the result (resized column-major), a contiguous copy of a strided `tau`, then `apply_orgqr`
    (cuda/linalg/BatchLinearAlgebraLib.cpp): the int32 info (`at::zeros({1})`) and, per matrix, the
    cuSOLVER workspace, allocated and freed in its loop; the info dies as the op returns. Without
    reflectors (k = 0) orgqr is skipped. A workspace not measured is named so."""
    a, tau = args[0], args[1]
    if kwargs or not registered(a) or not registered(tau):
        return NotImplemented
    cap.ops += 1
    op = "aten::linalg_householder_product"
    out = func(*args)
    cap.track(out, op)
    tau_c = None if tau.is_contiguous() else cap.malloc(tau.numel() * tau.element_size(), op, "temporary")
    m, n = a.shape[-2:]
    k = tau.shape[-1] if tau.dim() else 0
    if out.numel() > 0 and k > 0:
        info = cap.malloc(4, op, "temporary")
        nbytes = orgqr_workspace(m, n, k, a.dtype)
        if nbytes is None:
            cap.note_unmeasured(f"{op}'s cuSOLVER orgqr workspace ({m} x {n}, {k} reflectors, {a.dtype})")
        else:
            for _ in range(math.prod(a.shape[:-2])):
                work = cap.malloc(nbytes, op, "workspace")
                del work
        del info
    del tau_c
    return out


DISPATCH[aten.linalg_householder_product.default] = _householder_product
SCRATCH_UNMODELLED.discard("aten::linalg_householder_product")


#: `cusolverDnXgeqrf_bufferSize`'s device bytes by (m, n, dtype) for one matrix, as `apply_geqrf`
#: allocates them (cuda/linalg/BatchLinearAlgebraLib.cpp), measured on an H200 (blind117/dm03's,
#: dm05's and dm06's memory histories: `linalg_qr` in svd_lowrank, pca_lowrank and an orthogonal
#: initialisation, `linalg_lstsq`'s gels; 3 x 3: blind131/ea04's random rotations)
GEQRF_WORKSPACE = {
    (3, 3, torch.float32): 3145856,
    (768, 32, torch.float32): 3145856,
    (768, 64, torch.float32): 3145856,
    (768, 768, torch.float32): 5243008,
    (1024, 1024, torch.float32): 6291584,
    (16384, 2049, torch.float32): 2098304,
    (32768, 32, torch.float32): 2418432,
    (32768, 64, torch.float32): 2909952,
    # blind132/eb02's H200 history (SOAP's power-iteration QR refreshes)
    (1, 1, torch.float32): 3145856,
    (100, 100, torch.float32): 3145856,
    (197, 197, torch.float32): 3145856,
    (512, 512, torch.float32): 4194432,
    (1536, 1536, torch.float32): 8388736,
    (2048, 2048, torch.float32): 10485888,
    # blind172/fp06's H200 history (a QR retraction of a 100 x 1,024 head, transposed)
    (1024, 100, torch.float32): 3145856,
    # blind169/fm05's H200 history (`torch.svd_lowrank(W, q=136, niter=2)` of Llama's k/v projections)
    (256, 136, torch.float32): 3145856,
    (1024, 136, torch.float32): 3145856,
    # pt61_linalg_workspace_probe on an H100 (fixtures/run/probes): blind272/jm03's PowerSGD
    # `linalg_qr(M, out=(M, R))` of (n, r) float32 matrices, one and 8 of them
    (1024, 4, torch.float32): 3145856,
    (3072, 4, torch.float32): 3145856,
    (4096, 4, torch.float32): 3145856,
    (32000, 4, torch.float32): 3145856,
    (3072, 8, torch.float32): 3145856,
    # kp68_blind301_linalg_workspaces_probe on an H100 (fixtures/run/probes): blind301/kp04's SVCCA
    # `linalg_qr` of (16,384, 50) float64
    (16384, 50, torch.float64): 2648960,
    (32000, 8, torch.float32): 3145856,
    # le70_blind316_lstsq_workspaces_probe on an H100 (fixtures/run/probes): blind316/le04's lstsq
    (32768, 65, torch.float32): 2909952,
    (32768, 96, torch.float32): 2909952,
    # li70_kan_lstsq_gels_looped_probe on an H100 (validation/run/probes): blind320/li02's KAN grid
    # updates, lstsq of batches of (4,096, 11) float32 (gels_looped)
    (4096, 11, torch.float32): 3145856,
    # lk70_blind322_workspaces_probe on an H100: blind322/lk01's `svd_lowrank(X, q=16)` of a
    # 1,000,000 x 64 matrix (its range finder's QRs), and neighbours
    (1000000, 16, torch.float32): 3145856,
    (64, 16, torch.float32): 3145856,
    (1000000, 8, torch.float32): 3145856,
    (250000, 16, torch.float32): 3145856,
    (64, 8, torch.float32): 3145856,
    # lp71_blind327_svd_lowrank_qr_workspaces_probe on an H100: blind327/lp01's LoRA-GA
    # `svd_lowrank(grad, q=64, niter=4)` range-finder QRs of (3,072, 64), and neighbours
    (3072, 64, torch.float32): 3145856,
    (3072, 32, torch.float32): 3145856,
    (3072, 128, torch.float32): 3145856,
    (6144, 64, torch.float32): 3145856,
    (12288, 64, torch.float32): 3145856,
}

ORGQR_WORKSPACE.update(
    {
        # blind117/dm03's and dm05's H200 histories (`linalg_qr`'s Q, reduced mode); 3 x 3: blind131/ea04's
        (3, 3, 3, torch.float32): 132224,
        (768, 32, 32, torch.float32): 230400,
        (768, 64, 64, torch.float32): 328704,
        (768, 768, 768, torch.float32): 1246208,
        (1024, 1024, 1024, torch.float32): 1639424,
        (32768, 32, 32, torch.float32): 4326400,
        (32768, 64, 64, torch.float32): 8520704,
        # blind132/eb02's H200 history
        (1, 1, 1, torch.float32): 132224,
        (100, 100, 100, torch.float32): 186624,
        (197, 197, 197, torch.float32): 369152,
        (512, 512, 512, torch.float32): 852992,
        (1536, 1536, 1536, torch.float32): 2425856,
        (2048, 2048, 2048, torch.float32): 3212288,
        # blind172/fp06's H200 history: parametrizations.orthogonal's Householder map of a 1,024 x 3,072
        # weight, a hand-made 1,024 x 1,024 product of 512 reflectors (the same lwork as of 1,024), and
        # the QR retraction of a 100 x 1,024 head (transposed)
        (3072, 1024, 1024, torch.float32): 2688000,
        (1024, 1024, 512, torch.float32): 1639424,
        (1024, 100, 100, torch.float32): 556160,
        # blind169/fm05's H200 history (svd_lowrank's range finder, reduced Q)
        (256, 136, 136, torch.float32): 336896,
        (1024, 136, 136, torch.float32): 730112,
        # lp71_blind327_svd_lowrank_qr_workspaces_probe on an H100 (`linalg_qr` of 3,072 x 128 float32)
        (3072, 128, 128, torch.float32): 1770496,
    }
)


def _geqrf_looped(m: int, batch: int) -> bool:
    """`geqrf_kernel` (cuda/linalg/BatchLinearAlgebra.cpp): cuSOLVER's looped geqrf unless the
    matrices have at most 256 rows and there are at least max(2, m / 16) of them (cuBLAS's batched
    geqrf)."""
    return not (m <= 256 and batch >= max(2, m // 16))


def _cusolver_loop(cap, table, key, batch: int, what: str, op: str) -> None:
    """An `at::zeros({1})` int32 info, then per matrix the workspace of `table[key]` (or
    `table(*key)` where it is a function) allocated and freed in the loop (`apply_geqrf`,
    `apply_orgqr`); the info dies last. Unmeasured: named."""
    info = cap.malloc(4, op, "temporary")
    nbytes = table(*key) if callable(table) else table.get(key)
    if nbytes is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER {what} workspace {key}")
    else:
        for _ in range(batch):
            work = cap.malloc(nbytes, op, "workspace")
            del work
    del info


def _linalg_qr(cap, func, args, kwargs):
    """`linalg_qr` on CUDA (`TORCH_IMPL_FUNC(linalg_qr_out)`, BatchLinearAlgebra.cpp): Q then R (its
    meta function), geqrf's working matrix (Q where it holds m x n, else R where it has m rows, else
    a column-major clone), tau (k = min(m, n) per matrix), `geqrf_cusolver`'s info and looped
    workspace, then for Q `orgqr`'s info and looped workspace; tau dies as the op returns. blind117's
    H200 histories: Q, R, tau, 4, geqrf's workspace freed, 4 freed, 4, orgqr's workspace freed, 4
    freed, tau freed. Batches of small matrices take cuBLAS's batched geqrf instead (`_geqrf_looped`)."""
    a = args[0]
    if not registered(a):
        return NotImplemented
    p = dict(zip(("A", "mode"), args, strict=False)) | kwargs
    mode = p.get("mode", "reduced")
    m, n = a.size(-2), a.size(-1)
    k = min(m, n)
    batch = _batch(a)
    cap.ops += 1
    op = "aten::linalg_qr"
    q, r = func(*args, **kwargs)
    cap.track(q, op)
    cap.track(r, op)
    if a.numel() == 0:
        return q, r
    compute_q = mode != "r"
    clone = None
    if not (compute_q and q.size(-1) == n) and r.size(-2) != m:
        clone = cap.malloc(a.numel() * a.element_size(), op, "temporary")
    tau = cap.malloc(batch * k * a.element_size(), op, "temporary")
    if _geqrf_looped(m, batch):
        _cusolver_loop(cap, GEQRF_WORKSPACE, (m, n, a.dtype), batch, "geqrf", op)
    else:
        # `apply_geqrf_batched` (cuda/linalg/BatchLinearAlgebraLibBlas.cpp): `get_device_pointers` of
        # the matrices, then of tau (int64 `arange`s, 8 bytes a matrix), geqrfBatched on the handle
        pointers = cap.malloc(8 * batch, op, "temporary")
        tau_pointers = cap.malloc(8 * batch, op, "temporary")
        cap.blas("geqrfBatched", a.dtype)
        del tau_pointers, pointers
    if compute_q:
        qm, qn = q.size(-2), q.size(-1)
        _cusolver_loop(cap, orgqr_workspace, (qm, qn, k, a.dtype), batch, "orgqr", op)
    del tau, clone
    return q, r


DISPATCH[aten.linalg_qr.default] = _linalg_qr


def _geqrf(cap, func, args, kwargs):
    """`torch.geqrf` (BatchLinearAlgebra.cpp `geqrf` -> `geqrf_out` -> `geqrf_out_helper`): the empty
    QR `resize_as_(input.mT(), Contiguous)` then transposed (batched column-major), tau resized to
    (*batch, min(m, n)), the input copied into QR, then `geqrf_stub` as `linalg_qr`'s (cuSOLVER's
    info and looped workspace, or cuBLAS's batched geqrf's pointer arrays). No meta kernel: without
    this rule it was sized by a CPU run and named unmeasured."""
    a = args[0]
    if not registered(a) or kwargs or len(args) != 1 or a.dim() < 2:
        return NotImplemented
    cap.ops += 1
    op = "aten::geqrf"
    m, n = a.size(-2), a.size(-1)
    batch = _batch(a)
    qr = cap.track(torch.empty(a.mT.shape, dtype=a.dtype, device="meta").mT, op)
    tau = cap.track(torch.empty((*a.shape[:-2], min(m, n)), dtype=a.dtype, device="meta"), op)
    if a.numel() == 0:
        return qr, tau
    if _geqrf_looped(m, batch):
        _cusolver_loop(cap, GEQRF_WORKSPACE, (m, n, a.dtype), batch, "geqrf", op)
    else:
        pointers = cap.malloc(8 * batch, op, "temporary")
        tau_pointers = cap.malloc(8 * batch, op, "temporary")
        cap.blas("geqrfBatched", a.dtype)
        del tau_pointers, pointers
    return qr, tau


DISPATCH[aten.geqrf.default] = _geqrf
SCRATCH_UNMODELLED.discard("aten::geqrf")


def _f_contig_strides(shape) -> tuple:
    """`batched_matrix_contiguous_strides(sizes, /*f_contig=*/true)` (LinearAlgebraUtils.h): the
    contiguous strides with the last two dimensions swapped to a column-major matrix."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(shape[i], 1)
    if len(shape) >= 2:
        strides[-1], strides[-2] = max(shape[-2], 1), 1
    return tuple(strides)


def _linalg_qr_out(cap, func, args, kwargs):
    """`torch.linalg.qr(A, out=(Q, R))` on CUDA (PowerSGD's `_orthogonalize`, powerSGD_hook.py: Q is
    A itself, row-major): the structured kernel gives each out whose strides are not the meta
    function's column-major ones a proxy (`maybe_create_proxy`: `at::empty_strided`), Q's then R's,
    which `TORCH_IMPL_FUNC(linalg_qr_out)` (BatchLinearAlgebra.cpp) fills as `_linalg_qr` fills fresh
    outputs (tau, geqrf in Q's proxy, `triu_out` into R's, orgqr); the proxies are copied into the outs
    and die after the call, R's first. Outs of other shapes (resized) are left as they were."""
    p = dict(zip(("A", "mode"), args, strict=False)) | kwargs
    a, q, r = p.get("A"), p.get("Q"), p.get("R")
    mode = p.get("mode", "reduced")
    if not all(registered(t) for t in (a, q, r)) or mode not in ("reduced", "complete") or a.numel() == 0:
        return NotImplemented
    m, n = a.size(-2), a.size(-1)
    k = min(m, n)
    batch = _batch(a)
    q_shape = (*a.shape[:-1], k if mode == "reduced" else m)
    r_shape = (*a.shape[:-2], k if mode == "reduced" else m, n)
    if tuple(q.shape) != q_shape or tuple(r.shape) != r_shape or not _geqrf_looped(m, batch):
        return NotImplemented
    cap.ops += 1
    op = "aten::linalg_qr"
    elem = a.element_size()
    out = func(*args, **kwargs)
    q_proxy = (
        cap.malloc(q.numel() * elem, op, "temporary") if q.stride() != _f_contig_strides(q_shape) else None
    )
    r_proxy = (
        cap.malloc(r.numel() * elem, op, "temporary") if r.stride() != _f_contig_strides(r_shape) else None
    )
    for t in (q, r):
        set_value(t, None)
    tau = cap.malloc(batch * k * elem, op, "temporary")
    clone = None
    if q.size(-1) != n and r.size(-2) != m:
        clone = cap.malloc(a.numel() * elem, op, "temporary")
    _cusolver_loop(cap, GEQRF_WORKSPACE, (m, n, a.dtype), batch, "geqrf", op)
    _cusolver_loop(cap, orgqr_workspace, (m, q.size(-1), k, a.dtype), batch, "orgqr", op)
    del clone
    del tau
    del r_proxy
    del q_proxy
    return out


DISPATCH[aten.linalg_qr.out] = _linalg_qr_out


def _cholesky_inverse(cap, func, args, kwargs):
    """`cholesky_inverse` of one matrix on CUDA (`cholesky_inverse_kernel_impl`: cuSOLVER for a
    batch of one under the default backend): the result, then `_cholesky_inverse_cusolver_potrs_based`
    (cuda/linalg/BatchLinearAlgebraLib.cpp): a column-major clone of the factor, an `at::zeros({1})`
    int32 info, potrs (no workspace); the info dies, then the clone. blind117/dm06's H200 history
    (512 x 512 and 2,048 x 2,048 float32). Batches (MAGMA where built with it) are left as they were."""
    a = args[0]
    if not registered(a) or a.dim() != 2 or _backend() == "magma":
        return NotImplemented
    cap.ops += 1
    op = "aten::cholesky_inverse"
    out = func(*args, **kwargs)
    cap.track(out, op)
    if a.numel() == 0:
        return out
    clone = cap.malloc(a.numel() * a.element_size(), op, "temporary")
    info = cap.malloc(4, op, "temporary")
    del info, clone
    return out


DISPATCH[aten.cholesky_inverse.default] = _cholesky_inverse


def _linalg_pinv(cap, func, args, kwargs):
    """`linalg_pinv` without tolerances given and not Hermitian, as LinearAlgebra.cpp runs it, op by
    op through the capture: `get_atol_rtol`'s float64 `zeros` and `full` (eps * max(m, n)),
    `input.svd()` (reduced `linalg_svd`), `max(atol, rtol * S[..., :1])`, `where(S > tol,
    S.reciprocal(), zeros)` (its arguments made right to left, as the H200's history has them),
    then `matmul(V * S_pinv, U^H)`. blind117/dm06's history of 16,384 x 2,049 float32."""
    a = args[0]
    p = dict(zip(("self",), args, strict=False)) | kwargs
    if (
        not registered(a)
        or p.get("atol") is not None
        or p.get("rtol") is not None
        or p.get("hermitian", False)
        or a.numel() == 0
        or a.dtype not in (torch.float32, torch.float64)
    ):
        return NotImplemented
    with cap._modes[1]:
        m, n = a.size(-2), a.size(-1)
        atol = a.new_zeros((), dtype=torch.float64)
        rtol = a.new_full((), torch.finfo(a.dtype).eps * max(m, n), dtype=torch.float64)
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        v = vh.mH
        max_val = s.narrow(-1, 0, 1)
        tol = torch.max(atol.unsqueeze(-1), rtol.unsqueeze(-1) * max_val)
        zero = s.new_zeros(())
        recip = s.reciprocal()
        keep = s > tol
        s_pinv = torch.where(keep, recip, zero).to(a.dtype)
        del keep, recip, zero
        scaled = v * s_pinv.unsqueeze(-2)
        out = torch.matmul(scaled, u.mH)
        del scaled
        # then C++ destroys the locals in reverse: S_pseudoinv, tol, max_val, the svd's (U, S, Vh)
        # and get_atol_rtol's (atol, rtol), each tuple first to last (dm06's H200 history)
        del s_pinv, tol, max_val, v
        del u, s, vh
        del atol, rtol
        return out


for _ov in (aten.linalg_pinv.atol_rtol_tensor, aten.linalg_pinv.atol_rtol_float):
    DISPATCH[_ov] = _linalg_pinv


#: `cusolverDn<t>ormqr_bufferSize`'s lwork in bytes by (m, nrhs, k, dtype), as `apply_ormqr`
#: allocates it for gels (Q^H B from the left), measured on an H200 (blind117/dm06's history)
ORMQR_WORKSPACE = {
    (16384, 200, 2049, torch.float32): 168527872,
    # pt61_linalg_workspace_probe on an H100 (fixtures/run/probes): blind272/jm05's global Koopman fit
    (32768, 32, 32, torch.float64): 76163328,
    # kp68_blind301_linalg_workspaces_probe on an H100: blind301/kp04's whitened regression
    (16384, 512, 512, torch.float64): 105388032,
    # le70_blind316_lstsq_workspaces_probe on an H100: blind316/le04's linear probe (32,768 x 65,
    # 32 right-hand sides) and a float32 grid in k and nrhs around it
    (32768, 32, 65, torch.float32): 42419968,
    (32768, 32, 32, torch.float32): 38081664,
    (32768, 32, 64, torch.float32): 42288256,
    (32768, 32, 96, torch.float32): 46503040,
    (32768, 32, 128, torch.float32): 50726016,
    (32768, 1, 65, torch.float32): 42356480,
    (32768, 64, 65, torch.float32): 42485632,
    # li70_kan_lstsq_gels_looped_probe on an H100: blind320/li02's KAN grid updates
    (4096, 256, 11, torch.float32): 5163520,
    (4096, 64, 11, torch.float32): 4769536,
    (4096, 1, 11, torch.float32): 4640384,
}


def _linalg_lstsq(cap, func, args, kwargs):
    """`linalg_lstsq` with m >= n on CUDA (driver gels, the only one there):
    `linalg_lstsq_out` (BatchLinearAlgebra.cpp): the int32 infos (`at::zeros`), the solution
    (max(m, n) x nrhs, column-major), A's column-major copy, then `lstsq_kernel`
    (cuda/linalg/BatchLinearAlgebra.cpp). One matrix, and batches `gels_looped` takes (more than
    256 rows or too few matrices): `linalg_lstsq_gels`' tau (k per matrix), geqrf and ormqr (each
    its info, then a workspace allocated and freed per matrix: `apply_geqrf`, `apply_ormqr`) and
    the batch's trsm (A, the column-major copy, is not cloned again); tau dies. Batches of at most
    256 rows in at least max(2, m / 16) matrices: `gels_batched_cublas` (`apply_gels_batched`: a
    column-major clone of A, the pointer arrays of it and of B, 8 bytes a matrix, freed with the
    clone after gelsBatched). Then for m > n the residuals (`sum_out` of the
    squared rows n: of the solution); the copy dies, `_linalg_check_errors`, the infos die. The
    solution is its first n rows. blind117/dm06's H200 history (16,384 x 2,049 float32, 200
    right-hand sides); pt61_linalg_workspace_probe's H100 history of (512, 64, 32) float64 with 32
    (fixtures/run/probes)."""
    a, b = args[0], args[1]
    p = dict(zip(("self", "b", "rcond"), args, strict=False)) | kwargs
    driver = p.get("driver")
    if driver is not None and registered(a) and driver.lower() != "gels":
        # `get_default_lstsq_driver` (BatchLinearAlgebra.cpp): on CUDA only gels, checked after
        # lower-casing; the host's kernel that the twin would fall back to takes all four drivers
        raise RuntimeError("torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA")
    if (
        not registered(a)
        or not registered(b)
        or a.dim() < 2
        or b.dim() != a.dim()
        or tuple(a.shape[:-2]) != tuple(b.shape[:-2])
        or a.dtype not in (torch.float32, torch.float64)
        or b.dtype != a.dtype
    ):
        return NotImplemented
    m, n = a.shape[-2:]
    nrhs = b.size(-1)
    batch = _batch(a)
    if m < n or m == 0 or n == 0 or nrhs == 0 or batch == 0:
        return NotImplemented
    batched = a.dim() > 2 and m <= 256 and batch >= max(2, m // 16)  # `gels_batched_cublas`
    cap.ops += 1
    op = "aten::linalg_lstsq"
    elem = a.element_size()
    lead = tuple(a.shape[:-2])
    info = cap.malloc(4 * batch, op, "temporary")
    full = torch.empty_strided(
        (*lead, m, nrhs), (*_lead_strides(lead, m * nrhs), 1, m), dtype=a.dtype, device="meta"
    )
    cap.track(full, op)
    set_value(full, None)
    copy = cap.malloc(batch * m * n * elem, op, "temporary")
    if batched:
        clone = cap.malloc(batch * m * n * elem, op, "temporary")
        a_pointers = cap.malloc(8 * batch, op, "temporary")
        b_pointers = cap.malloc(8 * batch, op, "temporary")
        cap.blas("gelsBatched", a.dtype)
        del b_pointers, a_pointers, clone
    else:
        k = min(m, n)
        tau = cap.malloc(batch * k * elem, op, "temporary")
        _cusolver_loop(cap, GEQRF_WORKSPACE, (m, n, a.dtype), batch, "geqrf", op)
        _cusolver_loop(cap, ORMQR_WORKSPACE, (m, nrhs, k, a.dtype), batch, "ormqr", op)
        # R X = Q^H B by `triangular_solve_kernel` (two 8-byte pointer arrays for n < 64:
        # pt61_linalg_workspace_probe's 32,768 x 32 float64 history on an H100, fixtures/run/probes)
        trsm(cap, batch, n, a.dtype, op)
        del tau
    if m > n:
        residuals = torch.empty((*lead, nrhs), dtype=a.dtype, device="meta")
        cap.track(residuals, op)
        reduce_scratch(
            cap,
            [*lead, m - n, nrhs],
            [*_lead_strides(lead, m * nrhs), 1, m],
            [False] * len(lead) + [True, False],
            elem,
            elem,
            op,
        )
    else:
        residuals = torch.empty((0,), dtype=a.dtype, device="meta")
    set_value(residuals, None)
    del copy
    check_errors(cap, torch.empty(lead, dtype=torch.int32, device="meta"), op)
    del info
    solution = full.as_strided((*lead, n, nrhs), full.stride())
    rank = torch.empty((0,), dtype=torch.int64, device="meta")
    singular_values = torch.empty((0,), dtype=a.dtype, device="meta")
    return solution, residuals, rank, singular_values


def _lead_strides(lead, matrix: int) -> list:
    """Contiguous strides of the batch dimensions `lead` over matrices of `matrix` elements."""
    strides, step = [], matrix
    for size in reversed(lead):
        strides.append(step)
        step *= size
    return strides[::-1]


DISPATCH[aten.linalg_lstsq.default] = _linalg_lstsq


#: `cusolverDn<t>gesvdjBatched_bufferSize`'s workspace in bytes by (m, n, batch, compute_uv, dtype),
#: as `at::cuda::solver::gesvdjBatched` allocates it (CUDASolver.cpp), measured on an H200
#: (fixtures/run/svd/svd_probe_h200.json: a batch of 8 of 16 x 16 and one 32 x 20, with vectors)
GESVDJ_BATCHED_WORKSPACE = {
    (16, 16, 8, True, torch.float32): 3968,
    (32, 20, 1, True, torch.float32): 3968,
    (32, 32, 4096, True, torch.float32): 3968,  # blind117/dm03's H200 history
    # blind172/fp03's H200 history: decorrelated batch norm's groups of 32 channels, and the float64
    # covariance of 3 x 3 patches (992 elements in either type, as every size measured so far)
    (32, 32, 2, True, torch.float32): 3968,
    (32, 32, 8, True, torch.float32): 3968,
    (27, 27, 1, True, torch.float64): 7936,
    # blind196/gn05's per-op truth: a Lagrangian network's vmapped pinv of 8,192 2 x 2 mass matrices
    (2, 2, 8192, True, torch.float64): 7936,
    # rp61_small_batched_linalg_probe_s61 on an H100 (fixtures/run/probes): Kabsch SVDs of 3 x 3
    # covariances and a batch of 4 x 4; cuSOLVER's buffer size is closed source, so measured points
    (3, 3, 64, True, torch.float32): 3968,
    (3, 3, 4096, True, torch.float32): 3968,
    (3, 3, 64, True, torch.float64): 7936,
    (4, 4, 256, True, torch.float32): 3968,
}

#: `cusolverDn<t>gesvd_bufferSize`'s lwork in bytes by (m, n, dtype), m >= n, as
#: `apply_svd_cusolver_gesvd` allocates it (blind117/dm03's H200 history: driver="gesvd")
GESVD_WORKSPACE = {
    (768, 768, torch.float32): 8139776,
}

#: `cusolverDn<t>gesvdaStridedBatched`'s workspace in bytes by (m, n, batch, dtype), m >= n,
#: singular values only (blind117/dm03's H200 history: driver="gesvda")
GESVDA_WORKSPACE = {
    (512, 16, 256, torch.float32): 34177024,
}


def _gesvd(cap, a, m: int, n: int, full: bool, compute_uv: bool, op: str) -> None:
    """`svd_cusolver_gesvd` (cuda/linalg/BatchLinearAlgebraLib.cpp): a column-major clone of A (of
    A^H where m < n), then `apply_svd_cusolver_gesvd`'s workspace, rwork (min(m, n) reals) and,
    with vectors, the n x n (n x k) Vh buffer, all for the whole batch; they die in reverse, then
    the clone. blind117/dm03's H200 history (768 x 768 float32, full_matrices=True)."""
    if m < n:
        m, n = n, m
    size = a.element_size()
    nbytes = GESVD_WORKSPACE.get((m, n, a.dtype))
    if nbytes is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER gesvd workspace ({m} x {n}, {a.dtype})")
        return
    k = min(m, n)
    clone = cap.malloc(a.numel() * size, op, "temporary")
    work = cap.malloc(nbytes, op, "workspace")
    rwork = cap.malloc(k * size, op, "temporary")
    vh = cap.malloc(n * (n if full else k) * size, op, "temporary") if compute_uv else None
    del vh, rwork, work, clone


def _gesvda(cap, a, m: int, n: int, op: str) -> None:
    """`svd_cusolver_gesvdaStridedBatched` without vectors: a column-major clone of A, then the U
    (batch x m x n) and V (batch x n x n) it must be given, gesvdaStridedBatched's workspace; they
    die in reverse, then the clone. blind117/dm03's H200 history (256 x 512 x 16 float32)."""
    batch, size = math.prod(a.shape[:-2]), a.element_size()
    nbytes = GESVDA_WORKSPACE.get((m, n, batch, a.dtype))
    if m < n or nbytes is None:
        cap.note_unmeasured(
            f"{op}'s cuSOLVER gesvdaStridedBatched workspace ({batch} x {m} x {n}, {a.dtype})"
        )
        return
    clone = cap.malloc(a.numel() * size, op, "temporary")
    u = cap.malloc(batch * m * n * size, op, "temporary")
    v = cap.malloc(batch * n * n * size, op, "temporary")
    work = cap.malloc(nbytes, op, "workspace")
    del work, v, u, clone


def gesvdj_workspace_bytes(m: int, n: int, full_matrices: bool, dtype) -> tuple[int, int] | None:
    """`apply_svd_cusolver_gesvdj`'s workspace, `sizeof(scalar_t) * lwork` for one matrix: the least
    and the most bytes of `_gesvdj`'s fitted lwork (the same in elements for float32, float64 and
    complex64), or None for the types not measured."""
    # complex64: the same lwork in elements (kx69_blind309_workspaces_probe's H100 events: 16 x 256,
    # 790,592 elements, 6,324,736 bytes where float32 takes 3,162,368)
    if dtype not in (torch.float32, torch.float64, torch.complex64):
        return None
    lo, hi = gesvdj_lwork_bounds(m, n, econ=not full_matrices)
    return lo * dtype.itemsize, hi * dtype.itemsize


def _gesvdj(cap, a, m: int, n: int, full: bool, compute_uv: bool, op: str) -> None:
    """`apply_svd_cusolver_gesvdj` on the clone: without vectors, scratch U (m x k) and V (n x k);
    one workspace for the whole batch (the loop reuses it); all freed as it returns. Where the
    fitted forms of lwork disagree on the size, the most, with a warning."""
    k, size = min(m, n), a.element_size()
    scratch_u = None if compute_uv else cap.malloc(m * k * size, op, "temporary")
    scratch_v = None if compute_uv else cap.malloc(n * k * size, op, "temporary")
    bounds = gesvdj_workspace_bytes(m, n, full, a.dtype)
    if bounds is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER gesvdj workspace ({m} x {n}, {a.dtype})")
        work = None
    else:
        lo, hi = bounds
        if lo != hi:
            cap.warn_once(
                f"gesvdj:{m}x{n}:{full}:{a.dtype}",
                f"{op}: cuSOLVER gesvdj's workspace for {m} x {n} ({a.dtype}) lies between {lo:,} "
                f"and {hi:,} bytes by the forms that fit the H200's measured grid: the twin takes "
                f"{hi:,} (an upper bound)",
            )
        work = cap.malloc(hi, op, "temporary")
    del work, scratch_v, scratch_u


def _gesvdj_batched(cap, a, m: int, n: int, full: bool, compute_uv: bool, op: str) -> None:
    """`svd_cusolver_gesvdjBatched` on the clone: the kernel writes full U and V, so with vectors
    and `full_matrices=False` a non-square matrix takes a full U (m > n) or V (m < n) of the batch,
    copied back after; `apply_svd_cusolver_gesvdjBatched`, without vectors, scratch U (m x m) and V
    (n x n) of the batch; `gesvdjBatched`'s workspace, freed at its return."""
    batch, size = math.prod(a.shape[:-2]), a.element_size()
    full_u = compute_uv and not full and m > n
    full_v = compute_uv and not full and m < n
    aux = (
        cap.malloc(batch * (m * m if full_u else n * n) * size, op, "temporary") if full_u or full_v else None
    )
    scratch_u = None if compute_uv else cap.malloc(batch * m * m * size, op, "temporary")
    scratch_v = None if compute_uv else cap.malloc(batch * n * n * size, op, "temporary")
    nbytes = GESVDJ_BATCHED_WORKSPACE.get((m, n, batch, bool(compute_uv), a.dtype))
    if nbytes is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER gesvdjBatched workspace ({batch} x {m} x {n}, {a.dtype})")
    else:
        work = cap.malloc(nbytes, op, "temporary")
        del work
    del scratch_v, scratch_u, aux


def _linalg_svd(cap, func, args, kwargs):
    """`_linalg_svd` on CUDA (`TORCH_IMPL_FUNC(_linalg_svd_out)`, BatchLinearAlgebra.cpp): U and Vh,
    then S (its meta function's order), `at::zeros` int32 infos, `svd_cusolver`
    (BatchLinearAlgebraLib.cpp) on `cloneBatchedColumnMajor(A)`: gesvdjBatched where both sides
    are at most 32 (`_gesvdj_batched`), else gesvdj (`_gesvdj`); the clone dies, then
    `_linalg_check_errors`; the infos die last. The H200's histories of eleven calls:
    fixtures/run/svd. An explicit gesvd or gesvda driver, complex types' workspaces and MAGMA are
    named unmeasured; so is gesvd's fallback for matrices gesvdj does not converge on."""
    a = args[0]
    if not registered(a) or a.dim() < 2:
        return NotImplemented
    names = ("A", "full_matrices", "compute_uv", "driver")
    p = dict(zip(names, args, strict=False)) | kwargs
    full, compute_uv = p.get("full_matrices", False), p.get("compute_uv", True)
    if _SVDVALS and compute_uv and not full and not _SVDVALS[-1]:
        # `linalg_svdvals` of a matrix that needs no gradient (`svdvals_only`)
        compute_uv = False
        args, kwargs = (a, False, False), {"driver": p.get("driver")}
    cap.ops += 1
    op = "aten::_linalg_svd"
    u, s, vh = func(*args, **kwargs)
    cap.track(u, op)
    cap.track(vh, op)
    cap.track(s, op)
    if a.numel() == 0:
        return u, s, vh
    m, n = a.size(-2), a.size(-1)
    batch = math.prod(a.shape[:-2])
    info = cap.malloc(4 * batch, op, "temporary")
    if _backend() != "magma" and p.get("driver") == "gesvd" and a.dtype in (torch.float32, torch.float64):
        _gesvd(cap, a, m, n, full, compute_uv, op)
    elif _backend() != "magma" and p.get("driver") == "gesvda" and not compute_uv:
        _gesvda(cap, a, m, n, op)
    elif _backend() == "magma" or p.get("driver") not in (None, "gesvdj"):
        cap.note_unmeasured(f"{op} outside cuSOLVER's gesvdj (driver {p.get('driver')}, {_backend()})")
    else:
        clone = cap.malloc(a.numel() * a.element_size(), op, "temporary")
        run = _gesvdj_batched if m <= 32 and n <= 32 else _gesvdj
        run(cap, a, m, n, full, compute_uv, op)
        del clone
    info_t = torch.empty(a.shape[:-2], dtype=torch.int32, device="meta")
    check_errors(cap, info_t, op)
    del info
    return u, s, vh


DISPATCH[aten._linalg_svd.default] = _linalg_svd
SCRATCH_UNMODELLED.discard("aten::_linalg_svd")


#: while a function whose C++ code takes singular values through `linalg_svdvals` runs: whether
#: its matrix needs a gradient (innermost last)
_SVDVALS = []


def svdvals_only(original, when=None):
    """`original` (`torch.linalg.svdvals`, or a function whose C++ code calls `linalg_svdvals`:
    `matrix_norm` of 2, -2 or nuc, `cond`, `matrix_rank`, `nuclear_norm`, `svd` without vectors),
    run so that its `_linalg_svd(A, full_matrices=false, compute_uv)` computes vectors only where A
    needs a gradient (`_requires_fw_or_bw_grad`, BatchLinearAlgebra.cpp): the twin's meta tensors
    count as subclass-like there (`isTensorSubclassLike`), which would compute them. `when(*args,
    **kwargs)` says whether a call is such a one."""

    def run(*args, **kwargs):
        a = args[0] if args else next(iter(kwargs.values()), None)
        if not registered(a) or (when is not None and not when(*args, **kwargs)):
            return original(*args, **kwargs)
        _SVDVALS.append((torch.is_grad_enabled() and a.requires_grad) or _has_forward_grad(a))
        try:
            return original(*args, **kwargs)
        finally:
            _SVDVALS.pop()

    run.__name__ = getattr(original, "__name__", "svdvals_only")
    return run


def svd_without_vectors(*args, **kwargs) -> bool:
    """`torch.svd(input, some, compute_uv)` / `Tensor.svd`: `compute_uv=False` takes `linalg_svdvals`."""
    return not (args[2] if len(args) > 2 else kwargs.get("compute_uv", True))


def _has_forward_grad(t) -> bool:
    """`input._fw_grad(0).defined()`: a forward-mode tangent at level 0."""
    import torch.autograd.forward_ad as fwad

    return fwad._current_level >= 0 and fwad.unpack_dual(t).tangent is not None


#: The bytes of shared memory a block may take without opting in (48 KiB): MAGMA 2.6.1's (torch 2.11's,
#: .ci/magma/build_magma.sh) `magma_<t>potrs_batched` of one right-hand side runs two
#: `magmablas_<t>trsv_outofplace_batched` over the whole n, each block holding the solution in
#: `shmem = n * sizeof(T)` bytes of dynamic shared memory beside `gemv_template_device`'s static
#: `sdata[DIM_X * DIM_Y]` (128 elements: 128 x 1 and 16 x 8 threads); a launch past the limit fails with
#: cudaErrorInvalidValue, raised by the `AT_CUDA_CHECK(cudaGetLastError())` after
#: `magmaCholeskySolveBatched`. float32 of 12,161 rows and up (pytorch#38603, MAGMA 2.5.2), float64 of
#: 6,144 on the H100 (fixtures/run/run_blind334_h100.jsonl, lw04's last phase)
_MAGMA_TRSV_SHARED_BYTES = 48 * 1024
_MAGMA_TRSV_STATIC_ELEMENTS = 128


def _magma_trsv_launch_fails(n: int, itemsize: int) -> bool:
    """Whether MAGMA's batched trsv of n rows asks for more shared memory than a block may take."""
    return (n + _MAGMA_TRSV_STATIC_ELEMENTS) * itemsize > _MAGMA_TRSV_SHARED_BYTES


def _cholesky_solve(cap, func, args, kwargs):
    """`cholesky_solve(B, L)` on CUDA (BatchLinearAlgebra.cpp): both operands broadcast to their
    common batch (views), then `_cholesky_solve_helper_cuda`. A single system (or the cuSOLVER
    preference) takes `_cholesky_solve_helper_cuda_cusolver`: `zeros({1})` int32 infos,
    `cloneBatchedColumnMajor` of B (the result) and of L, potrs in place (no workspace), or for a
    batch with one right-hand side potrsBatched over two `get_device_pointers` arrays (8 bytes a
    matrix each, B's first); the L copy dies, then the infos. A batch otherwise takes MAGMA
    (`use_magma_`): the two copies, MAGMA's pointer arrays being pinned host memory, then its queue's
    cuBLAS handle (blind332/lu03's H100 history: the backward's first batched solve makes the autograd
    thread's 32 MiB workspace after the L copy, before it dies). The H200's histories:
    fixtures/run/linalg_sparse (one system, a batch, broadcast L and B) and af04."""
    b, a = args[0], args[1]
    if not (registered(b) and registered(a)) or b.dim() < 2 or a.dim() < 2:
        return NotImplemented
    cap.ops += 1
    op = "aten::cholesky_solve"
    out = func(*args, **kwargs)
    if out.numel() == 0:
        return cap.track(out, op)
    batch = math.prod(out.shape[:-2])
    a_numel = batch * a.size(-1) * a.size(-2)
    backend = _backend()
    cusolver = backend == "cusolver" or (backend == "default" and batch == 1)
    infos = cap.malloc(4, op, "temporary") if cusolver else None
    cap.track(out, op)
    a_copy = cap.malloc(a_numel * a.element_size(), op, "temporary")
    if cusolver and batch > 1 and out.size(-1) == 1:
        b_pointers = cap.malloc(8 * batch, op, "temporary")
        a_pointers = cap.malloc(8 * batch, op, "temporary")
        del a_pointers, b_pointers
    elif not cusolver and out.dim() > 2:
        # `apply_cholesky_solve`'s batch makes a `MAGMAQueue` after the copies, which takes the
        # current cuBLAS handle (cuda/linalg/MagmaUtils.h), and with it the handle's workspace
        # on its first use on this thread and stream (CublasHandlePool.cpp)
        cap.blas("magma_potrs_batched", out.dtype)
    if (
        not cusolver
        and out.dim() > 2
        and out.size(-1) == 1
        and _magma_trsv_launch_fails(out.size(-2), out.element_size())
    ):
        # the two working copies die in the unwinding, before the error reaches Python
        del a_copy, out
        raise torch.AcceleratorError(cuda_error("invalid argument", "cudaErrorInvalidValue"))
    del a_copy, infos
    return out


DISPATCH[aten.cholesky_solve.default] = _cholesky_solve


# ---- LU: slogdet, lu_factor_ex, lu_solve, solve_triangular -----------------------------

#: `cusolverDn<t>getrf_bufferSize`'s lwork in bytes by (m, n, dtype) for one matrix, as
#: `at::cuda::solver::getrf` allocates it (CUDASolver.cpp), measured on an H200 (memory histories:
#: blind48/av01's float32 of 12, 48 and 192 rows, blind101/cw02's of 256)
GETRF_WORKSPACE = {
    # blind121/dq02's H200 per-op truth (WaveGlow's slogdet of 8 x 8, linalg_inv_ex of 6 x 6)
    (6, 6, torch.float32): 768,
    (8, 8, torch.float32): 768,
    (12, 12, torch.float32): 768,
    # blind126/dv02's H200 history (Cayley solves and inverses of 12, 24 and 48 rows, 40 of each:
    # 80 workspaces of 768 bytes, 40 of 1,280)
    (24, 24, torch.float32): 768,
    (48, 48, torch.float32): 1280,
    (192, 192, torch.float32): 3840,
    (256, 256, torch.float32): 4352,
    # blind117/dm06's H200 history (`lu_factor_looped_cusolver` of K-FAC's factor, `solve_ex`'s Gram)
    (2048, 2048, torch.float32): 52480,
    (2049, 2049, torch.float32): 55808,
    # pt61_linalg_workspace_probe on an H100 (fixtures/run/probes): blind272/jm05's complex solve
    (32, 32, torch.complex128): 768,
}


def _batch(t) -> int:
    """`batchCount`: the number of matrices in `t`."""
    return math.prod(t.shape[:-2])


def trsm(cap, batch: int, n: int, dtype, op: str) -> None:
    """`triangular_solve_kernel` (cuda/linalg/BatchLinearAlgebra.cpp) for A of `batch` matrices of
    n rows: at most 8 of at least 64 rows take `triangular_solve_cublas` (trsm in a loop on the
    current cuBLAS handle), all others `triangular_solve_batched_cublas` (`get_device_pointers` of
    A, then of B: 8 bytes a matrix each, then the handle), more than 512 rows too (no MAGMA batched
    trsm in the wheel's events). The H200's history (blind48/av01): the handle's 32 MiB workspace
    at the first trsm, two 8-byte arrays for one 48 x 48 matrix; the H100's
    (kp68_blind301_linalg_workspaces_probe: 32 x 4,096 and 9 x 513 float64): two arrays of 8 bytes
    a matrix, then the backward thread's first handle workspace."""
    if batch <= 8 and n >= 64:
        cap.blas("trsm", dtype)
    else:
        a_pointers = cap.malloc(8 * batch, op, "temporary")
        b_pointers = cap.malloc(8 * batch, op, "temporary")
        cap.blas("trsmBatched", dtype)
        del b_pointers, a_pointers


def _solve_triangular(cap, func, call, outs):
    """`linalg_solve_triangular` after its outputs: `triangular_solve_kernel` (`trsm`) over A and B
    broadcast to their common batch. `linalg_solve_triangular_out` (BatchLinearAlgebra.cpp) clones
    an A that is neither row- nor column-contiguous (`is_row_or_column_contiguous`) once out holds
    B, before the kernel: an A broadcast to B's batch (stride 0) is such a tensor, so a single
    factor solved against batched right-hand sides is copied once per matrix of the batch."""
    (args, _kw) = call
    a, b = args[0], args[1]
    batch_shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_f = a if a.shape[:-2] == batch_shape else a.expand(*batch_shape, *a.shape[-2:])
    clone = None
    if not (a_f.is_contiguous() or a_f.mT.is_contiguous()):
        clone = cap.malloc(a_f.numel() * a_f.element_size(), "aten::linalg_solve_triangular", "temporary")
    batch = math.prod(batch_shape)
    if batch > 0 and b.numel() > 0:
        trsm(cap, batch, a.size(-1), a.dtype, "aten::linalg_solve_triangular")
    del clone


AFTER[aten.linalg_solve_triangular.default] = _solve_triangular


def lu_factor(cap, lu, pivot: bool, op: str) -> None:
    """`lu_factor` on CUDA (cuda/linalg/BatchLinearAlgebra.cpp) of the F-contiguous `lu`. The default
    backend takes cuSOLVER's side for square matrices, single, of at most 16 rows, or of at most 128
    rows in at most 16 matrices, else MAGMA's batched getrf; cuSOLVER's side (and
    the cuSOLVER preference) runs `lu_factor_looped_cusolver` for rectangular, single or 512-row
    matrices: `getrf` with its workspace (`GETRF_WORKSPACE`) allocated and freed per matrix; other
    batches `lu_factor_batched_cublas`: `get_device_pointers` (8 bytes a matrix, blind101/cw07's and
    blind117/dm04's H200 per-op records of 96 x 3 x 3 to 2048 x 12 x 12) and getrfBatched on the
    handle. Without pivoting, the trivial pivots from an int32 `arange`."""
    m, n = lu.size(-2), lu.size(-1)
    batch = _batch(lu)
    backend = _backend()
    cusolver_side = backend == "cusolver" or (
        backend == "default" and m == n and (batch == 1 or m <= 16 or (m <= 128 and batch <= 16))
    )
    if not cusolver_side:
        # `lu_factor_batched_magma`: pointer arrays in pinned host memory, MAGMA's own device
        # scratch by cudaMalloc outside the caching allocator; its queue takes the current cuBLAS
        # handle (blind117/dm04's H200 record of 2,048 x 24 x 24: nothing else counted)
        cap.blas("magma_getrf_batched", lu.dtype)
    elif m != n or batch == 1 or m >= 512:
        nbytes = GETRF_WORKSPACE.get((m, n, lu.dtype))
        if nbytes is None:
            cap.note_unmeasured(f"{op}'s cuSOLVER getrf workspace ({m} x {n}, {lu.dtype})")
        else:
            for _ in range(batch):
                work = cap.malloc(nbytes, op, "temporary")
                del work
    else:
        pointers = cap.malloc(8 * batch, op, "temporary")
        cap.blas("getrfBatched", lu.dtype)
        del pointers
    if not pivot:
        trivial = cap.malloc(4 * min(m, n), op, "temporary")
        del trivial


def _linalg_lu_factor_ex(cap, func, args, kwargs):
    """`linalg_lu_factor_ex` on CUDA: LU (F-contiguous), pivots and info (its meta function's
    order), `LU.copy_(A)`, `lu_factor`, then `_linalg_check_errors` where asked."""
    a = args[0]
    if not registered(a):
        return NotImplemented
    p = dict(zip(("A", "pivot", "check_errors"), args, strict=False)) | kwargs
    cap.ops += 1
    op = "aten::linalg_lu_factor_ex"
    lu, pivots, info = func(*args, **kwargs)
    for t in (lu, pivots, info):
        cap.track(t, op)
    if a.numel() == 0:
        return lu, pivots, info
    lu_factor(cap, lu, p.get("pivot", True), op)
    if p.get("check_errors", False):
        check_errors(cap, info, op)
    return lu, pivots, info


DISPATCH[aten.linalg_lu_factor_ex.default] = _linalg_lu_factor_ex


#: `sytrf_bufferSize`'s lwork in bytes by (n, dtype) for one matrix (`apply_ldl_factor_cusolver`),
#: rounded to the allocator's 512: the H100's (session 64, probes/pt63_ldl_and_bsr_mm_scratch_probe.py:
#: peak less the outputs, the same at batch 1, 8 and 512 and for a 2-D input)
SYTRF_WORKSPACE: dict = {
    (64, torch.float32): 98_816,
    (320, torch.float32): 98_816,
    (1024, torch.float32): 262_656,
    (64, torch.float64): 107_008,
    (320, torch.float64): 164_352,
    (1024, torch.float64): 524_800,
}


def _linalg_ldl_factor_ex(cap, func, args, kwargs):
    """`linalg_ldl_factor_ex` on CUDA (BatchLinearAlgebra.cpp): LD (batches of F-contiguous
    matrices), the int32 pivots and infos (its meta function's order); `tril_out` of A into LD
    (no allocation); real inputs take cuSOLVER (`ldl_factor_kernel`'s default;
    `apply_ldl_factor_cusolver`, cuda/linalg/BatchLinearAlgebraLib.cpp): one sytrf workspace of
    `sytrf_bufferSize` for one matrix, allocated before the loop over the batch and freed after it
    (`SYTRF_WORKSPACE`, else named unmeasured); then `_linalg_check_errors` where asked."""
    a = args[0]
    if not registered(a) or a.dim() < 2 or a.is_complex():
        return NotImplemented
    p = dict(zip(("self", "hermitian", "check_errors"), args, strict=False)) | kwargs
    cap.ops += 1
    op = "aten::linalg_ldl_factor_ex"
    ld, pivots, info = func(*args, **kwargs)
    for t in (ld, pivots, info):
        cap.track(t, op)
    if a.numel() == 0:
        return ld, pivots, info
    n = a.size(-1)
    nbytes = SYTRF_WORKSPACE.get((n, a.dtype))
    if nbytes is None:
        cap.note_unmeasured(f"{op}'s cuSOLVER sytrf workspace ({n} x {n}, {a.dtype})")
    elif nbytes:
        work = cap.malloc(nbytes, op, "workspace")
        del work
    if p.get("check_errors", False):
        check_errors(cap, info, op)
    return ld, pivots, info


DISPATCH[aten.linalg_ldl_factor_ex.default] = _linalg_ldl_factor_ex


def _linalg_ldl_solve(cap, func, args, kwargs):
    """`linalg_ldl_solve` on CUDA (`TORCH_IMPL_FUNC(linalg_ldl_solve_out)`, BatchLinearAlgebra.cpp):
    the result (B's shape, F-contiguous batches), LD cloned column-major unless it already is
    (`borrow_else_clone`), `result.copy_(B)`; `apply_ldl_solve_cusolver`
    (cuda/linalg/BatchLinearAlgebraLib.cpp): the pivots copied to int64 (`pivots.to(kLong)`),
    cusolverDnXsytrs's device workspace (none: LAPACK's ?sytrs takes no work array, and the H100
    allocated none for n 64, 320 and 1024, float32 and float64, batch 1, 8 and 512 -- session 64,
    probes/pt63_ldl_and_bsr_mm_scratch_probe.py) and a one-element int32 `zeros` for the info; at
    the return the info, the int64 pivots, then LD's clone die."""
    ld, pivots, b = args[0], args[1], args[2]
    if not (registered(ld) and registered(pivots) and registered(b)) or ld.dim() < 2 or ld.is_complex():
        return NotImplemented
    cap.ops += 1
    op = "aten::linalg_ldl_solve"
    out = func(*args, **kwargs)
    cap.track(out, op)
    if ld.numel() == 0 or pivots.numel() == 0:
        return out
    ld_clone = None
    if not ld.mT.is_contiguous():
        ld_clone = cap.malloc(ld.numel() * ld.element_size(), op, "temporary")
    long_pivots = cap.malloc(pivots.numel() * 8, op, "temporary")
    info = cap.malloc(4, op, "temporary")
    del info, long_pivots, ld_clone
    return out


DISPATCH[aten.linalg_ldl_solve.default] = _linalg_ldl_solve


def _reduce_last(cap, batch: int, n: int, elem: int, op: str) -> None:
    """A reduction over the last dimension of a contiguous [batch, n] tensor: its scratch."""
    reduce_scratch(cap, [batch, n], None, [False, True], elem, elem, op)


def _lu_det_p(cap, batch: int, n: int, op: str):
    """`lu_det_P(pivots)` (BatchLinearAlgebra.cpp): an int32 `arange(1, n + 1)`, the bool `!=`, the
    int64 sum (returned, alive) and the bool input's int64 copy it reduces (`make_reduction`),
    freed by the iterator, then the `!=` and the `arange` (blind48/av01's H200 history)."""
    steps = cap.malloc(4 * n, op, "temporary")
    moved = cap.malloc(batch * n, op, "temporary")
    det_p = cap.malloc(8 * batch, op, "temporary")
    as_long = cap.malloc(8 * batch * n, op, "temporary")
    _reduce_last(cap, batch, n, 8, op)
    del as_long, moved, steps
    return det_p


def _linalg_det(cap, func, args, kwargs):
    """`_linalg_det` on CUDA (`TORCH_IMPL_FUNC(_linalg_det_out)`, BatchLinearAlgebra.cpp): det, LU
    (F-contiguous) and pivots (its meta function's order); the int32 info; `lu_factor`; then
    `mul_out(det, lu_det_P(pivots), prod(diag(LU)))` with its arguments evaluated last first, as
    slogdet's `mul_out` runs on the H200: the `prod` (reducing the strided diagonal), then
    `lu_det_P`; both die after the product, the info last."""
    a = args[0]
    if not registered(a) or kwargs or a.dim() < 2:
        return NotImplemented
    cap.ops += 1
    op = "aten::_linalg_det"
    det, lu, pivots = func(*args)
    for t in (det, lu, pivots):
        cap.track(t, op)
    if a.numel() == 0:
        return det, lu, pivots
    batch, n = _batch(a), a.size(-1)
    size = a.element_size()
    info = cap.malloc(4 * batch, op, "temporary")
    lu_factor(cap, lu, True, op)
    prod = cap.malloc(size * batch, op, "temporary")
    reduce_scratch(cap, [batch, n], [n * n, n + 1], [False, True], size, size, op)
    det_p = _lu_det_p(cap, batch, n, op)
    del det_p, prod, info
    return det, lu, pivots


DISPATCH[aten._linalg_det.default] = _linalg_det


def _linalg_slogdet(cap, func, args, kwargs):
    """`_linalg_slogdet` on CUDA (`TORCH_IMPL_FUNC(_linalg_slogdet_out)`, BatchLinearAlgebra.cpp):
    sign, logabsdet, LU (F-contiguous) and pivots (its meta function's order); the int32 info
    `linalg_lu_factor_ex_out` resizes; `lu_factor`; `lu_det_P(pivots)` (the `mul_out`'s last
    argument, evaluated first); `diag_U.sgn()` and its `prod`, freed after `mul_out` with the sign
    of P;
    `diag_U.abs()` (logged in place) summed into logabsdet; the info dies last. The H200's history
    (blind48/av01): 13 allocations per call of 12, 48 and 192 rows."""
    a = args[0]
    if not registered(a) or kwargs or a.dim() < 2:
        return NotImplemented
    cap.ops += 1
    op = "aten::_linalg_slogdet"
    sign, logabsdet, lu, pivots = func(*args)
    for t in (sign, logabsdet, lu, pivots):
        cap.track(t, op)
    if a.numel() == 0:
        return sign, logabsdet, lu, pivots
    batch, n = _batch(a), a.size(-1)
    size, real = a.element_size(), logabsdet.element_size()
    info = cap.malloc(4 * batch, op, "temporary")
    lu_factor(cap, lu, True, op)
    det_p = _lu_det_p(cap, batch, n, op)
    # sign = sgn(diag(U)).prod(-1) * det(P)
    sgn = cap.malloc(size * batch * n, op, "temporary")
    prod = cap.malloc(size * batch, op, "temporary")
    _reduce_last(cap, batch, n, size, op)
    del prod, sgn, det_p
    # logabsdet = diag(U).abs().log_().sum(-1)
    absolute = cap.malloc(real * batch * n, op, "temporary")
    _reduce_last(cap, batch, n, real, op)
    del absolute, info
    return sign, logabsdet, lu, pivots


DISPATCH[aten._linalg_slogdet.default] = _linalg_slogdet


def _lu_solve_kernel(cap, lu, b, n: int, k: int, transpose: bool, op: str) -> None:
    """`lu_solve_kernel` (cuda/linalg/BatchLinearAlgebra.cpp) on the result B of `batch` systems,
    the default backend's heuristic: a square B of at most 16 rows, or (B not square) LU of at most
    8 rows or few columns, takes `lu_solve_batched_cublas` (`get_device_pointers` of LU and of B,
    8 bytes a matrix each, and the handle); larger ones `lu_solve_triangular`: `maybe_expand_lu` /
    `maybe_expand_pivots` (copies where LU is not batched as B is), the int64 permutation
    (`arange(n)` made contiguous over the batch), then without transposition the inverse
    permutation (an `arange` and a `scatter`) and P^T B (a `scatter` of B) before two trsm, with it
    two trsm and `B.clone()` for the final `scatter_`; looped cuSOLVER getrs (few systems of up to
    128 rows) only its int32 info (`at::zeros({1})`); MAGMA is named unmeasured. The H200's
    history (blind48/av01, adjoint): 12 rows batched cuBLAS; 48 and 192 rows the triangular solves
    (their `trsm`)."""
    batch = _batch(b)
    size = b.element_size()
    expand = batch != _batch(lu)
    if n == k:
        route = "cublas" if n <= 16 else "triangular"
    elif n <= 8:
        magma = not transpose and 256 <= k <= 1024
        route = "magma" if magma else "cublas"
    elif n <= 64:
        looped = batch <= 2 and (k <= 64 or transpose or n <= 32)
        route = "cusolver" if looped else "cublas" if k <= 8 else "triangular"
    elif n <= 128:
        route = "cusolver" if batch <= 2 and k <= 2 else "cublas" if k <= 2 else "triangular"
    else:
        route = "triangular"
    if route == "magma":
        cap.note_unmeasured(f"{op} of {batch} x {n} x {k} by MAGMA")
        return
    if route == "cusolver":
        # `lu_solve_looped_cusolver` (BatchLinearAlgebraLib.cpp): getrs needs no workspace
        info = cap.malloc(4, op, "temporary")
        del info
        return
    lu_copy = cap.malloc(size * batch * n * n, op, "temporary") if expand else None
    pivots_copy = cap.malloc(4 * batch * n, op, "temporary") if expand else None
    if route == "cublas":
        lu_pointers = cap.malloc(8 * batch, op, "temporary")
        b_pointers = cap.malloc(8 * batch, op, "temporary")
        cap.blas("getrsBatched", b.dtype)
        del b_pointers, lu_pointers, pivots_copy, lu_copy
        return
    steps = cap.malloc(8 * n, op, "temporary") if batch > 1 else None
    perm = cap.malloc(8 * batch * n, op, "temporary")
    del steps
    if not transpose:
        ids = cap.malloc(8 * n, op, "temporary")
        inverse = cap.malloc(8 * batch * n, op, "temporary")
        permuted = cap.malloc(size * b.numel(), op, "temporary")
        trsm(cap, batch, n, b.dtype, op)
        trsm(cap, batch, n, b.dtype, op)
        del permuted, inverse, ids
    else:
        trsm(cap, batch, n, b.dtype, op)
        trsm(cap, batch, n, b.dtype, op)
        clone = cap.malloc(size * b.numel(), op, "temporary")
        del clone
    del perm, pivots_copy, lu_copy


def lu_solve_out(cap, lu, pivots, result, left: bool, adjoint: bool, op: str) -> None:
    """`TORCH_IMPL_FUNC(linalg_lu_solve_out)` (BatchLinearAlgebra.cpp) past its meta function: B
    copied into the result, pivots made contiguous and LU F-contiguous where they are not (copies),
    then `lu_solve_kernel` on the result (`left=False` solves the adjoint system of B^H). Another
    backend preference is named unmeasured."""
    if result.numel() == 0:
        return
    if not left:
        adjoint = not adjoint
    pivots_copy = None if pivots.is_contiguous() else cap.malloc(4 * pivots.numel(), op, "temporary")
    f_contiguous = lu.mT.is_contiguous()
    lu_copy = None if f_contiguous else cap.malloc(lu.numel() * lu.element_size(), op, "temporary")
    if _backend() != "default":
        cap.note_unmeasured(f"{op} under the {_backend()} preference (preferred_linalg_library)")
    else:
        b = result if left else result.mT
        _lu_solve_kernel(cap, lu, b, lu.size(-2), b.size(-1), adjoint, op)
    del lu_copy, pivots_copy


def _linalg_lu_solve(cap, func, args, kwargs):
    """`linalg_lu_solve` on CUDA: the result (B broadcast, column-major), then `lu_solve_out`."""
    lu, pivots, b = args[0], args[1], args[2]
    if not registered(lu) or lu.dim() < 2 or b.dim() < 2:
        return NotImplemented
    p = dict(zip(("LU", "pivots", "B", "left", "adjoint"), args, strict=False)) | kwargs
    cap.ops += 1
    op = "aten::linalg_lu_solve"
    out = func(*args, **kwargs)
    cap.track(out, op)
    lu_solve_out(cap, lu, pivots, out, p.get("left", True), p.get("adjoint", False), op)
    return out


def _matrix_strides(sizes, column_major: bool) -> tuple:
    """`batched_matrix_contiguous_strides` (LinearAlgebraUtils.h): C-contiguous batches of
    F-contiguous matrices where asked."""
    strides = [1] * len(sizes)
    step = 1
    for i in reversed(range(len(sizes))):
        strides[i] = step
        step *= max(sizes[i], 1)
    if column_major and len(sizes) >= 2:
        strides[-1], strides[-2] = max(sizes[-2], 1), 1
    return tuple(strides)


def _linalg_solve_ex(cap, func, args, kwargs):
    """`_linalg_solve_ex` on CUDA (`TORCH_IMPL_FUNC(_linalg_solve_ex_out)`, BatchLinearAlgebra.cpp):
    result, LU, pivots and info (its meta function's order); `linalg_lu_factor_ex_out` of A;
    `_linalg_check_errors`
    where asked; `linalg_lu_solve_out` into the result (unsqueezed for a vector B), whose meta
    function takes a proxy where the result's strides are not the column-major ones it sets
    (`set_output_strided`; a vector B's result), copied back and freed after the solve."""
    a, b = args[0], args[1]
    if not registered(a) or a.dim() < 2:
        return NotImplemented
    p = dict(zip(("A", "B", "left", "check_errors"), args, strict=False)) | kwargs
    left = p.get("left", True)
    cap.ops += 1
    op = "aten::_linalg_solve_ex"
    result, lu, pivots, info = func(*args, **kwargs)
    for t in (result, lu, pivots, info):
        cap.track(t, op)
    if a.numel() > 0:
        lu_factor(cap, lu, True, op)
    if p.get("check_errors", False):
        check_errors(cap, info, op)
    vector = b.dim() == 1 or (a.dim() - 1 == b.dim() and tuple(b.shape) == tuple(a.shape[:-1]))
    result_ = result.unsqueeze(-1) if vector else result
    if result_.numel() == 0:
        return result, lu, pivots, info
    wanted = _matrix_strides(list(result_.shape), left)
    proxy = None
    if tuple(result_.stride()) != wanted:
        proxy = cap.malloc(result_.numel() * result_.element_size(), op, "temporary")
    # the source factors a contiguous real A as A^T and solves the adjoint system (`use_A_T`), but
    # the H200's lu_solve allocates the non-adjoint route's inverse permutation and P^T B for it
    # (fixtures/run/README.md, blind117: six per-op records of solve_ex and inv_ex, one to 2048
    # matrices, every allocation's count and bytes); the twin follows the measurement
    lu_solve_out(cap, lu, pivots, result_, left, False, op)
    del proxy
    return result, lu, pivots, info


DISPATCH[aten._linalg_solve_ex.default] = _linalg_solve_ex


def _linalg_inv_ex(cap, func, args, kwargs):
    """`linalg_inv_ex` on CUDA (`TORCH_IMPL_FUNC(linalg_inv_ex_out)`, BatchLinearAlgebra.cpp): the
    result (F-contiguous) and info, the identity written into the result, then
    `linalg_solve_ex_out(result, info, A, result)`: LU and pivots (`new_empty({0})` resized by
    `_linalg_solve_ex`'s meta function), `lu_factor`, `lu_solve_out` in place on the result
    (no copy, no proxy), LU and pivots freed; `_linalg_check_errors` where asked."""
    a = args[0]
    if not registered(a) or a.dim() < 2:
        return NotImplemented
    p = dict(zip(("A", "check_errors"), args, strict=False)) | kwargs
    cap.ops += 1
    op = "aten::linalg_inv_ex"
    result, info = func(*args, **kwargs)
    cap.track(result, op)
    cap.track(info, op)
    if a.numel() > 0:
        lu = cap.malloc(a.numel() * a.element_size(), op, "temporary")
        pivots = cap.malloc(4 * _batch(a) * a.size(-1), op, "temporary")
        lu_f = torch.empty_strided(
            a.shape, _matrix_strides(list(a.shape), True), dtype=a.dtype, device="meta"
        )
        lu_factor(cap, lu_f, True, op)
        pivots_t = torch.empty(a.shape[:-1], dtype=torch.int32, device="meta")
        # non-adjoint, as the H200 measured `_linalg_solve_ex` (there)
        lu_solve_out(cap, lu_f, pivots_t, result, True, False, op)
        del pivots, lu
    if p.get("check_errors", False):
        check_errors(cap, info, op)
    return result, info


DISPATCH[aten.linalg_inv_ex.default] = _linalg_inv_ex
DISPATCH[aten.linalg_lu_solve.default] = _linalg_lu_solve
for _name in (
    "aten::_linalg_det",
    "aten::_linalg_solve_ex",
    "aten::linalg_inv_ex",
    "aten::_linalg_slogdet",
    "aten::linalg_lu_factor_ex",
    "aten::linalg_lu_solve",
):
    SCRATCH_UNMODELLED.discard(_name)


# ---- linalg_matrix_exp ----------------------------------------------------------------

# `mexp`'s thetas (LinearAlgebra.cpp): the largest 1-norm each Taylor degree 1, 2, 4, 8, 12, 18
# approximates to the dtype's precision
_THETAS_FLOAT = (
    1.192092800768788e-07,
    5.978858893805233e-04,
    5.116619363445086e-02,
    5.800524627688768e-01,
    1.461661507209034e00,
    3.010066362817634e00,
)
_THETAS_DOUBLE = (
    2.220446049250313e-16,
    2.580956802971767e-08,
    3.397168839976962e-04,
    4.991228871115323e-02,
    2.996158913811580e-01,
    1.090863719290036e00,
)


class _Mexp:
    """`mexp` op by op on simulated tensors (run inside the capture's dispatch mode). Constants
    are only carried as their sizes: the coefficient blobs' values do not change memory."""

    def __init__(self, cap, a):
        self.cap = cap
        self.dev = a.device  # meta, inside the kernels
        self.real = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(a.dtype, a.dtype)

    def to_device(self, host: torch.Tensor) -> torch.Tensor:
        """`_move_memory_if_cuda_input`: a host tensor copied to the device."""
        return aten._to_copy.default(host, device=self.dev)

    def blob(self, k: int, rows: int = 1) -> torch.Tensor:
        """`_blob_to_Tensor` / `from_blob(b)` moved to the device: k coefficients (per row)."""
        return self.to_device(torch.zeros(rows, k, dtype=self.real))

    @staticmethod
    def combination(t, coefficients):
        """`_compute_linear_combination(t, coefficients)`: its output, `at::zeros` of
        [coefficients.size(0), *t.shape[1:]], is all it allocates (LinearAlgebra.cpp)."""
        return t.new_zeros((coefficients.size(0), *t.shape[1:]))

    def lincomb(self, t, k: int):
        """`_linear_combination`: `_compute_linear_combination(t, blob).squeeze(0)`; the blob dies
        at the end of its statement."""
        b = self.blob(k)
        out = self.combination(t, b).squeeze(0)
        del b
        return out

    @staticmethod
    def matmul_into(out, x, y) -> None:
        """`_matmul_impl(out, x, y)` of 3-D operands: `bmm_out` into the view."""
        aten.bmm.out(x, y, out=out)

    def buffer(self, a, n_copies: int):
        """`_allocate_buffer`: [n_copies, *a.shape] contiguous, uninitialized."""
        return a.new_empty((n_copies, *a.shape))

    def fill_powers(self, buf, a, k: int) -> None:
        """`_fill_matrix_powers`: I (from `diag_embed(ones({1}).expand(...))`), A, A^2, A^3, A^6."""
        ones = buf.new_ones((1,))
        eye = torch.diag_embed(ones.expand(a.shape[:-1]))
        buf.select(0, 0).copy_(eye)
        del eye, ones
        buf.select(0, 1).copy_(a)
        if k > 2:
            self.matmul_into(buf.select(0, 2), buf.select(0, 1), buf.select(0, 1))
        if k > 3:
            self.matmul_into(buf.select(0, 3), buf.select(0, 1), buf.select(0, 2))
        if k > 4:
            self.matmul_into(buf.select(0, 4), buf.select(0, 3), buf.select(0, 3))

    def t1(self, a):
        As = self.buffer(a, 2)
        self.fill_powers(As, a, 2)
        return As.sum(0)

    def t2(self, a):
        As = self.buffer(a, 3)
        self.fill_powers(As, a, 3)
        As.select(0, 2).div_(2.0)
        return As.sum(0)

    def t4(self, a):
        As = self.buffer(a, 4)
        self.fill_powers(As, a, 3)
        right = self.lincomb(As.narrow(0, 0, 3), 3)
        self.matmul_into(As.select(0, 3), As.select(0, 2), right)
        del right
        return self.lincomb(As, 4)

    def t8(self, a):
        As = self.buffer(a, 5)
        self.fill_powers(As, a, 3)
        right = self.lincomb(As.narrow(0, 1, 2), 2)
        self.matmul_into(As.select(0, 3), As.select(0, 2), right)
        del right
        # the arguments of the A8 product are evaluated right to left (the H200's history: the
        # four-coefficient combination first) and die in the reverse order
        right = self.lincomb(As.narrow(0, 0, 4), 4)
        left = self.lincomb(As.narrow(0, 2, 2), 2)
        self.matmul_into(As.select(0, 4), left, right)
        del left, right
        return self.lincomb(As, 5)

    def t12_t18(self, a, num_prods: int):
        """`compute_T12` / `compute_T18`: coefficients `bs`, the powers, `Bs`, two products into
        `As.select(0, 0)`; the result is a view of `Bs`; As, then bs, die at the return."""
        bs = self.blob(num_prods, num_prods)
        As = self.buffer(a, num_prods)
        self.fill_powers(As, a, num_prods)
        Bs = self.combination(As, bs)
        view_out = As.select(0, 0)
        if num_prods == 4:
            self.matmul_into(view_out, Bs.select(0, 3), Bs.select(0, 3))
            Bs.select(0, 2).add_(view_out)
            self.matmul_into(view_out, Bs.select(0, 1).add_(Bs.select(0, 2)), Bs.select(0, 2))
            out = Bs.select(0, 0).add_(view_out)
        else:
            self.matmul_into(view_out, Bs.select(0, 0), Bs.select(0, 4))
            Bs.select(0, 3).add_(view_out)
            self.matmul_into(view_out, Bs.select(0, 2).add_(Bs.select(0, 3)), Bs.select(0, 3))
            out = Bs.select(0, 1).add_(view_out)
        del view_out, Bs, As, bs
        return out

    def t12(self, a):
        return self.t12_t18(a, 4)

    def scale_square(self, a, norm, theta: float):
        """`compute_T18_scale_square`: s = ceil(log2(norm / theta)).clamp(0), `a * 2^-s`, T18, then
        sort, `unique_consecutive`, `cumsum` and `diff` of s decide the squarings, read on the host;
        one `empty_like` per squaring; `cat` of the pieces and `index_select` by `argsort`."""
        d = norm / theta
        lg = torch.log2(d)
        c = torch.ceil(lg)
        s = c.clamp(min=0)
        del c, lg, d
        neg = -s
        pow2s = torch.pow(2, neg)
        del neg
        a_scaled = a * pow2s.view(-1, 1, 1)
        mexp_scaled = self.t12_t18(a_scaled, 5)
        sorted_s, sorted_s_inds = torch.sort(s, dim=0)
        sorted_s = sorted_s.to(torch.int64)
        split_counts = torch.unique_consecutive(sorted_s, return_inverse=True, return_counts=True)[2]
        csum = torch.cumsum(split_counts, dim=0)
        split_edges = csum - 1
        del csum
        picked = sorted_s.index_select(0, split_edges)
        unique_s = picked.clamp(min=0)
        del picked
        # `at::diff(unique_s, 1, -1, prepend)`: `cat(prepend, self)`, then `diff_helper`'s
        # `narrow(1, n - 1) - narrow(0, n - 1)`
        zeros = unique_s.new_zeros((1,))
        joined = torch.cat([zeros, unique_s], 0)
        k = joined.size(0) - 1
        mul_times = joined.narrow(0, 1, k) - joined.narrow(0, 0, k)
        del joined, zeros
        both = torch.cat([split_counts, mul_times], 0)
        known = value(both)
        # the host copy of the sections (`to(kCPU)`); one squaring of all where unknown
        section = known.tolist() if known is not None else [a.size(0), 1]
        del both
        half = len(section) // 2
        scs, pts = section[:half], section[half:]
        pieces = []
        acc = mexp_scaled.index_select(0, sorted_s_inds)
        for i in range(half):
            for _ in range(int(pts[i])):
                acc_out = torch.empty_like(acc)
                self.matmul_into(acc_out, acc, acc)
                acc = acc_out
                del acc_out
            pieces.append(acc.narrow(0, 0, int(scs[i])))
            acc = acc.narrow(0, int(scs[i]), acc.size(0) - int(scs[i]))
        output = torch.cat(pieces, 0)
        # `at::argsort`: the indices of `at::sort`, its values dropped
        dropped, order = torch.sort(sorted_s_inds, dim=-1)
        del dropped
        result = output.index_select(0, order)
        del order, output, acc, pieces, mul_times, unique_s, split_edges, split_counts
        del sorted_s, sorted_s_inds, mexp_scaled, a_scaled, pow2s, s
        return result


def _assume_norm(cap, norm, thetas) -> None:
    """The 1-norm decides the degree on the host (`norm.to(kCPU)`). Where the twin does not carry
    the matrix's values (or computed them over zeros standing in for unknown ones) it takes twice
    degree 18's theta: the scaled and squared degree 18 with one squaring, the path that holds the
    most at once (each further squaring frees what it replaces), so the memory is an upper bound;
    with a warning naming the line."""
    site = cap_site()
    cap.warn_once(
        "matrix_exp:" + site,
        f"{site}: torch.linalg.matrix_exp chooses its Taylor degree by the matrix's norm, which the "
        "twin does not compute: it takes the scaled and squared degree 18 with one squaring "
        "(the path holding the most memory; an upper bound)",
    )
    set_value(norm, torch.full(norm.shape, 2 * thetas[5], dtype=norm.dtype), assumed=True)


def cap_site() -> str:
    from ._capture import _user_site

    return _user_site()


def _linalg_matrix_exp(cap, func, args, kwargs):
    """`linalg_matrix_exp` of n >= 2 on CUDA: `mexp` as LinearAlgebra.cpp runs it, op by op through
    the capture (each op with its own rules): the 1-norm (`abs().sum(-2).max(-1)`), the NaN-filled
    result, per norm interval the index moved to the device, `index_select`, the degree's Taylor
    polynomial and `index_put_`; a batch takes the scaled and squared degree 18 for all. blind21/u04's
    H200 history: degrees 1, 4 and 8 (512 x 512) and 8 and 18 with one to five squarings (the
    backward's 1024 x 1024 block matrix), 11 to 56 allocations each."""
    a = args[0]
    if not registered(a) or kwargs or a.dim() < 2 or a.size(-1) < 2 or a.numel() == 0:
        return NotImplemented
    n = a.size(-1)
    thetas = _THETAS_FLOAT if a.dtype in (torch.float32, torch.complex64) else _THETAS_DOUBLE
    _IN_MEXP[0] += 1
    try:
        with cap._modes[1]:
            return _mexp(cap, a, n, thetas)
    finally:
        _IN_MEXP[0] -= 1


#: inside `_linalg_matrix_exp` (its own `cat`s are plain ones)
_IN_MEXP = [0]


def _mexp(cap, a, n: int, thetas):
    """`mexp` (see `_linalg_matrix_exp`), inside the capture's dispatch mode."""
    a3 = a.reshape(-1, n, n)
    m = _Mexp(cap, a3)
    absa = a3.abs()
    colsum = absa.sum(-2)
    norm, ind = colsum.max(-1)
    del ind, colsum, absa
    if value(norm) is None or assumed(norm):
        _assume_norm(cap, norm, thetas)
    if a3.size(0) > 1:
        res = m.scale_square(a3, norm, thetas[5])
        del norm
        return res.view(a.shape)
    res = torch.full_like(a3, math.nan, memory_format=torch.contiguous_format)
    nv = float(cap.value_of(norm, "torch.linalg.matrix_exp's norm").reshape(-1)[0])
    steps = (m.t1, m.t2, m.t4, m.t8, m.t12)
    for i, step in enumerate(steps):
        lower = -1.0 if i == 0 else thetas[i - 1]
        if lower < nv <= thetas[i]:
            idx = m.to_device(torch.zeros(1, dtype=torch.int64))
            sub_a = torch.index_select(a3, 0, idx)
            t = step(sub_a)
            res.index_put_((idx,), t)
            del t, sub_a, idx
    if nv >= thetas[4]:
        idx = m.to_device(torch.zeros(1, dtype=torch.int64))
        a_large = torch.index_select(a3, 0, idx)
        large_norm = torch.index_select(norm, 0, idx)
        out = m.scale_square(a_large, large_norm, thetas[5])
        moved = m.to_device(torch.zeros(1, dtype=torch.int64))  # the host index, moved by index_put_
        res.index_put_((moved,), out)
        del moved, out, large_norm, a_large, idx
    del norm
    return res.view(a.shape)


DISPATCH[aten.linalg_matrix_exp.default] = _linalg_matrix_exp


def _matrix_exp_meta_grad(cap, func, args, kwargs):
    """`differential_analytic_matrix_function` (FunctionsManual.cpp), the backward of
    `linalg_matrix_exp`: on CUDA tensors `meta_grad = at::zeros(2n x 2n)` and three copies into its
    blocks; the twin's tensors count as subclass-like there and take `cat({cat({A, grad}, -1),
    cat({zeros_like(A), A}, -1)}, -2)`. Inside that node the inner `cat`s and `zeros_like` allocate
    nothing and the outer `cat` is the zeros (blind21/u04's H200 history: one 4 MiB block per call)."""
    node = torch._C._current_autograd_node()
    if node is None or node.name() != "LinalgMatrixExpBackward0" or torch.is_grad_enabled() or _IN_MEXP[0]:
        return NotImplemented
    if not any(registered(t) for t in tensors_in((args, kwargs))) and func is not aten.cat.default:
        return NotImplemented
    out = func(*args, **kwargs)
    if func is aten.cat.default:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        if dim % out.dim() == out.dim() - 2:
            cap.ops += 1
            cap.track(out, "aten::zeros")
    return out


for _f in (aten.cat.default, aten.zeros_like.default):
    _previous = DISPATCH.get(_f)
    assert _previous is None, f"{_f} has a rule already"
    DISPATCH[_f] = _matrix_exp_meta_grad


def _eigh_backward_diagonal(cap, func, args, kwargs):
    """`linalg_eig_backward` (FunctionsManual.cpp) writes gL onto the diagonal of its temporary
    `ret` with `ret.diagonal(0, -2, -1).copy_(gL)` on CUDA tensors; `diagonal_scatter` (a new
    matrix) is its subclass-like path, which the twin's tensors would take (blind21/u04's H200
    history: no allocation there)."""
    node = torch._C._current_autograd_node()
    if (
        torch.is_grad_enabled()
        or node is None
        or node.name() not in ("LinalgEighBackward0", "LinalgEigBackward0")
    ):
        return NotImplemented
    a, src = args[0], args[1]
    if not registered(a) or kwargs or tuple(args[2:]) != (0, -2, -1):
        return NotImplemented
    cap.ops += 1
    a.diagonal(0, -2, -1).copy_(src)
    return a


DISPATCH[aten.diagonal_scatter.default] = _eigh_backward_diagonal


def _add_sweep() -> None:
    """Adds `cusolver_h200.json` (`validation/run/cusolver_sweep.py`'s table: geqrf, orgqr, syevj,
    syevd and getrf of one matrix over square, tall and wide sizes, float32 and float64, measured
    on an H200) to the tables above; where both hold a size they agree (`test_linalg.py`)."""
    with open(os.path.join(os.path.dirname(__file__), "cusolver_h200.json")) as f:
        data = json.load(f)
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    for m, n, dtype, nbytes in data["geqrf"]:
        GEQRF_WORKSPACE.setdefault((m, n, dtypes[dtype]), nbytes)
    for m, n, k, dtype, nbytes in data["orgqr"]:
        ORGQR_WORKSPACE.setdefault((m, n, k, dtypes[dtype]), nbytes)
    for routine in ("syevj", "syevd"):
        for n, dtype, nbytes in data[routine]:
            WORKSPACE.setdefault((routine, n, dtypes[dtype]), nbytes)
    for m, n, dtype, nbytes in data["getrf"]:
        GETRF_WORKSPACE.setdefault((m, n, dtypes[dtype]), nbytes)


_add_sweep()
