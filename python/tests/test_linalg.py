"""torch.linalg under the capture: what each CUDA kernel allocates, against blind21/u04's H200 per-op
truth (fixtures/run/truth_blind21_h200.tar.xz: allocations and requested bytes per op)."""

import json
import lzma
import re

import pytest
import torch
import vramscope
from conftest import FIXTURES, ROOT, counted, probe_events
from vramscope import _gesvdj, _linalg
from vramscope._tensor import set_value

F = _linalg._THETAS_FLOAT[5]


@pytest.fixture
def norms(monkeypatch):
    """Norms handed to `linalg_matrix_exp` in place of the values the twin does not carry."""
    given = []

    def take(cap, norm, thetas):
        set_value(norm, torch.full(norm.shape, given.pop(0), dtype=norm.dtype), assumed=True)

    monkeypatch.setattr(_linalg, "_assume_norm", take)
    return given


def test_eigh_cholesky_and_their_checks_allocate_what_the_h200counted():
    with vramscope.capture(gpu="h200"):
        a = torch.empty(512, 512, device="cuda")
        # vectors, values, infos, syevj's workspace, check_errors' any() and its bool copy
        (_values, vectors), counts = counted(lambda: torch.linalg.eigh(a))
        assert vectors.shape == (512, 512) and counts == (6, 2175046)
        assert torch.cuda.memory_allocated() == 1048576 + 1048576 + 2048
        # L, info, potrf's workspace; then `_linalg_check_errors` of the info
        (_L, info), counts = counted(lambda: torch.linalg.cholesky_ex(a))
        assert counts == (3, 1049732)
        _, counts = counted(lambda: torch._linalg_check_errors(info, "linalg.cholesky", is_matrix=True))
        assert counts == (2, 2)
        # a size without a measured workspace: outputs, infos and checks only, named unmeasured
        b = torch.empty(101, 101, device="cuda")
        _, counts = counted(lambda: torch.linalg.eigh(b))
        assert counts == (5, 40804 + 404 + 4 + 2)


def test_eigvalsh_and_lu_of_256_rows_allocate_what_the_h200_counted():
    # blind101/cw02's H200 memory history: eigvalsh of 256 x 256 float32 (values, the vectors'
    # work copy, the info, syevj's 301,088-byte workspace, check_errors' any() and its bool copy),
    # then the LU, pivots and info of its solve with getrf's 4,352-byte workspace
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(256, 256, device="cuda")
        _, counts = counted(lambda: torch.linalg.eigvalsh(a))
        assert counts == (6, 1024 + 262144 + 4 + 301088 + 1 + 1)
        _, counts = counted(lambda: torch.linalg.lu_factor_ex(a))
        assert counts == (4, 262144 + 1024 + 4 + 4352)
    assert not cap.unmeasured


def test_geqrf_makes_a_column_major_qr_and_tau_then_linalg_qr_s_workspace():
    # BatchLinearAlgebra.cpp `geqrf_out_helper`: QR resized as input.mT() and transposed (batched
    # column-major), tau (*batch, min(m, n)), then `geqrf_stub` as linalg_qr's (blind281 probing:
    # no meta kernel, it was sized by a CPU run and named unmeasured)
    with vramscope.capture(gpu="h100") as cap:
        a = torch.randn(1024, 1024, device="cuda")
        (qr, tau), counts = counted(lambda: torch.geqrf(a))
        assert qr.stride() == (1, 1024) and tau.shape == (1024,)
        # QR, tau, cuSOLVER's info, the measured geqrf workspace
        assert counts == (4, 4194304 + 4096 + 4 + 6291584)
        b = torch.randn(64, 32, 16, device="cuda")
        qr, tau = torch.geqrf(b)
        assert qr.stride() == (512, 1, 32) and tau.shape == (64, 16)
    assert not cap.unmeasured, cap.unmeasured


def test_householder_product_allocates_what_the_h200_counted():
    # blind60/bh05's per-op truth: parametrizations.orthogonal's householder_product of 8,192 x
    # 1,024 float32: 3 allocations, 38,863,876 bytes (the result, the info, orgqr's workspace)
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(8192, 1024, device="cuda")
        tau = torch.empty(1024, device="cuda")
        q, counts = counted(lambda: torch.linalg.householder_product(a, tau))
        assert q.shape == (8192, 1024) and counts == (3, 33554432 + 4 + 5309440)
        _, counts = counted(lambda: torch.linalg.householder_product(a[:, :500], tau[:500]))
        assert counts == (2, 8192 * 500 * 4 + 4)
    assert any("orgqr" in u for u in cap.unmeasured)


def test_orthogonal_layers_householder_and_qr_workspaces_as_the_h200_counted():
    # blind172/fp06's per-op truth: parametrizations.orthogonal's Householder map of a 1,024 x 3,072
    # weight (3,072 x 1,024, 1,024 reflectors), a 1,024 x 1,024 product of 512 reflectors (orgqr's
    # lwork as of 1,024), and the QR retraction of a 100 x 1,024 head transposed (Q, R, tau, geqrf's
    # info and 3,145,856-byte workspace, orgqr's info and 556,160-byte workspace)
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(3072, 1024, device="cuda")
        tau = torch.empty(1024, device="cuda")
        _, counts = counted(lambda: torch.linalg.householder_product(a, tau))
        assert counts == (3, 12582912 + 4 + 2688000)
        b = torch.empty(1024, 1024, device="cuda")
        _, counts = counted(lambda: torch.linalg.householder_product(b, tau[:512]))
        assert counts == (3, 4194304 + 4 + 1639424)
        head = torch.empty(100, 1024, device="cuda")
        _, counts = counted(lambda: torch.linalg.qr(head.mT))
        assert counts == (7, 4152024)
    assert not cap.unmeasured


def test_qr_into_row_major_outs_takes_proxies_then_the_qr_steps():
    # blind272/jm03: PowerSGD's `_orthogonalize` runs `torch.linalg.qr(M, out=(M, R))` on row-major
    # (b, n, r) views; the structured kernel gives each out whose strides are not the column-major
    # ones of the meta function a proxy (`maybe_create_proxy`), Q's then R's, then tau, geqrf's info and
    # workspace, orgqr's info and workspace (1,024 x 8 float32: 3,145,856 and 164,864 bytes in
    # cusolver_h200.json); the twin named `aten::linalg_qr` unmeasured and counted nothing
    with vramscope.capture(gpu="h200") as cap:
        m = torch.empty(1, 1024, 8, device="cuda")
        r = torch.empty(1, 8, 8, device="cuda")
        _, counts = counted(lambda: torch.linalg.qr(m, out=(m, r)))
        assert counts == (7, 32768 + 256 + 32 + 4 + 3145856 + 4 + 164864)
        # column-major outs are written in place: no proxy
        qc = torch.empty(1, 8, 1024, device="cuda").mT
        rc = torch.empty(1, 8, 8, device="cuda").mT
        _, counts = counted(lambda: torch.linalg.qr(m, out=(qc, rc)))
        assert counts == (5, 32 + 4 + 3145856 + 4 + 164864)
    assert not cap.unmeasured


def test_powersgd_qr_into_row_major_outs_allocates_as_the_h100_probe_recorded():
    # blind272/jm03: PowerSGD's `torch.linalg.qr(M, out=(M, R))` of n x 4 and n x 8 factors; geqrf's
    # workspace for these sizes was named unmeasured (pt61_linalg_workspace_probe on the H100: 3,145,856
    # bytes for each, fixtures/run/probes); the twin now makes every allocation the probe recorded
    import re

    gpu = (FIXTURES / "run" / "probes" / "pt61_linalg_workspace_probe_h100.txt").read_text()
    with vramscope.capture(gpu="h100") as cap:
        for line in gpu.splitlines():
            found = re.match(
                r"qr out \(b=(\d+), n=(\d+), r=(\d+)\) float32: peak_above \d+ events (.*)", line
            )
            if found is None:
                continue
            b, n, r = (int(found.group(i)) for i in (1, 2, 3))
            made = [int(e) for e in found.group(4).split() if e.startswith("+")]
            m = torch.empty(b, n, r, device="cuda")
            rr = torch.empty(b, r, r, device="cuda")
            _, counts = counted(lambda m=m, rr=rr: torch.linalg.qr(m, out=(m, rr)))
            assert counts == (len(made), sum(made)), line[:40]
    assert not cap.unmeasured


def test_orgqr_workspace_of_up_to_64_reflectors_follows_the_sweeps_form():
    # blind151/eu06's per-op truth: parametrizations.orthogonal's Householder map of a 1,024 x 10
    # float32 weight: 3 allocations, the result, the info and orgqr's 173,056-byte workspace
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(1024, 10, device="cuda")
        tau = torch.empty(10, device="cuda")
        _, counts = counted(lambda: torch.linalg.householder_product(a, tau))
        assert counts == (3, 40960 + 4 + 173056)
    assert not cap.unmeasured
    # the form holds for every size of cusolver_h200.json up to 64 reflectors, not past them
    data = json.loads((ROOT / "python" / "vramscope" / "cusolver_h200.json").read_text())
    dt = {"float32": torch.float32, "float64": torch.float64}
    inside = [(m, n, k, dt[d], b) for m, n, k, d, b in data["orgqr"] if n == k <= 64]
    assert len(inside) == 128
    for m, n, _k, d, nbytes in inside:
        assert (33024 + -(-m * n // 32) * 32) * (4 if d == torch.float32 else 8) == nbytes
    assert _linalg.orgqr_workspace(1024, 10, 10, torch.float32) == 173056
    assert _linalg.orgqr_workspace(96, 10, 10, torch.float64) == (33024 + 960) * 8
    assert _linalg.orgqr_workspace(4000, 100, 100, torch.float32) is None
    assert _linalg.orgqr_workspace(1024, 10, 10, torch.complex64) is None


def test_matrix_exp_takes_the_degree_the_norm_picks(norms):
    # the H200's calls of blind21/u04: degrees 1, 4, 8 (512) and 8, 18 with 1, 5 and 4 squarings (1024)
    norms += [0.0, 0.01, 0.3, 0.3, 2 * F, 20 * F, 12 * F]
    with vramscope.capture(gpu="h200"):
        a = torch.empty(512, 512, device="cuda")
        torch.mm(a, a)  # the cuBLAS handle and workspace, before any count
        for want in ((11, 7342104), (14, 10487860), (18, 13633612)):
            out, counts = counted(lambda: torch.linalg.matrix_exp(a))
            assert out.shape == (512, 512) and counts == want
        b = torch.empty(1024, 1024, device="cuda")
        for want in ((20, 62918764), (51, 88088173), (55, 104865389), (54, 100671085)):
            _, counts = counted(lambda: torch.linalg.matrix_exp(b))
            assert counts == want


def test_matrix_exp_of_an_unknown_norm_is_the_largest_path():
    # values the twin does not carry: scaled and squared degree 18, one squaring (its H200 count)
    with vramscope.capture(gpu="h200"):
        b = torch.empty(1024, 1024, device="cuda")
        torch.mm(b, b)
        _, counts = counted(lambda: torch.linalg.matrix_exp(b))
        assert counts == (51, 88088173)


def test_matrix_exp_of_carried_values_is_exact():
    with vramscope.capture(gpu="h200"):
        zero = torch.zeros(4, 4).cuda()
        torch.mm(zero, zero)
        # norm 0: degree 1 (abs, sum, max, the result, index, select, buffer, ones, diag, sum)
        _, counts = counted(lambda: torch.linalg.matrix_exp(zero))
        assert counts == (11, 64 + 16 + 4 + 8 + 64 + 8 + 64 + 128 + 4 + 64 + 64)
        # norm 0.05: degree 4 (a 4-matrix buffer, two combinations and their coefficients)
        small = (0.05 * torch.eye(4)).cuda()
        _, counts = counted(lambda: torch.linalg.matrix_exp(small))
        assert counts == (14, 64 + 16 + 4 + 8 + 64 + 8 + 64 + 256 + 4 + 64 + 12 + 64 + 16 + 64)


def test_a_module_moved_to_the_device_keeps_its_parameters_values():
    # `nn.Module.to` moves a host-built parameter by `param.data = fn(param)`: the CUDA parameter reads
    # the values its host copy had, as `param.to("cuda")` does; blind332/lu03's `SSM().to(device)`
    # then takes matrix_exp's degree 8 (0.05 < norm <= 0.58) as the H100's history has it, not the
    # unknown norm's degree 18
    class Transition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gen = torch.nn.Parameter(0.3 * torch.eye(4))

    with vramscope.capture(gpu="h200"):
        torch.mm(torch.zeros(4, 4, device="cuda"), torch.zeros(4, 4, device="cuda"))
        m = Transition().to("cuda")
        assert float(m.gen.detach().sum()) == pytest.approx(1.2)
        with torch.no_grad():
            _, counts = counted(lambda: torch.linalg.matrix_exp(m.gen))
    # abs, sum, max, the result, index, select, a 5-matrix buffer, ones, diag, three combinations
    # of 2, 4 and 2 coefficients and the last of 5
    assert counts == (18, 64 + 16 + 4 + 8 + 64 + 8 + 64 + 320 + 4 + 64 + 8 + 64 + 16 + 64 + 8 + 64 + 20 + 64)


def test_matrix_exp_backward_builds_one_block_matrix(norms):
    # `differential_analytic_matrix_function`: zeros(2n, 2n), not the subclass path's four cats
    norms += [0.0, 0.3]
    with vramscope.capture(gpu="h200"):
        # drawn, so neither its norm nor the block matrix's carries values (zeros would: a constant
        # factory carries its value, and the twin would compute the norms)
        a = torch.randn(512, 512, device="cuda", requires_grad=True)
        loss = torch.linalg.matrix_exp(a).sum()
        _, counts = counted(loss.backward)
    # the seed's ones, the block matrix, degree 8 of 1024 (the H200's 20 allocations, 62,918,764
    # bytes), the backward thread's cuBLAS workspace, AccumulateGrad's copy of the narrowed gradient
    assert counts == (1 + 1 + 20 + 1 + 1, 4 + 4194304 + 62918764 + 33554432 + 1048576)


def test_pow_of_a_scalar_base_puts_the_base_on_the_gpu():
    with vramscope.capture(gpu="h200"):
        s = torch.empty(1, device="cuda")
        _, counts = counted(lambda: torch.pow(2, s))
        assert counts == (2, 4 + 8)
        _, counts = counted(lambda: torch.pow(1, s))
        assert counts == (1, 4)


def test_a_transposed_host_tensor_copies_without_staging():
    with vramscope.capture(gpu="h200"):
        host = torch.zeros(256, 512).t()
        moved, counts = counted(lambda: host.to("cuda"))
        assert moved.stride() == host.stride() and counts == (1, 512 * 256 * 4)


def test_linalg_ops_without_a_rule_are_named():
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(70, 70, device="cuda")
        torch.linalg.qr(a)
        torch.linalg.solve_triangular(a, a, upper=False)
        b = torch.empty(4, 70, 70, device="cuda")
        torch.linalg.solve_triangular(b, b, upper=False)
        assert {u.split("'s")[0] for u in cap.unmeasured} == {"aten::linalg_qr"}
        assert any("geqrf" in u for u in cap.unmeasured) and any("orgqr" in u for u in cap.unmeasured)
        # more than 8 matrices of more than 512 rows: the batched cuBLAS path, a rule
        c = torch.empty(9, 600, 600, device="cuda")
        torch.linalg.solve_triangular(c, c, upper=False)
        assert not any("trsm" in name for name in cap.unmeasured)


def test_svd_takes_gesvdj_of_a_column_major_clone():
    # blind47/au02's H200 history of one 4096 x 4096 float32 `linalg.svd(g, full_matrices=False)`:
    # U, Vh, S, infos, A's clone, gesvdj's workspace, check_errors' any() and its bool copy
    with vramscope.capture(gpu="h200") as cap:
        g = torch.empty(4096, 4096, device="cuda")
        (u, s, vh), counts = counted(lambda: torch.linalg.svd(g, full_matrices=False))
        assert u.shape == vh.shape == (4096, 4096) and s.shape == (4096,)
        assert counts == (8, 336892422)
        assert torch.cuda.memory_allocated() == 3 * 67108864 + 16384
        assert "aten::_linalg_svd" not in cap.unmeasured
        # a type without a measured workspace: the rest, and the workspace named unmeasured
        b = torch.empty(300, 200, device="cuda", dtype=torch.complex128)
        _, counts = counted(lambda: torch.linalg.svd(b, full_matrices=True))
        assert counts == (7, 16 * (300 * 300 + 200 * 200) + 8 * 200 + 4 + 16 * 300 * 200 + 2)
        assert any("gesvdj workspace (300 x 200, torch.complex128" in name for name in cap.unmeasured)


PROBE = json.loads((FIXTURES / "run" / "svd" / "svd_probe_h200.json").read_text())


def _history(fn):
    """The twin's allocator events of `fn` (allocations and frees, sizes as requested)."""
    torch.cuda.memory._record_memory_history(max_entries=10_000)
    before = len(torch.cuda.memory._snapshot()["device_traces"][0])
    fn()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
    torch.cuda.memory._record_memory_history(enabled=None)
    return [(e["action"][0], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]


@pytest.mark.parametrize("case", PROBE["cases"], ids=lambda c: c["name"])
def test_svd_allocates_and_frees_in_the_h200s_order(case):
    # fixtures/run/svd: gesvdj (square, tall, wide, full_matrices both ways, float64, a batch,
    # svdvals' scratch U and V) and gesvdjBatched (a batch of 16 x 16, 32 x 20's full U)
    dtype = torch.float64 if "float64" in case["name"] else torch.float32
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(*case["batch"], case["m"], case["n"], device="cuda", dtype=dtype)
        if case["name"].startswith("svdvals"):
            got = _history(lambda: torch.linalg.svdvals(a))
        else:
            got = _history(lambda: torch.linalg.svd(a, full_matrices=case["full"]))
        assert got == [(e["a"], e["size"]) for e in case["events"]]
        assert not cap.unmeasured


@pytest.mark.parametrize(
    "shape, dtype, counts",
    [
        ((2, 32, 32), torch.float32, (7, 28809)),
        ((8, 32, 32), torch.float32, (7, 103329)),
        ((27, 27), torch.float64, (8, 25654)),
    ],
)
def test_gesvdj_batched_of_whitening_covariances_as_the_h200_counted(shape, dtype, counts):
    # blind172/fp03's per-op truth: U, S, Vh, the infos, the column-major clone, gesvdjBatched's
    # workspace (3,968 bytes in float32, 7,936 in float64) and `_linalg_check_errors`' reads
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(*shape, device="cuda", dtype=dtype)
        _, got = counted(lambda: torch.linalg.svd(a))
        assert got == counts
    assert not cap.unmeasured


def test_vmapped_pinv_of_2x2_mass_matrices_as_the_h200_counted():
    # blind196/gn05's per-op truth: the LNN's torch.func.vmap'd pinv of 8,192 2 x 2 float64 blocks of
    # a Hessian (a transposed view at offset 10), 17 allocations and 1,892,121 bytes requested, of
    # which gesvdjBatched's workspace is 7,936 bytes (992 elements, as every size measured so far)
    with vramscope.capture(gpu="h200") as cap:
        w = torch.empty(8, 8, device="cuda")
        w @ w  # cuBLAS's workspace, made once
        m = torch.empty(8192, 4, 4, device="cuda", dtype=torch.float64).transpose(1, 2)[:, 2:, 2:]
        _, got = counted(lambda: torch.func.vmap(torch.linalg.pinv)(m))
        assert got == (17, 1892121)
    assert not cap.unmeasured


def test_gesvdj_lwork_is_the_h200s_over_the_whole_grid():
    # every (type, m, n, econ, jobz) the probe called cusolverDn<t>gesvdj_bufferSize with, in every
    # form of the fit
    assert len(PROBE["lwork"]) == 3200
    for _t, m, n, econ, _jobz, status, lwork in PROBE["lwork"]:
        assert status == 0 and _gesvdj.gesvdj_lwork(m, n, bool(econ)) == lwork, (m, n, econ)
        assert {_gesvdj._lwork(m, n, bool(econ), *v) for v in _gesvdj._VARIANTS} == {lwork}
    # off the grid: the recorded 300 x 200 call (3,146,752 bytes in float32, both ways)
    assert _gesvdj.gesvdj_lwork(300, 200, True) == _gesvdj.gesvdj_lwork(300, 200, False) == 786688
    # where the forms disagree: padding (at most 31 elements), or the floor's growth (k = 300)
    lo, hi = _gesvdj.gesvdj_lwork_bounds(999, 998, True)
    assert 0 < hi - lo <= 31 and _gesvdj.gesvdj_lwork(999, 998, True) is None
    lo, hi = _gesvdj.gesvdj_lwork_bounds(400, 300, True)
    assert (lo, hi) == (1024 * (512 + 300) + 320 + 32, 1024 * (512 + 384) + 320 + 32)
    assert _linalg.gesvdj_workspace_bytes(4096, 4096, False, torch.complex128) is None
    with pytest.raises(ValueError):
        _gesvdj.gesvdj_lwork(0, 4, True)


def test_an_undetermined_gesvdj_workspace_takes_the_most_and_says_so(capsys):
    with vramscope.capture(gpu="h200"):
        a = torch.empty(400, 300, device="cuda")
        _, counts = counted(lambda: torch.linalg.svd(a, full_matrices=False))
        hi = _gesvdj.gesvdj_lwork_bounds(400, 300, True)[1]
        assert counts == (8, 4 * (400 * 300 + 300 * 300 + 300) + 4 + 4 * 400 * 300 + 4 * hi + 2)
    assert "gesvdj's workspace for 400 x 300" in capsys.readouterr().err


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: torch.svd(a, compute_uv=False),
        lambda a: a.svd(True, False),
        lambda a: torch.linalg.matrix_norm(a, 2),
        lambda a: torch.linalg.norm(a, "nuc"),
        lambda a: a.norm(p="nuc"),
        lambda a: torch.nuclear_norm(a),
        lambda a: torch.linalg.cond(a),
    ],
    ids=["svd", "Tensor.svd", "matrix_norm", "linalg.norm", "Tensor.norm", "nuclear_norm", "cond"],
)
def test_functions_taking_singular_values_only_run_svdvals_path(fn):
    # their C++ code calls `linalg_svdvals`: the H200's svdvals history up to its error checks
    case = next(c for c in PROBE["cases"] if c["name"].startswith("svdvals"))
    want = [(e["a"], e["size"]) for e in case["events"]][:15]
    with vramscope.capture(gpu="h200"):
        a = torch.empty(case["m"], case["n"], device="cuda")
        assert _history(lambda: fn(a))[:15] == want


def test_svdvals_of_a_tensor_needing_a_gradient_computes_the_vectors():
    # `linalg_svdvals`: compute_uv = `_requires_fw_or_bw_grad(A)`, so U and Vh come back for backward
    with vramscope.capture(gpu="h200"):
        a = torch.empty(64, 48, device="cuda", requires_grad=True)
        _, counts = counted(lambda: torch.linalg.svdvals(a))
        lwork = _gesvdj.gesvdj_lwork(64, 48, True)
        # U, Vh, S, infos, the clone, the workspace, check_errors' two bytes
        assert counts == (8, 4 * (64 * 48 + 48 * 48 + 48) + 4 + 4 * 64 * 48 + 4 * lwork + 2)
        with torch.no_grad():
            _, counts = counted(lambda: torch.linalg.svdvals(a))
        # S, infos, the clone, scratch U and V, the workspace, check_errors' two bytes
        assert counts == (8, 4 * 48 + 4 + 4 * 64 * 48 + 4 * (64 * 48 + 48 * 48) + 4 * lwork + 2)


def test_potrf_workspace_follows_the_h200_sweep():
    # fixtures/run/linalg_sparse: the same bytes in every dtype; a few of the 37 sizes
    for n, want in (
        (1, 160),
        (64, 160),
        (65, 192),
        (257, 480),
        (300, 544),
        (512, 1152),
        (4096, 65664),
        (4097, 66720),
        (6000, 141504),
        (8192, 262272),
    ):
        assert _linalg.potrf_workspace_bytes(n) == want


def test_cholesky_of_one_matrix_and_of_a_batch():
    with vramscope.capture(gpu="h200"):
        a = torch.empty(4096, 4096, device="cuda", dtype=torch.float64)
        # L, info and potrf's workspace (blind32/af04's H200 history: 65,664 bytes)
        _, counts = counted(lambda: torch.linalg.cholesky_ex(a))
        assert counts == (3, 4096 * 4096 * 8 + 4 + 65664)
        b = torch.empty(5, 64, 64, device="cuda")
        # L, the infos, potrfBatched's array of 5 pointers
        _, counts = counted(lambda: torch.linalg.cholesky_ex(b))
        assert counts == (3, 5 * 64 * 64 * 4 + 20 + 40)


def test_cholesky_solve_clones_both_operands():
    with vramscope.capture(gpu="h200") as cap:
        # the probe's matrices come from a product, which made the cuBLAS handle's workspace
        torch.empty(8, 8, device="cuda") @ torch.empty(8, 8, device="cuda")
        L = torch.empty(4096, 4096, device="cuda", dtype=torch.float64)
        y = torch.empty(4096, 1, device="cuda", dtype=torch.float64)
        before = torch.cuda.memory_allocated()
        # infos, the result (B's column-major copy), L's copy (blind32/af04's H200 history)
        x, counts = counted(lambda: torch.cholesky_solve(y, L))
        assert counts == (3, 4 + 32768 + 4096 * 4096 * 8)
        assert x.stride() == (1, 4096) and torch.cuda.memory_allocated() - before == 32768
        # a batch goes to MAGMA: the two copies, L broadcast to the batch (fixtures/run/linalg_sparse)
        L = torch.empty(256, 256, device="cuda", dtype=torch.float64)
        b = torch.empty(4, 256, 8, device="cuda", dtype=torch.float64)
        _, counts = counted(lambda: torch.cholesky_solve(b, L))
        assert counts == (2, 65536 + 2097152)
        assert not any("cholesky_solve" in k for k in cap.unmeasured)


def test_a_magma_batched_cholesky_solve_takes_the_cublas_handle_s_workspace():
    # `apply_cholesky_solve`'s `MAGMAQueue` takes the current cuBLAS handle (cuda/linalg/MagmaUtils.h),
    # whose workspace is made at its first use per thread and stream (CublasHandlePool.cpp):
    # blind332/lu03's H100 history, the backward's first batched solve on the autograd thread: the
    # result (98,304), the L copy (4,718,592), the 32 MiB workspace, then the L copy freed
    with vramscope.capture(gpu="h100"):
        L = torch.empty(512, 48, 48, device="cuda")
        b = torch.empty(512, 48, 1, device="cuda")
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        _, first = counted(lambda: torch.cholesky_solve(b, L))
        _, again = counted(lambda: torch.cholesky_solve(b, L))
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        torch.cuda.memory._record_memory_history(enabled=None)
    workspace = 32 << 20
    assert first == (3, 98304 + 4718592 + workspace)
    assert again == (2, 98304 + 4718592)
    events = [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]
    assert events[:4] == [
        ("alloc", 98304),
        ("alloc", 4718592),
        ("alloc", workspace),
        ("free_requested", 4718592),
    ]


@pytest.mark.parametrize(
    ("n", "dtype", "batch", "nrhs", "raises"),
    [
        (6144, torch.float64, 4, 1, True),  # blind334/lw04 on the H100 (fixtures/run/run_blind334_h100.jsonl)
        (6016, torch.float64, 2, 1, False),
        (6017, torch.float64, 2, 1, True),
        (12160, torch.float32, 2, 1, False),  # pytorch#38603: float32 works to 12,160
        (12161, torch.float32, 2, 1, True),
        (2944, torch.complex128, 2, 1, False),
        (2945, torch.complex128, 2, 1, True),
        (6144, torch.float64, 4, 2, False),  # more right-hand sides: trsm, no whole-n shared buffer
        (6144, torch.float64, 1, 1, False),  # one system: cuSOLVER's potrs
    ],
)
def test_magma_batched_cholesky_solve_of_one_rhs_raises_past_its_shared_memory(n, dtype, batch, nrhs, raises):
    # MAGMA 2.6.1's potrs_batched, nrhs 1: two trsv_outofplace_batched launches of (n + 128) elements
    # of shared memory a block; past 48 KiB CUDA refuses the launch ("invalid argument"), the two
    # working copies freed by the unwinding (their peak stays)
    with vramscope.capture(gpu="h100"):
        # lw04's products made the cuBLAS handle's workspace, which MAGMA's queue takes
        torch.empty(8, 8, device="cuda") @ torch.empty(8, 8, device="cuda")
        L = torch.empty(batch, n, n, device="cuda", dtype=dtype)
        b = torch.empty(n, nrhs, device="cuda", dtype=dtype).expand(batch, n, nrhs)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        if not raises:
            torch.cholesky_solve(b, L)
            return
        with pytest.raises(torch.AcceleratorError, match="CUDA error: invalid argument"):
            torch.cholesky_solve(b, L)
        assert torch.cuda.memory_allocated() == before
        size = torch.empty((), dtype=dtype).element_size()
        copies = -(-batch * n * nrhs * size // 512) * 512 + batch * n * n * size
        assert torch.cuda.max_memory_allocated() - before >= copies


def test_cdist_takes_the_cublas_workspace_of_its_product():
    with vramscope.capture(gpu="h200"):
        x = torch.empty(4096, 8, device="cuda", dtype=torch.float64)
        d = torch.cdist(x, x)
        assert d.shape == (4096, 4096)
        # blind32/af04's H200 history: the product's 32 MiB workspace stays with the handle
        assert torch.cuda.memory_allocated() == 262144 + 4096 * 4096 * 8 + 32 * 1024 * 1024


def test_slogdet_factors_and_reduces_as_the_h200_counted():
    # blind48/av01's H200 history: sign, logabsdet, LU, pivots, info, getrf's workspace, the
    # permutation's sign (arange, !=, its int64 sum and the copy it reduces), sgn, prod, abs
    with vramscope.capture(gpu="h200") as cap:
        for n, want in ((12, 1668), (48, 11720), (192, 156120)):
            a = torch.empty(n, n, device="cuda").mT
            before = torch.cuda.memory_allocated()
            (sign, logabsdet), counts = counted(lambda a=a: torch.slogdet(a))
            assert sign.shape == logabsdet.shape == () and counts == (13, want)
            # LU and pivots die with the call where nothing keeps them for a backward
            assert torch.cuda.memory_allocated() - before == 512 + 512
            del sign, logabsdet
        assert not any("slogdet" in name or "getrf" in name for name in cap.unmeasured)
        # blind121/dq02's H200 per-op truth: slogdet of 8 x 8 float32 requested 13 blocks, 1,248 bytes
        c = torch.empty(8, 8, device="cuda").mT
        (_, _), counts = counted(lambda: torch.slogdet(c))
        assert counts == (13, 1248) and not cap.unmeasured
        # blind126/dv02's H200 history: getrf's workspace for 24 x 24 float32 is 768 bytes
        d = torch.empty(24, 24, device="cuda").mT
        (_, _), counts = counted(lambda: torch.slogdet(d))
        assert counts == (13, 4 + 4 + 2304 + 96 + 4 + 768 + 96 + 24 + 8 + 192 + 96 + 4 + 96)
        assert not cap.unmeasured
        # a size without a measured getrf workspace: the rest, and the workspace named unmeasured
        b = torch.empty(101, 101, device="cuda")
        _, counts = counted(lambda: torch.slogdet(b))
        assert counts == (12, 4 + 4 + 40804 + 404 + 4 + 404 + 101 + 8 + 808 + 404 + 4 + 404)
        assert any("getrf workspace (101 x 101" in name for name in cap.unmeasured)


def test_lu_solve_takes_the_h200s_routes():
    # blind48/av01's H200 history of `linalg_lu_solve(LU, pivots, B, adjoint=True)` with B square:
    # 192 rows: the result, the int64 permutation, B's clone for the final scatter (the first trsm
    # brings the cuBLAS handle's 32 MiB workspace); 48 rows: the same with two 8-byte pointer
    # arrays per batched trsm; 12 rows: batched getrs, its two pointer arrays
    with vramscope.capture(gpu="h200") as cap:
        for n, wants in (
            (192, ((4, 33850880), (3, 296448))),
            (48, ((7, 18848),)),
            (12, ((3, 592),)),
        ):
            lu = torch.empty(n, n, device="cuda").mT
            pivots = torch.empty(n, dtype=torch.int32, device="cuda")
            b = torch.empty(n, n, device="cuda").mT
            for want in wants:
                x, counts = counted(
                    lambda lu=lu, p=pivots, b=b: torch.linalg.lu_solve(lu, p, b, adjoint=True)
                )
                assert x.shape == (n, n) and counts == want
        assert not any("lu_solve" in name for name in cap.unmeasured)


def test_solve_triangular_takes_looped_or_batched_trsm():
    with vramscope.capture(gpu="h200"):
        a = torch.empty(48, 48, device="cuda").mT
        # under 64 rows: trsmBatched over two 8-byte pointer arrays (blind48/av01's H200 history),
        # the first cuBLAS call bringing the handle's 32 MiB workspace
        _, counts = counted(lambda: torch.linalg.solve_triangular(a, a, upper=False))
        assert counts == (4, 9216 + 16 + 32 * 1024 * 1024)
        _, counts = counted(lambda: torch.linalg.solve_triangular(a, a, upper=False))
        assert counts == (3, 9216 + 16)
        # 64 rows and more in a batch of at most 8: trsm in a loop, nothing more
        b = torch.empty(8, 64, 64, device="cuda")
        _, counts = counted(lambda: torch.linalg.solve_triangular(b, b, upper=False))
        assert counts == (1, 8 * 64 * 64 * 4)
        # more than 8 matrices: the batched path, 8 bytes a matrix in each array
        c = torch.empty(9, 100, 100, device="cuda")
        _, counts = counted(lambda: torch.linalg.solve_triangular(c, c, upper=False))
        assert counts == (3, 9 * 100 * 100 * 4 + 2 * 72)


def test_solve_triangular_clones_an_a_broadcast_to_bs_batch():
    # linalg_solve_triangular_out clones A when it is neither row- nor column-contiguous, as an A
    # expanded to B's batch is (on the CPU wheel, 16 right-hand batches of a 2,048-row float64
    # factor grew the peak RSS by 16 x 32 MiB)
    with vramscope.capture(gpu="h100"):
        a = torch.empty(100, 100, device="cuda")
        b = torch.empty(9, 100, 5, device="cuda")
        torch.linalg.solve_triangular(a, a, upper=False)  # the handle's workspace comes first
        out = 9 * 100 * 5 * 4
        # out, A's clone to (9, 100, 100), the batched trsm's two pointer arrays
        _, counts = counted(lambda: torch.linalg.solve_triangular(a, b, upper=False))
        assert counts == (4, out + 9 * 100 * 100 * 4 + 2 * 72)
        # a transposed A broadcast the same way is cloned too
        _, counts = counted(lambda: torch.linalg.solve_triangular(a.mT, b, upper=True))
        assert counts == (4, out + 9 * 100 * 100 * 4 + 2 * 72)
        # a batched A with a broadcast B: A is contiguous, nothing cloned
        c = torch.empty(9, 100, 100, device="cuda")
        _, counts = counted(lambda: torch.linalg.solve_triangular(c, b[0], upper=False))
        assert counts == (3, out + 2 * 72)
        # B of A's batch: no broadcast, no clone
        _, counts = counted(lambda: torch.linalg.solve_triangular(c, b, upper=False))
        assert counts == (3, out + 2 * 72)


def test_batched_trsm_of_more_than_512_rows_takes_cublas_batched_pointer_arrays():
    # more than 8 matrices of more than 512 rows take the batched cuBLAS path too: two pointer
    # arrays of 8 bytes a matrix, then the handle's workspace at the first cuBLAS call (the H100's
    # events of 9 x 513 and 32 x 4,096 float64: kp68_blind301_linalg_workspaces_probe)
    with vramscope.capture(gpu="h100"):
        c = torch.empty(9, 513, 513, device="cuda")
        _, counts = counted(lambda: torch.linalg.solve_triangular(c, c, upper=False))
        assert counts == (4, 9 * 513 * 513 * 4 + 2 * 72 + 32 * 1024 * 1024)
        _, counts = counted(lambda: torch.linalg.solve_triangular(c, c, upper=False))
        assert counts == (3, 9 * 513 * 513 * 4 + 2 * 72)


def test_lstsq_and_qr_of_kp04_take_the_h100s_workspaces():
    # kp68_blind301_linalg_workspaces_probe's H100 events: qr of (16384, 50) float64 takes geqrf's
    # 2,648,960-byte workspace, lstsq of (16384, 512) with 512 right-hand sides ormqr's 105,388,032
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(16384, 50, device="cuda", dtype=torch.float64)
        _, counts = counted(lambda: torch.linalg.qr(a))
        assert counts == (7, 6553600 + 20000 + 400 + 4 + 2648960 + 4 + 6817792)
        a = torch.empty(16384, 512, device="cuda", dtype=torch.float64)
        _, counts = counted(lambda: torch.linalg.lstsq(a, a))
        assert counts[1] >= 105388032
    assert not any("geqrf" in u or "ormqr" in u for u in cap.unmeasured)


def test_lstsq_of_a_batch_gels_looped_takes_workspaces_per_matrix(monkeypatch):
    # `gels_looped` (cuda/linalg/BatchLinearAlgebra.cpp) over 3 matrices of 300 rows (more than 256:
    # no gelsBatched), as blind320/li02's KAN grid updates: `linalg_lstsq_gels`' tau (3 x 11), geqrf's
    # info and one workspace per matrix (`apply_geqrf`), ormqr's likewise (`apply_ormqr`), then the
    # batch's trsm (two pointer arrays of 8 bytes a matrix); workspace sizes stand-ins here
    monkeypatch.setitem(_linalg.GEQRF_WORKSPACE, (300, 11, torch.float32), 1000)
    monkeypatch.setitem(_linalg.ORMQR_WORKSPACE, (300, 5, 11, torch.float32), 2000)
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(3, 300, 11, device="cuda")
        b = torch.empty(3, 300, 5, device="cuda")
        torch.mm(b[0, :8], b[0, :8].T)  # the cuBLAS handle's workspace
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        res = torch.linalg.lstsq(a, b)
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    assert res.solution.shape == (3, 11, 5)
    allocs = [e["size"] for e in trace if e["action"] == "alloc"]
    assert allocs[:3] == [12, 3 * 300 * 5 * 4, 3 * 300 * 11 * 4]
    assert allocs[3:14] == [132, 4, 1000, 1000, 1000, 4, 2000, 2000, 2000, 24, 24]
    assert not cap.unmeasured


def test_lstsq_of_li02_s_batches_allocates_as_the_h100_recorded():
    # li70_kan_lstsq_gels_looped_probe's H100 events (runs of a repeated pair written `(...)xN`)
    text = (ROOT / "validation" / "run" / "probes" / "li70_kan_lstsq_gels_looped_probe_h100.out").read_text()
    for batch, nrhs in ((8, 256), (64, 1)):
        tag = f"lstsq A ({batch}, 4096, 11) B ({batch}, 4096, {nrhs}) float32"
        line = next(x for x in text.splitlines() if x.startswith(tag + ":"))
        gpu = []
        for group, times, single in re.findall(r"\(([^)]*)\)x(\d+)|(\S+)", line.split(" events ")[1]):
            gpu += [int(t) for t in (group.split() * int(times) if group else [single])]
        gpu = [s for s in gpu if s > 0]  # the allocations (+size), in order
        with vramscope.capture(gpu="h100") as cap:
            torch.mm(torch.empty(8, 8, device="cuda"), torch.empty(8, 8, device="cuda"))
            a = torch.empty(batch, 4096, 11, device="cuda")
            b = torch.empty(batch, 4096, nrhs, device="cuda")
            torch.cuda.memory._record_memory_history()
            start = len(torch.cuda.memory._snapshot()["device_traces"][0])
            torch.linalg.lstsq(a, b)
            trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        assert [e["size"] for e in trace if e["action"] == "alloc"] == gpu
        assert not cap.unmeasured


def test_det_factors_as_slogdet_does():
    # the pieces of slogdet's H200 history: det, LU, pivots, info, getrf's workspace (768 bytes at
    # 12 rows), the diagonal's prod, then lu_det_P's arange, !=, int64 sum and int64 copy
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(12, 12, device="cuda").mT
        d, counts = counted(lambda: torch.linalg.det(a))
        assert d.shape == () and counts == (10, 4 + 576 + 48 + 4 + 768 + 4 + 48 + 12 + 8 + 96)
        assert "aten::_linalg_det" not in cap.unmeasured


def test_solve_factors_then_solves_with_a_proxy_for_a_vector():
    # av01's measured pieces (getrf's 3,840 bytes at 192 rows, the triangular route of lu_solve)
    # composed as `_linalg_solve_ex_out` runs them: result, LU, pivots, info, getrf's workspace;
    # a vector B's unsqueezed result is not column-major, so lu_solve_out's meta takes a proxy;
    # lu_solve's non-adjoint triangular route (as the H200 counted it, the test below): the
    # permutation, its inverse's arange and scatter, P^T B, the first trsm's 32 MiB cuBLAS
    # workspace; then check_errors
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(192, 192, device="cuda")
        b = torch.empty(192, device="cuda")
        x, counts = counted(lambda: torch.linalg.solve(a, b))
        want = 768 + 147456 + 768 + 4 + 3840 + 768 + 3 * 1536 + 768 + 32 * 1024 * 1024 + 2
        assert x.shape == (192,) and counts == (13, want)
        # a matrix B: no proxy (the handle is there now)
        m = torch.empty(192, 192, device="cuda")
        x, counts = counted(lambda: torch.linalg.solve(a, m))
        assert x.stride() == (1, 192) and counts == (11, 3 * 147456 + 768 + 4 + 3840 + 3 * 1536 + 2)
        # 48 rows, 4 columns: looped cuSOLVER getrs and its int32 info
        c = torch.empty(48, 48, device="cuda")
        d = torch.empty(48, 4, device="cuda")
        _, counts = counted(lambda: torch.linalg.solve(c, d))
        assert counts == (8, 768 + 9216 + 192 + 4 + 1280 + 4 + 2)
        assert not any("solve" in name for name in cap.unmeasured)


def test_inv_solves_against_the_identity_in_place():
    # result and info, then linalg_solve_ex_out's LU and pivots, getrf's workspace (av01's 3,840
    # bytes at 192 rows), lu_solve in place on the result: the permutation, its inverse, P^T B, the
    # first trsm's 32 MiB cuBLAS workspace; then linalg.inv's check_errors
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(192, 192, device="cuda")
        x, counts = counted(lambda: torch.linalg.inv(a))
        want = 3 * 147456 + 4 + 768 + 3840 + 3 * 1536 + 32 * 1024 * 1024 + 2
        assert x.stride() == (1, 192) and counts == (12, want)
        # 12 rows: batched getrs over two pointer arrays (av01's 768-byte getrf workspace)
        b = torch.empty(12, 12, device="cuda")
        _, counts = counted(lambda: torch.inverse(b))
        assert counts == (9, 576 + 4 + 576 + 48 + 768 + 16 + 2)
        assert "aten::linalg_inv_ex" not in cap.unmeasured


# blind117's H200 per-op truth (fixtures/run/truth_blind117_h200.tar.xz): allocations and requested
# bytes of each op, its outputs included


@pytest.mark.parametrize(
    "shape, counts",
    [
        ((1024, 1024), (7, 16323720)),
        ((32768, 32), (7, 10943368)),
        ((768, 64), (7, 3687816)),
        ((3, 3), (7, 36 + 36 + 12 + 4 + 3145856 + 4 + 132224)),
        # blind132/eb02 (SOAP's power-iteration refreshes)
        ((1, 1), (7, 3278100)),
        ((512, 512), (7, 7146632)),
        ((2048, 2048), (7, 47260808)),
        # blind169/fm05 (svd_lowrank's range finder, q = 136)
        ((1024, 136), (7, 4507560)),
        ((256, 136), (7, 3696552)),
    ],
)
def test_qr_factors_with_geqrf_then_orgqr_as_the_h200_counted(shape, counts):
    # Q, R, tau, geqrf's info and workspace, orgqr's info and workspace (dm05, dm03; 3 x 3: blind131/ea04's
    # H200 history)
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(*shape, device="cuda")
        _, got = counted(lambda: torch.linalg.qr(a))
        assert got == counts
    assert not cap.unmeasured


def test_qr_of_a_batch_of_small_matrices_takes_cublas_batched_geqrf():
    # blind271 probing (AlphaFold-style random frames: 768 3 x 3 matrices): `geqrf_kernel` takes
    # `geqrf_batched_cublas` for at most 256 rows and at least max(2, m / 16) matrices, whose
    # `apply_geqrf_batched` makes `get_device_pointers` of the matrices, then of tau (an int64
    # `arange`, 8 bytes a matrix each) for geqrfBatched; orgqr stays cuSOLVER's loop
    # (cuda/linalg/BatchLinearAlgebra.cpp, BatchLinearAlgebraLibBlas.cpp)
    with vramscope.capture(gpu="h200") as cap:
        torch.empty(8, 8, device="cuda") @ torch.empty(8, 8, device="cuda")  # the cuBLAS handle's workspace
        a = torch.empty(768, 3, 3, device="cuda")
        _, got = counted(lambda: torch.linalg.qr(a))
        q_r_tau = 2 * 768 * 9 * 4 + 768 * 3 * 4
        assert got == (5 + 1 + 768, q_r_tau + 2 * 768 * 8 + 4 + 768 * 132224)
    assert not cap.unmeasured


F64 = torch.float64


@pytest.mark.parametrize(
    "op, a_shape, b_shape, dtype, counts",
    [
        # blind48/av01: one matrix, B square (the looped getrf, lu_solve's triangular route)
        ("solve", (24, 24), (24, 24), torch.float32, (13, 8388)),
        ("solve", (48, 48), (48, 48), torch.float32, (13, 30308)),
        ("inv", (24, 24), None, torch.float32, (13, 8388)),
        ("inv", (48, 48), None, torch.float32, (13, 30308)),
        ("inv", (12, 12), None, torch.float32, (7, 1988)),
        # blind117/dm06: the Gram of 2,049 rows against 200 columns
        ("solve", (2049, 2049), (2049, 200), torch.float32, (9, 20185188)),
        # blind117/dm04: 2,048 matrices (cuBLAS's getrfBatched and its pointer array)
        ("solve", (2048, 12, 12), (2048, 12, 24), F64, (14, 12378304)),
        ("inv", (2048, 24, 24), None, F64, (13, 29368704)),
        # blind101/cw07: slices of (96, 6, 6) against a column
        ("solve", (96, 3, 3), (96, 3, 1), torch.float32, (7, 8448)),
    ],
)
def test_solve_and_inv_allocate_as_the_h200_counted(op, a_shape, b_shape, dtype, counts):
    # the H200's per-op records (fixtures/run/truth_blind{48,101,117}_h200.tar.xz), outputs
    # included, the cuBLAS handle already made: lu_solve takes the non-adjoint route (the inverse
    # permutation and P^T B) for a contiguous A too
    with vramscope.capture(gpu="h200") as cap:
        torch.mm(torch.empty(8, 8, device="cuda"), torch.empty(8, 8, device="cuda"))
        if a_shape == (96, 3, 3):
            a = torch.empty(96, 6, 6, device="cuda")[:, :3, :3]
            b = torch.empty(96, 6, device="cuda")[:, :3].unsqueeze(-1)
        else:
            a = torch.empty(*a_shape, device="cuda", dtype=dtype)
            b = torch.empty(*b_shape, device="cuda", dtype=dtype) if b_shape else None
        if op == "solve":
            _, got = counted(lambda: torch.ops.aten._linalg_solve_ex(a, b))
        else:
            _, got = counted(lambda: torch.linalg.inv_ex(a))
        assert got == counts
    assert not cap.unmeasured


@pytest.mark.parametrize(
    "n, counts",
    [
        (2048, (6, 85066642)),  # blind117/dm02 (Shampoo)
        # blind132/eb02 (SOAP's eigenbases): syevd of 1 and 768 rows, syevj of 100 and 197
        (1, (6, 265510)),
        (768, (6, 12321682)),
        (100, (6, 101558)),
        (197, (6, 345634)),
    ],
)
def test_eigh_takes_the_syevd_or_syevj_workspace_the_h200_counted(n, counts):
    # vectors, values, info, the workspace, check_errors' two bytes (per-op records)
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(n, n, device="cuda")
        _, got = counted(lambda: torch.linalg.eigh(a))
        assert got == counts
    assert not cap.unmeasured


@pytest.mark.parametrize(
    ("batch", "dtype", "work"),
    [
        (2048, torch.complex128, 2_574_910_080),
        (512, torch.complex128, 643_728_000),
        (2048, torch.float64, 1_287_455_104),
        (2048, torch.complex64, 1_287_455_104),
        (1, torch.complex128, 1_258_160),  # one matrix: syevd
    ],
)
def test_eigh_of_small_matrices_takes_the_workspace_the_h100_measured(batch, dtype, work):
    # kx69_blind309_workspaces_probe's H100 events: vectors, values, infos, syevjBatched's one
    # workspace for the batch (syevd's for one matrix), check_errors' byte(s)
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(batch, 16, 16, device="cuda", dtype=dtype)
        _, counts = counted(lambda: torch.linalg.eigh(a))
        size = a.element_size()
        outputs = batch * 256 * size + batch * 16 * size // (2 if dtype.is_complex else 1)
        checks = 1 if batch > 1 else 2
        assert counts == (4 + checks, outputs + batch * 4 + work + checks)
    assert not cap.unmeasured


@pytest.mark.parametrize(
    ("batch", "dtype", "work"),
    [
        (8192, torch.float32, 2_223_898_880),
        (1024, torch.float32, 277_987_584),
        (8192, torch.float64, 4_447_797_632),  # lk70_blind322_fft_probe
    ],
)
def test_eigh_of_3_by_3_batches_takes_the_workspace_the_h100_measured(batch, dtype, work):
    # lk70_blind322_workspaces_probe's H100 events (blind322/lk04's point normals): vectors, values,
    # infos, the batched solver's one workspace, check_errors' byte
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(batch, 3, 3, device="cuda", dtype=dtype)
        _, counts = counted(lambda: torch.linalg.eigh(a))
        assert counts == (5, batch * (9 + 3) * a.element_size() + batch * 4 + work + 1)
    assert not cap.unmeasured


_LU72 = "lu72_blind332_eigh_batched_workspace_probe_h100.txt"


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((48, 257, 4, 4), torch.complex64), ((2, 4, 4), torch.complex64), ((4096, 4, 4), torch.complex64)]
    + [((1024, n, n), torch.complex64) for n in (2, 3, 4, 8, 32)]
    + [((1024, 4, 4), dt) for dt in (torch.float32, torch.float64, torch.complex128)],
)
def test_batched_eigh_takes_the_workspace_of_the_h100s_lu72_lines(shape, dtype):
    # lu72_blind332_eigh_batched_workspace_probe's H100 events (blind332/lu04's 12,336 4 x 4 complex64
    # noise covariances and the grid around them): vectors, values, infos, the batched solver's one
    # workspace, check_errors' byte
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(*shape, device="cuda", dtype=dtype)
        _, counts = counted(lambda: torch.linalg.eigh(a))
        allocs = [n for action, n in probe_events(_LU72, f"eigh {shape} {dtype}") if action == "alloc"]
        assert counts == (len(allocs), sum(allocs))
    assert not cap.unmeasured


def test_batched_eigh_past_the_measured_workspaces_is_named_unmeasured():
    # lk70's 65,536 3 x 3 float32 (4.45e9 workspace elements) raised CUSOLVER_STATUS_INTERNAL_ERROR on
    # the H100; past 2^31 elements the closed form is not taken
    with vramscope.capture(gpu="h100") as cap:
        torch.linalg.eigh(torch.empty(65536, 3, 3, device="cuda"))
    assert any("syevjBatched" in k for k in cap.unmeasured)


_LK70 = "lk70_blind322_workspaces_probe_h100.txt"
_LP71 = "lp71_blind327_svd_lowrank_qr_workspaces_probe_h100.txt"


@pytest.mark.parametrize(
    "probe, shape",
    [(_LK70, s) for s in [(1000000, 16), (64, 16), (1000000, 8), (250000, 16), (64, 8)]]
    + [(_LP71, s) for s in [(3072, 64), (3072, 32), (3072, 128), (6144, 64), (12288, 64)]],
)
def test_qr_of_svd_lowrank_range_finders_takes_the_h100s_workspaces(probe, shape):
    # the probes' H100 events (blind322/lk01's svd_lowrank, q 16; blind327/lp01's LoRA-GA
    # svd_lowrank, q 64): Q, R, tau, geqrf's info and its 3,145,856-byte workspace, orgqr's info and
    # workspace, in that order
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(*shape, device="cuda")
        torch.cuda.synchronize()
        _, counts = counted(lambda: torch.linalg.qr(a))
        gpu = probe_events(probe, f"qr {shape} float32")
        allocs = [n for action, n in gpu if action == "alloc"]
        assert counts == (len(allocs), sum(allocs))
    assert not cap.unmeasured


def test_cholesky_inverse_and_lu_factor_of_one_matrix():
    # dm06 (K-FAC): the result, the factor's column-major clone and potrs' info; LU, pivots, info
    # and getrf's workspace
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(2048, 2048, device="cuda")
        _, counts = counted(lambda: torch.cholesky_inverse(a))
        assert counts == (3, 33554436)
        _, counts = counted(lambda: torch.linalg.lu_factor_ex(a))
        assert counts == (4, 16837892)
    assert not cap.unmeasured


def test_lstsq_gels_and_pinv_of_a_tall_matrix():
    # dm06's readout: 16,384 x 2,049 float32 against 200 right-hand sides
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(16384, 2049, device="cuda")
        b = torch.empty(16384, 200, device="cuda")
        torch.mm(b[:8], b[:8].T)  # the cuBLAS handle's workspace, there before dm06's readout
        res, counts = counted(lambda: torch.linalg.lstsq(a, b, driver="gels"))
        assert res.solution.shape == (2049, 200) and res.residuals.shape == (200,)
        assert counts == (11, 318025650)
        del res
        p, counts = counted(lambda: torch.linalg.pinv(a))
        assert p.shape == (2049, 16384) and counts == (18, 608794047)
    assert not cap.unmeasured


def test_lstsq_of_a_driver_other_than_gels_raises_on_cuda():
    # `get_default_lstsq_driver` (BatchLinearAlgebra.cpp) takes only gels on CUDA (PyTorch's
    # test_linalg `test_linalg_lstsq_input_checks`): the twin ran gelsd on the host and went on
    with vramscope.capture(gpu="h100") as cap:
        a, b = torch.randn(50, 10, device="cuda"), torch.randn(50, 3, device="cuda")
        for driver in ("gelsd", "gelsy", "gelss", "fictitious"):
            with pytest.raises(RuntimeError, match="`driver` other than `gels` is not supported on CUDA"):
                torch.linalg.lstsq(a, b, driver=driver)
        assert torch.linalg.lstsq(a, b, driver="GELS").solution.shape == (10, 3)
        assert not any("no meta kernel" in u for u in cap.unmeasured)  # the rule, lower-cased too
        assert torch.linalg.lstsq(a[:5], b[:5]).solution.shape == (10, 3)


def test_pinv_frees_its_locals_as_cpp_destroys_them():
    # dm06's H200 history of pinv(16,384 x 2,049 float32): after the product, V * S_pinv, then
    # S_pseudoinv, tol, the svd's U, S, Vh and get_atol_rtol's atol, rtol
    with vramscope.capture(gpu="h200"):
        a = torch.empty(16384, 2049, device="cuda")
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        p = torch.linalg.pinv(a)
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        frees = [e["size"] for e in trace if e["action"] == "free_requested"]
        assert p.shape == (2049, 16384)
        assert frees[-8:] == [16793604, 8196, 8, 134283264, 8196, 16793604, 8, 8]


def test_svd_drivers_gesvd_gesvda_and_gesvdj_batched():
    # dm03: driver="gesvd" of 768 x 768 (full), svdvals by gesvda of 256 x 512 x 16, the
    # default driver of 4,096 matrices of 32 x 32 (gesvdjBatched)
    with vramscope.capture(gpu="h200") as cap:
        a = torch.empty(768, 768, device="cuda")
        _, counts = counted(lambda: torch.linalg.svd(a, full_matrices=True, driver="gesvd"))
        assert counts == (10, 17583110)
        t = torch.empty(256, 512, 16, device="cuda")
        _, counts = counted(lambda: torch.linalg.svdvals(t, driver="gesvda"))
        assert counts == (7, 51233793)
        s = torch.empty(4096, 32, 32, device="cuda")
        _, counts = counted(lambda: torch.linalg.svd(s, driver="gesvdj"))
        assert counts == (7, 50876289)
    assert not cap.unmeasured


def test_sort_of_a_non_contiguous_long_row_copies_it_dim_last():
    # blind118/dn03's torch.quantile: sort of (1, 64, 65536) whose last dim has stride 64: values,
    # indices, the input's dense copy, the values and indices temporaries, then the segmented sort
    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(65536, 64, device="cuda").T.unsqueeze(0)
        _, counts = counted(lambda: torch.sort(x, dim=-1))
        assert counts == (10, 253215742)
    assert not any("sort" in u for u in cap.unmeasured)


def test_sort_of_several_million_long_rows_sorts_one_row_at_a_time():
    # blind118/dn04's H200 per-op record: sort of (64, 1000000) fp16 descending, `nsort >= 1000000`
    # (SortStable.cu `segmented_sort_large_segments`): the values and indices, the int64 0..n row,
    # then one `radix_sort_pairs` storage per row (67 allocations, 1,299,968,448 bytes)
    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(64, 1_000_000, device="cuda", dtype=torch.float16)
        _, counts = counted(lambda: torch.sort(x, dim=-1, descending=True))
        assert counts == (67, 1_299_968_448)
    assert not any("sort" in u for u in cap.unmeasured)


def test_median_of_all_elements_sorts_them_then_picks_by_where():
    # blind111/dg06's H200 per-op record of `scores.median()` over (4, 100) float32: the sort's
    # values, indices and index row, `isnan`'s bool and `where`'s result (5 allocations, 8,005 bytes)
    with vramscope.capture(gpu="h200"):
        x = torch.empty(4, 100, device="cuda")
        m, counts = counted(lambda: x.median())
        assert m.shape == () and counts == (5, 8005)
        assert torch.cuda.memory_allocated() == 2048 + 512  # the input and the 0-dim result


def test_max_of_a_non_contiguous_tensor_reduces_its_contiguous_copy():
    # dm06: `(sol2 - sol).abs().max()` of a column-major 2,049 x 200 float32: the result, the
    # contiguous copy, the reduction's buffer and semaphores (4 allocations, 1,639,412 bytes)
    with vramscope.capture(gpu="h200"):
        x = torch.empty(200, 2049, device="cuda").T
        _, counts = counted(lambda: x.max())
        assert counts == (4, 1639412)
        _, counts = counted(lambda: x.T.max())
        assert counts == (3, 212)


# cuSOLVER's workspaces swept on an H200 (validation/run/cusolver_sweep.py): each call's allocations
# in order, fixtures/run/cusolver_sweep_h200.jsonl.xz
SWEEP = [json.loads(line) for line in lzma.open(FIXTURES / "run" / "cusolver_sweep_h200.jsonl.xz", "rt")]


@pytest.mark.parametrize("case", SWEEP[::10], ids=lambda c: f"{c['op']}-{c['dtype']}-{c['m']}x{c['n']}")
def test_qr_eigh_and_lu_factor_allocate_as_the_h200_sweep_counted(case):
    # one matrix (the cuBLAS handle already made): outputs, infos, each workspace, the checks
    allocs = [nbytes for action, nbytes in case["events"] if action == "alloc"]
    op = {"qr": torch.linalg.qr, "eigh": torch.linalg.eigh, "lu_factor": torch.linalg.lu_factor}[case["op"]]
    with vramscope.capture(gpu="h200") as cap:
        torch.mm(torch.empty(8, 8, device="cuda"), torch.empty(8, 8, device="cuda"))
        a = torch.empty(case["m"], case["n"], device="cuda", dtype=getattr(torch, case["dtype"]))
        _, got = counted(lambda: op(a))
        assert got == (len(allocs), sum(allocs))
    assert not cap.unmeasured


def test_the_sweep_s_table_agrees_with_every_workspace_read_from_histories():
    # cusolver_h200.json against the tables' entries from blind scripts' histories and per-op truth
    # (setdefault keeps those): one figure per key
    data = json.loads((ROOT / "python" / "vramscope" / "cusolver_h200.json").read_text())
    dt = {"float32": torch.float32, "float64": torch.float64}
    for m, n, d, nbytes in data["geqrf"]:
        assert _linalg.GEQRF_WORKSPACE[(m, n, dt[d])] == nbytes
    for m, n, k, d, nbytes in data["orgqr"]:
        assert _linalg.ORGQR_WORKSPACE[(m, n, k, dt[d])] == nbytes
    for routine in ("syevj", "syevd"):
        for n, d, nbytes in data[routine]:
            assert _linalg.WORKSPACE[(routine, n, dt[d])] == nbytes
    for m, n, d, nbytes in data["getrf"]:
        assert _linalg.GETRF_WORKSPACE[(m, n, dt[d])] == nbytes


def test_clamp_of_an_integral_tensor_by_a_float_scalar_converts_it_first():
    # blind163/fg02's H200 history: `mask.sum(1).clamp(min=1.0)` of 32 int64 counts makes a float
    # copy (128 bytes), then the result (128 bytes), and frees the copy
    with vramscope.capture(gpu="h200"):
        counts = torch.ones(32, 96, dtype=torch.int32, device="cuda").sum(dim=1)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out, made = counted(lambda: counts.clamp(min=1.0))
        assert out.dtype == torch.float32 and made == (2, 128 + 128)
        assert torch.cuda.max_memory_allocated() - before == 1024
        assert torch.cuda.memory_allocated() - before == 512
        # the same type (an int Scalar) or a float tensor: no copy
        _, made = counted(lambda: counts.clamp(min=1))
        assert made == (1, 256)
        _, made = counted(lambda: torch.clamp_max(out, 0.5))
        assert made == (1, 128)
        flags = counts.bool()
        _, made = counted(lambda: torch.clamp_min(flags, 0.5))
        assert made == (2, 32 * 4 + 32 * 4)


def test_small_batched_qr_svd_det_allocate_as_the_h100_recorded(capsys):
    # rp61_small_batched_linalg_probe_s61 on an H100 (fixtures/run/probes): every allocation of QR of
    # (768, 3, 3) and (64, 3, 3) (cuBLAS's batched geqrf, then orgqr's cuSOLVER loop: one 132,224-byte
    # workspace a matrix), gesvdjBatched's SVDs with their 3,968 / 7,936-byte workspaces, and det
    import runpy

    probe = ROOT / "validation" / "run" / "probes" / "rp61_small_batched_linalg_probe_s61.py"
    gpu = (FIXTURES / "run" / "probes" / "rp61_small_batched_linalg_probe_s61_h100.txt").read_text()
    with vramscope.capture(gpu="h100") as cap:
        runpy.run_path(str(probe), run_name="__main__")
        torch.cuda.memory._record_memory_history(enabled=None)
    assert capsys.readouterr().out.splitlines() == gpu.splitlines()
    assert not cap.unmeasured


def _events_of(line):
    """(peak_above, events) of one line of pt61_linalg_workspace_probe's output."""
    _, rest = line.split(": peak_above ")
    peak, events = rest.split(" events ")
    return int(peak), events.split()


def test_eig_lstsq_complex_solve_and_qr_outs_allocate_as_the_h100_recorded(capsys):
    # pt61_linalg_workspace_probe on an H100 (fixtures/run/probes): blind272/jm05's linalg.eig
    # (Xgeev's 273,408-byte workspace once for 1 or 512 matrices of 32 x 32 float64), lstsq of
    # 32,768 x 32 (ormqr's 76,163,328 bytes, the batched trsm's pointers) and batched (512, 64, 32)
    # (gels_batched_cublas), complex128 solves (getrf's 768 bytes), jm03's `linalg_qr` outs
    import runpy

    probe = ROOT / "validation" / "run" / "probes" / "pt61_linalg_workspace_probe.py"
    gpu = (FIXTURES / "run" / "probes" / "pt61_linalg_workspace_probe_h100.txt").read_text().splitlines()
    with vramscope.capture(gpu="h100") as cap:
        runpy.run_path(str(probe), run_name="__main__")
        torch.cuda.memory._record_memory_history(enabled=None)
    twin = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in twin] == [line.split(":")[0] for line in gpu]
    for ours, theirs in zip(twin, gpu, strict=True):
        if theirs.startswith("eigvals"):
            # outside inference mode the twin's tensors are subclass-like to `linalg_eigvals`'
            # `_may_require_fw_or_bw_grad`, so it takes `linalg_eig` (the next test: inference mode)
            continue
        if theirs.startswith("eig backward"):
            # the backward's composite ops in another order, the same peak
            assert _events_of(ours)[0] == _events_of(theirs)[0]
            continue
        assert ours == theirs
    assert not cap.unmeasured


def test_float32_lstsq_gels_workspaces_allocate_as_the_h100_recorded(capsys):
    # le70_blind316_lstsq_workspaces_probe on an H100 (fixtures/run/probes): blind316/le04's lstsq of
    # 32,768 x 65 float32 with 32 right-hand sides and a grid in n and nrhs (geqrf's and ormqr's
    # workspaces, every allocation of the call)
    import runpy

    probe = ROOT / "validation" / "run" / "probes" / "le70_blind316_lstsq_workspaces_probe.py"
    gpu = (FIXTURES / "run" / "probes" / "le70_blind316_lstsq_workspaces_probe_h100.txt").read_text()
    with vramscope.capture(gpu="h100") as cap:
        runpy.run_path(str(probe), run_name="__main__")
        torch.cuda.memory._record_memory_history(enabled=None)
    assert capsys.readouterr().out.splitlines() == gpu.splitlines()
    assert not cap.unmeasured


def test_eigvals_under_inference_mode_allocates_as_the_h100_recorded():
    gpu = (FIXTURES / "run" / "probes" / "pt61_linalg_workspace_probe_h100.txt").read_text().splitlines()
    want = [_events_of(line)[1] for line in gpu if line.startswith("eigvals")]
    got, kept = [], []
    with vramscope.capture(gpu="h100") as cap:
        for shape in ((32, 32), (512, 32, 32)):
            a = torch.empty(*shape, device="cuda", dtype=torch.float64)
            with torch.inference_mode():
                events = _history(lambda a=a: kept.append(torch.linalg.eigvals(a)))
            got.append([("+" if kind == "a" else "-") + str(size) for kind, size in events])
        assert not cap.unmeasured
    assert got == want


def test_eig_of_complex_input_is_named_unmeasured():
    with vramscope.capture(gpu="h100") as cap:
        a = torch.empty(8, 8, device="cuda", dtype=torch.complex128)
        values, vectors = torch.linalg.eig(a)
        assert values.shape == (8,) and vectors.shape == (8, 8)
        assert any(u.startswith("aten::linalg_eig of complex input") for u in cap.unmeasured)


def _sized_between_squares(trace, m, n):
    """Allocations of an m x n float64 tensor made after the second m x m one and before the first
    m x m one is freed (pinv_backward's terms at its two m x m products)."""
    square, tall = m * m * 8, m * n * 8
    squares, count = 0, 0
    for e in trace:
        if e["size"] == square and e["action"] == "alloc":
            squares += 1
        elif e["size"] == square and e["action"] == "free_requested":
            break
        elif squares == 2 and e["size"] == tall and e["action"] == "alloc":
            count += 1
    return count


@pytest.mark.parametrize("op", ["lstsq", "pinv"])
def test_pinv_backward_sums_its_terms_out_of_place(op):
    # pinv_backward (FunctionsManual.cpp, m > n), which lstsq's backward calls: after the second
    # m x m product, `(...) pinvA^H`, `K pinvA`, then neg, add, add, sub, each a new A-sized tensor
    # to the end of the expression (blind272/jm05's H100 history of 32,768 x 32 float64: six at
    # the peak). The second add was taken for the engine's in-place sum: five, 8 MiB under there
    with vramscope.capture(gpu="h100"):
        a = torch.empty(4096, 32, device="cuda", dtype=torch.float64, requires_grad=True)
        b = torch.empty(4096, 32, device="cuda", dtype=torch.float64)
        out = torch.linalg.lstsq(a, b).solution if op == "lstsq" else torch.linalg.pinv(a)
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        out.sum().backward()
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        assert _sized_between_squares(trace, 4096, 32) == 6


def test_ldl_solve_copies_the_pivots_to_int64_and_ldl_factor_names_its_sytrf_workspace():
    # blind280/ju02 probing: both ops had no rule ("outputs counted, scratch not").
    # `apply_ldl_solve_cusolver` (cuda/linalg/BatchLinearAlgebraLib.cpp) makes `pivots.to(kLong)`
    # and a one-element int32 `zeros` for the info; LD from `ldl_factor_ex` is column-major, so
    # `linalg_ldl_solve_out` borrows it; a row-major LD is cloned column-major first
    batch, n = 8, 96
    with vramscope.capture(gpu="h100") as cap:
        a = torch.randn(batch, n, n, device="cuda")
        a = a + a.mT
        ld, piv, _info = torch.linalg.ldl_factor_ex(a)
        assert any("sytrf workspace (96 x 96" in u for u in cap.unmeasured)  # n 96 not measured
        b = torch.randn(batch, n, 1, device="cuda")
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        x = torch.linalg.ldl_solve(ld, piv, b)
        out = batch * n * 4
        assert torch.cuda.memory_allocated() - base == 512 * -(-out // 512)
        pivots64 = 512 * -(-(batch * n * 8) // 512)
        assert torch.cuda.max_memory_allocated() - base == 512 * -(-out // 512) + pivots64 + 512
        del x
        ld_rows = ld.contiguous()  # row-major batches: cloned column-major inside the solve
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.linalg.ldl_solve(ld_rows, piv, b)
        assert (
            torch.cuda.max_memory_allocated() - base
            == 512 * -(-out // 512) + batch * n * n * 4 + pivots64 + 512
        )


def test_ldl_factor_and_solve_scratch_is_the_h100s():
    # pt63's probe on the H100 (session 64, validation/run/probes/pt63_ldl_and_bsr_mm_scratch_probe.py,
    # "peak - after" and "after - before" of each call): sytrf's one workspace per call, whatever the
    # batch; sytrs takes no device workspace (LAPACK's ?sytrs has no work array), so the solve's
    # scratch is the int64 pivots and the info alone. No unmeasured note for these problems.
    factor = [  # dtype, n, batch, after - before, peak - after
        (torch.float32, 64, 1, 17_408, 98_816),
        (torch.float32, 320, 512, 210_372_608, 98_816),
        (torch.float32, 1024, 8, 33_587_712, 262_656),
        (torch.float64, 64, 8, 264_704, 107_008),
        (torch.float64, 320, 1, 821_248, 164_352),
        (torch.float64, 1024, 1, 8_393_216, 524_800),
    ]
    solve = {  # (dtype, n, batch): after - before, peak - after of ldl_solve with one column
        (torch.float32, 64, 1): (512, 1_024),
        (torch.float32, 320, 512): (655_360, 1_311_232),
        (torch.float64, 64, 8): (4_096, 4_608),
        (torch.float64, 1024, 1): (8_192, 8_704),
    }
    with vramscope.capture(gpu="h100") as cap:
        for dtype, n, batch, delta, scratch in factor:
            a = torch.randn(batch, n, n, device="cuda", dtype=dtype)
            a = a + a.mT
            rhs = torch.randn(batch, n, 1, device="cuda", dtype=dtype)
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            ld, piv, info = torch.linalg.ldl_factor_ex(a)
            after = torch.cuda.memory_allocated()
            assert (after - before, torch.cuda.max_memory_allocated() - after) == (delta, scratch)
            if solve.get((dtype, n, batch)):
                torch.cuda.reset_peak_memory_stats()
                x = torch.linalg.ldl_solve(ld, piv, rhs)
                done = torch.cuda.memory_allocated()
                assert (done - after, torch.cuda.max_memory_allocated() - done) == solve[dtype, n, batch]
                del x
            del a, rhs, ld, piv, info
        assert not [u for u in cap.unmeasured if "sytr" in u], cap.unmeasured


def test_svdvals_of_complex64_matrices_takes_gesvdj_s_workspace_in_elements():
    # kx69_blind309_workspaces_probe: 512 complex64 16 x 256 matrices take gesvdj's lwork of
    # float32 (790,592 elements) at 8 bytes an element
    with vramscope.capture(gpu="h100") as cap:
        x = torch.empty(512, 16, 256, device="cuda", dtype=torch.complex64)
        out = []
        got = _history(lambda: out.append(torch.linalg.svdvals(x)))
        want = probe_events(
            "kx69_blind309_workspaces_probe_h100.txt", "svdvals (512, 16, 256) torch.complex64"
        )
        assert got == [(action[0], size) for action, size in want]
    assert not cap.unmeasured
