"""Sparse COO tensors on the simulated device, against the H200's memory histories
(fixtures/run/sparse/sparse_probe_h200.json)."""

from __future__ import annotations

import json

import pytest
import torch
import vramscope
from conftest import FIXTURES, ROOT, probe_events, run_script
from vramscope import _sparse

PROBE = json.loads((FIXTURES / "run" / "sparse" / "sparse_probe_h200.json").read_text())
DENSE_CSR = json.loads((FIXTURES / "run" / "sparse" / "dense_csr_h200.json").read_text())
R, D = 1_000_000, 128


def _cases(name):
    return [c for c in PROBE["cases"] if c["name"] == name]


def _allocs(case):
    return [e["size"] for e in case["events"] if e["a"] == "alloc"]


def _sequence(case):
    return [(e["a"], e["size"]) for e in case["events"] if e["a"] in ("alloc", "free_requested")]


def test_thrust_scratch_in_coalesce_is_cubs():
    cases = _cases("coalesce") + _cases("coalesce_2d")
    assert len(cases) == 6
    for c in cases:
        n = c["n"]
        allocs = _allocs(c)
        assert allocs[:3] == [8 * n] * 3
        assert allocs[3] == _sparse.merge_sort_pairs_bytes(n), n
        assert allocs[4] == _sparse.unique_by_key_bytes(n), n


def _history(fn):
    """The twin's allocator events of `fn` (alloc and free, sizes as requested)."""
    torch.cuda.memory._record_memory_history(max_entries=10_000)
    before = len(torch.cuda.memory._snapshot()["device_traces"][0])
    out = fn()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
    torch.cuda.memory._record_memory_history(enabled=None)
    return out, [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]


@pytest.mark.parametrize("n", [100, 4097, 65536])
def test_sparse_ops_allocate_in_the_h200s_order(n):
    gpu = {c["name"]: c for c in PROBE["cases"] if c["n"] == n}
    nnz = gpu["sparse_mask_coalesced"]["nnz"]
    # indices with the GPU's count of distinct rows, copied from the host (so the twin knows them)
    host = torch.cat([torch.arange(nnz), torch.zeros(n - nnz, dtype=torch.long)]) * 7
    with vramscope.capture(gpu="h200"):
        idx = host.reshape(1, n).cuda()
        s = torch.sparse_coo_tensor(idx, torch.empty(n, D, device="cuda"), (R, D))
        c, got = _history(s.coalesce)
        assert c.is_sparse and c.is_cuda and c._nnz() == nnz and c.is_coalesced()
        assert got == _sequence(gpu["coalesce"])
        dense = torch.zeros(R, D, device="cuda")
        m, got = _history(lambda: dense.sparse_mask(c))
        assert m._values().shape == (nnz, D)
        assert got == _sequence(gpu["sparse_mask_coalesced"])
        del m
        m, got = _history(lambda: dense.sparse_mask(s))
        assert got == _sequence(gpu["sparse_mask_uncoalesced"])
        del m
        for case, other in (("add_dense_sparse_uncoalesced", s), ("add_dense_sparse_coalesced", c)):
            _, got = _history(lambda other=other: dense.add_(other))
            assert got == _sequence(gpu[case]) == []
        _cl, got = _history(s.clone)
        assert got == _sequence(gpu["clone_sparse"])
        ss, got = _history(lambda: s + s)
        assert got == _sequence(gpu["add_sparse_sparse"])
        assert ss._nnz() == 2 * n


def test_embedding_backward_keeps_the_index_storage_and_sparse_adam_steps():
    # the H200: the first sparse gradient aliases the indices and the incoming gradient (no clone);
    # a second backward concatenates; SparseAdam coalesces, masks and adds as the GPU's step did
    first = _cases("embedding_sparse_backward_first")[0]
    again = _cases("embedding_sparse_backward_accumulate")[0]
    with vramscope.capture(gpu="h200"):
        emb = torch.nn.Embedding(R, D, sparse=True).to("cuda")
        ids = torch.randint(0, R, (2048, 256), device="cuda")
        bwd = lambda: emb(ids).mean(1).sum().backward()  # noqa: E731
        _, got = _history(bwd)
        assert [a for a in got if a[0] == "alloc"] == [a for a in _sequence(first) if a[0] == "alloc"]
        grad = emb.weight.grad
        assert grad.is_sparse and grad.device == torch.device("cuda", 0)
        assert grad._indices().untyped_storage()._cdata == ids.untyped_storage()._cdata
        _, got = _history(bwd)
        assert [a for a in got if a[0] == "alloc"] == [a for a in _sequence(again) if a[0] == "alloc"]
        assert emb.weight.grad._nnz() == 2 * ids.numel()
        opt = torch.optim.SparseAdam([emb.weight], lr=1e-3)
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert len(opt.state[emb.weight]) == 3


def test_blind16_p04_sparse_adam_matches_the_h200():
    # the unmodified script: its randint indices carry host-drawn values, so coalesce keeps a
    # distinct count of the GPU's distribution (407,588 there in step 0; any count from 407,553 to
    # 409,600 fills the same 209,715,200-byte blocks); every phase as the H200 recorded it
    gpu = [
        json.loads(line)
        for line in (FIXTURES / "run" / "run_blind16_h200.jsonl").read_text().splitlines()
        if '"p04_sparse_embedding_sparse_adam"' in line
    ]
    script = FIXTURES.parent / "validation" / "run" / "blind16" / "p04_sparse_embedding_sparse_adam.py"
    status, _lines, report, err = run_script(script, extra=("--gpu", "h200"))
    assert status == 0 and report is not None, err
    assert [p["name"] for p in report["phases"]] == [g["phase"] for g in gpu]
    for p, g in zip(report["phases"], gpu, strict=True):
        for k in ("allocated", "peak_allocated", "reserved", "peak_reserved", "requested"):
            assert p[k] == g[k], (g["phase"], k)


def test_a_zeroed_sparse_gradient_accumulates_the_next_one():
    # zero_grad(set_to_none=False): `zero_sparse_` empties the gradient in place (no allocation);
    # the next backward's sum concatenates onto it; SGD adds the sparse gradient into the weight
    with vramscope.capture(gpu="h200") as cap:
        emb = torch.nn.Embedding(1000, 16, sparse=True).cuda()
        opt = torch.optim.SparseAdam(list(emb.parameters()))
        ids = torch.randint(0, 1000, (32, 20), device="cuda")
        emb(ids).sum().backward()
        opt.step()
        before = torch.cuda.memory_allocated()
        opt.zero_grad(set_to_none=False)
        grad = emb.weight.grad
        assert grad.is_sparse and grad._nnz() == 0
        assert torch.cuda.memory_allocated() < before
        emb(ids).sum().backward()
        assert emb.weight.grad is grad and grad._nnz() == ids.numel()
        torch.optim.SGD(emb.parameters(), lr=0.1).step()
    assert not cap.unmeasured


SPMM = json.loads((FIXTURES / "run" / "linalg_sparse" / "linalg_sparse_probe_h200.json").read_text())


def _spmm_sequence(case):
    return [({"a": "alloc", "f": "free_requested"}[e["a"]], e["size"]) for e in case["events"]]


def _distinct_pairs(nnz, m, duplicates=0):
    """nnz index pairs of an m-row matrix, `duplicates` of them repeated (host values the twin carries)."""
    lin = torch.arange(nnz - duplicates)
    lin = torch.cat([lin, lin[:duplicates]])
    return torch.stack([lin % m, lin // m])


def test_spmm_buffer_follows_the_h200_sweep():
    cases = [c for c in SPMM["cases"] if c["name"].startswith("sparse_mm")]
    assert len(cases) == 24
    for c in cases:
        got = [e["size"] for e in c["events"] if e["a"] == "a" and any("csrmm2" in f for f in e["f"])]
        want = _sparse.spmm_buffer_bytes(c["nnz"], c["n"])
        assert got == ([want] if c["n"] >= 2 else [107]), c


@pytest.mark.parametrize("index", [0, 1, 6, 16, 18, 20, 21])
def test_sparse_mm_allocates_in_the_h200s_order(index):
    gpu = [c for c in SPMM["cases"] if c["name"] == "sparse_mm"][index]
    m, k, n, nnz = gpu["m"], gpu["k"], gpu["n"], gpu["nnz"]
    dtype = getattr(torch, gpu["dtype"].removeprefix("torch."))
    coalesced = gpu["coalesced"]
    # the uncoalesced case: 100,000 entries of which the GPU's coalesce kept 99,948
    idx = _distinct_pairs(100_000, m, 52) if not coalesced else _distinct_pairs(nnz, m)
    with vramscope.capture(gpu="h200") as cap:
        s = torch.sparse_coo_tensor(idx.cuda(), torch.empty(idx.shape[1], device="cuda", dtype=dtype), (m, k))
        if coalesced:
            s = s.coalesce()
        if gpu["layout"] == "row":
            d = torch.empty(k, n, device="cuda", dtype=dtype)
        elif gpu["layout"] == "col":
            d = torch.empty(n, k, device="cuda", dtype=dtype).t()
        else:
            d = torch.empty(k, 2 * n, device="cuda", dtype=dtype)[:, :n]
        out, got = _history(lambda: torch.sparse.mm(s, d))
        assert out.shape == (m, n) and not out.is_sparse
        assert got == _spmm_sequence(gpu)
        assert not cap.unmeasured


def test_sparse_mm_backward_transposes_and_coalesces_the_matrix():
    fwd, bwd = (
        next(c for c in SPMM["cases"] if c["name"] == name)
        for name in ("sparse_mm_forward", "sparse_mm_backward")
    )
    m, nnz, n = fwd["m"], fwd["nnz"], fwd["n"]
    with vramscope.capture(gpu="h200"):
        adj = torch.sparse_coo_tensor(_distinct_pairs(nnz, m).cuda(), torch.empty(nnz, device="cuda"), (m, m))
        adj = adj.coalesce()
        x = torch.empty(m, 32, device="cuda")
        lin = torch.nn.Linear(32, n).to("cuda")
        lin(x).sum().backward()  # the handles and workspaces of both threads first
        lin.zero_grad(set_to_none=True)
        y, got = _history(lambda: torch.sparse.mm(adj, lin(x)))
        # the GPU's forward less the Linear's cuBLASLt workspace (made earlier here)
        assert got == [s for s in _spmm_sequence(fwd) if s[1] != 1048576]
        _, got = _history(lambda: y.sum().backward())
        # the backward: sum's scratch, the ones, S.t() (clone, swap row), the product with the
        # transposed S coalesced, then the Linear's gradients
        assert got == _spmm_sequence(bwd)


def test_sparse_transpose_swaps_the_known_indices():
    with vramscope.capture(gpu="h200"):
        idx = torch.tensor([[0, 1, 2], [5, 3, 4]])
        s = torch.sparse_coo_tensor(idx.cuda(), torch.empty(3, device="cuda"), (3, 6)).coalesce()
        t, got = _history(lambda: s.t())
        # the clone (values, indices), the transpose's swap row (freed)
        assert got == [("alloc", 12), ("alloc", 48), ("alloc", 24), ("free_requested", 24)]
        assert t.shape == (6, 3) and not t.is_coalesced()
        c = t.coalesce()
        assert c._nnz() == 3 and c._indices().cpu().tolist() == [[3, 4, 5], [1, 2, 0]]


def test_a_one_column_product_names_its_buffer_unmeasured():
    with vramscope.capture(gpu="h200") as cap:
        s = torch.sparse_coo_tensor(
            _distinct_pairs(1000, 100).cuda(), torch.empty(1000, device="cuda"), (100, 100)
        )
        out = torch.sparse.mm(s.coalesce(), torch.empty(100, 1, device="cuda"))
        assert out.shape == (100, 1)
        assert any(
            k.startswith("cuSPARSE SpMM's buffer (100 x 100, 1000 entries, 1 columns") for k in cap.unmeasured
        )


CSR = json.loads((FIXTURES / "run" / "sparse" / "csr_ck06_h200.json").read_text())


def _csr_events(name):
    return [("alloc" if a == "alloc" else "free_requested", size) for a, size in CSR[name]["events"]]


def test_csr_conversion_and_products_allocate_as_on_the_h200():
    # blind89/ck06's memory history: a 1,500 x 1,500 grid's 5-point Laplacian (2,250,000 rows,
    # 11,244,000 entries, float64, int64 indices) converted from a coalesced COO matrix, then
    # multiplied by a vector 300 times (cuSPARSE SpMV) and by 8 columns 200 times (SpMM)
    m, nnz = 1500 * 1500, 11_244_000
    assert CSR["mv"]["same"] == CSR["mv"]["calls"] == 300
    assert CSR["mm"]["same"] == CSR["mm"]["calls"] == 200
    with vramscope.capture(gpu="h200") as cap:
        idx = torch.empty(2, nnz, dtype=torch.long, device="cuda")
        values = torch.empty(nnz, dtype=torch.float64, device="cuda")
        coo = torch.sparse_coo_tensor(idx, values, (m, m), is_coalesced=True)
        a, got = _history(coo.to_sparse_csr)
        assert a.layout is torch.sparse_csr and a.is_cuda and a.values().numel() == nnz
        assert got == _csr_events("to_sparse_csr")
        held = torch.cuda.memory_allocated()
        del coo, idx, values  # the column indices are a row of the COO indices' storage
        assert torch.cuda.memory_allocated() == held
        v = torch.empty(m, dtype=torch.float64, device="cuda")
        y, got = _history(lambda a=a: a @ v)
        assert y.shape == (m,) and got == _csr_events("mv")
        b = torch.empty(m, 8, dtype=torch.float64, device="cuda")
        y, got = _history(lambda a=a: a @ b)
        assert y.shape == (m, 8) and got == _csr_events("mm")
        assert not cap.unmeasured
        del a, y
        assert torch.cuda.memory_stats()["requested_bytes.all.current"] == (8 + 1) * m * 8  # b and v


def test_csr_products_outside_the_measured_problem_name_the_buffer_unmeasured():
    with vramscope.capture(gpu="h200") as cap:
        idx = torch.tensor([[0, 0, 1, 2], [0, 2, 1, 0]])
        a = torch.sparse_coo_tensor(idx.cuda(), torch.ones(4, device="cuda"), (3, 3)).to_sparse_csr()
        assert (a @ torch.ones(3, device="cuda")).shape == (3,)
        assert (a @ torch.ones(3, 2, device="cuda")).shape == (3, 2)
    assert sorted(k.split(" (")[0] for k in cap.unmeasured) == [
        "cuSPARSE SpMM's buffer",
        "cuSPARSE SpMV's buffer",
    ]


CSC = json.loads((FIXTURES / "run" / "sparse" / "csr_cu03_h200.json").read_text())


def test_csc_product_flips_to_csr_then_multiplies_as_on_the_h200():
    # blind99/cu03's memory history: LightGCN's 100,000 x 100,000 adjacency (2,996,202 entries,
    # float32, int64 indices) by 64-wide embeddings; the backward multiplies by its transpose, a
    # CSC matrix, which `_sparse_csr_mm` converts to CSR (`sparse_compressed_to_flipped`) first
    n, nnz, w = 100_000, 2_996_202, 64
    assert CSC["mm_csc"]["same"] == CSC["mm_csc"]["calls"] == 6
    assert CSC["mm"]["same"] == CSC["mm"]["calls"] == 9
    events = {
        k: [("alloc" if a == "alloc" else "free_requested", s) for a, s in v["events"]]
        for k, v in CSC.items()
    }
    with vramscope.capture(gpu="h200") as cap:
        idx = torch.empty(2, nnz, dtype=torch.long, device="cuda")
        coo = torch.sparse_coo_tensor(idx, torch.empty(nnz, device="cuda"), (n, n), is_coalesced=True)
        a = coo.to_sparse_csr()
        x = torch.empty(n, w, device="cuda")
        y, got = _history(lambda: a @ x)
        assert y.shape == (n, w) and got == events["mm"]
        del y
        at = a.t()
        assert at.layout is torch.sparse_csc and at.is_cuda
        y, got = _history(lambda: at @ x)
        assert y.shape == (n, w) and got == events["mm_csc"]
        assert not cap.unmeasured


def test_csr_product_backward_runs_its_transpose_product():
    # `mm_mat2_backward` of a CSR matrix: `A.t().mm(grad)`, a CSC product (it stopped the twin:
    # a CSC tensor has no storage to adopt)
    with vramscope.capture(gpu="h200"):
        idx = torch.tensor([[0, 0, 1, 2], [0, 2, 1, 0]])
        a = torch.sparse_coo_tensor(idx.cuda(), torch.ones(4, device="cuda"), (3, 3)).to_sparse_csr()
        x = torch.ones(3, 2, device="cuda", requires_grad=True)
        (a @ x).sum().backward()
        assert x.grad.shape == (3, 2) and x.grad.is_cuda


def test_concatenated_host_indices_carry_their_values_into_coalesce():
    # blind99/cu03: an edge list copied from the host, concatenated with its reverse and stacked
    # into COO indices; `coalesce` dedups the GPU's count of distinct pairs (2,996,202 of
    # 3,000,000 there), not every entry. Past `VALUE_LIMIT` elements only the rule for values
    # carried at size keeps them through `cat` and `stack`.
    g = torch.Generator().manual_seed(0)
    n, users, items = 40_000, 3_000, 2_000
    u = torch.randint(0, users, (n,), generator=g)
    i = (u * 7 + torch.randint(0, 50, (n,), generator=g)) % items
    size = (users + items, users + items)
    with vramscope.capture(gpu="h200") as cap:
        rows = torch.cat([u.cuda(), i.cuda() + users])
        cols = torch.cat([i.cuda() + users, u.cuda()])
        s = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(2 * n, device="cuda"), size)
        c = s.coalesce()
        host = torch.stack([torch.cat([u, i + users]), torch.cat([i + users, u])])
        expected = torch.sparse_coo_tensor(host, torch.ones(2 * n), size).coalesce()
        assert c._nnz() == expected._nnz() < 2 * n
        assert not any(k.startswith("coalesce:") for k in cap.warned)


def test_a_dense_tensor_made_sparse_by_an_op_without_a_rule_stops_with_a_clear_error():
    # `to_sparse_csc` of a dense CUDA tensor: its CPU run gives a CSC tensor, whose sizes the twin
    # cannot take as a dense meta tensor's
    with vramscope.capture():
        dense = torch.randn(8, 8, device="cuda")
        with pytest.raises(
            NotImplementedError, match="vramscope: aten::_to_sparse_csc of a dense CUDA tensor"
        ):
            dense.to_sparse_csc()


def _host_matrix(rows, cols, every, dtype):
    # validation/run/csr_dense_probe.py's matrices: nonzero where (row * cols + col) % every == 0
    flat = torch.arange(rows * cols)
    return torch.where(flat % every == 0, flat % 7 + 1, 0).reshape(rows, cols).to(dtype)


@pytest.mark.parametrize("case", DENSE_CSR["cases"], ids=lambda c: c["name"])
def test_to_sparse_csr_of_a_dense_matrix_allocates_in_the_h200s_order(case):
    # `dense_to_sparse_compressed<SparseCsr>` (TensorConversions.cpp) as its parts: the mask, its
    # nonzero (column and row indices), the crow indices, the flat mask's nonzero and the values
    dtypes = {"f32": torch.float32, "f16": torch.float16, "f64": torch.float64}
    kind, shape, *rest = case["name"].split("_")
    rows, cols = map(int, shape.split("x"))
    with vramscope.capture(gpu="h200"):
        if kind == "host":
            dense = _host_matrix(rows, cols, int(rest[0].removeprefix("every")), dtypes[rest[1]]).cuda()
        else:  # drawn on the device: no values carried, every element counted as an entry
            dense = torch.randn(rows, cols, device="cuda", dtype=dtypes[rest[0]])
        csr, got = _history(dense.to_sparse_csr)
        assert csr.layout is torch.sparse_csr and csr.values().numel() == case["nnz"]
        assert got == [tuple(e) for e in case["events"]]


def test_to_sparse_of_a_dense_tensor_runs_dense_to_sparse_parts():
    # `dense_to_sparse` (SparseTensor.cpp): nonzero's (nnz, 2) int64 result, its transposed clone as
    # the indices, the values gathered and cloned; a COO tensor marked coalesced over them
    with vramscope.capture():
        dense = torch.randn(64, 64, device="cuda")
        dense[:16] = 0
        base = torch.cuda.memory_allocated()
        sparse = dense.to_sparse()
        assert sparse.layout is torch.sparse_coo and sparse.is_coalesced()
        assert sparse._nnz() == 48 * 64
        indices, values = 2 * 48 * 64 * 8, 48 * 64 * 4
        assert torch.cuda.memory_allocated() - base == indices + values
        assert torch.sparse.mm(sparse, torch.randn(64, 3, device="cuda")).shape == (64, 3)


def test_to_sparse_with_fewer_sparse_dims_or_a_csr_layout_runs_its_parts():
    # found by opinfo_sweep.py (float16): `to_sparse(1)` of a matrix (SparseTensor.cpp's
    # dense_to_sparse over one sparse dim: the distinct rows of the nonzero indices) and
    # `to_sparse(layout=torch.sparse_csr)` (to_sparse_csr's parts) stopped with the clear error
    with vramscope.capture():
        d = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, 3.0]], device="cuda")
        h = d.to_sparse(1)
        assert (h.sparse_dim(), h.dense_dim()) == (1, 1)
        assert h._indices().tolist() == [[0, 2]] and h._values().shape == (2, 3)
        c = d.to_sparse(layout=torch.sparse_csr)
        assert c.layout is torch.sparse_csr and c.values().shape == (3,)


def test_sampled_addmm_of_a_csr_matrix_runs_its_cuda_parts():
    # found by opinfo_sweep.py (GRAD=1, float32): sparse_sampled_addmm had no rule (no SparseCsrMeta
    # kernel): SparseBlas.cpp's result `empty({0, 0})` resized to C's rows + 1 compressed indices
    # and C's entries, C copied in; cuSPARSE SDDMM's buffer is named unmeasured
    with vramscope.capture():
        c = torch.eye(64, device="cuda").to_sparse_csr()
        a, b = torch.randn(64, 8, device="cuda"), torch.randn(8, 64, device="cuda")
        before = torch.cuda.memory_allocated()
        r = torch.sparse.sampled_addmm(c, a, b)
        assert r.layout is torch.sparse_csr and r.shape == (64, 64) and r.values().shape == (64,)
        # 65 int64 compressed indices (a 1,024-byte block; the first one-index block freed), 64
        # int64 column indices and 64 float32 values (512 bytes each)
        assert torch.cuda.memory_allocated() - before == 1024 + 2 * 512


def test_sparse_embedding_bag_backward_runs_its_composite():
    # EmbeddingBag.cpp: `_embedding_bag_sparse_backward` takes the bags' gradient rows by
    # `index_select(0, offset2bag)` (one allocation of indices x D), scales them by the per-sample
    # weights in place, and `embedding_sparse_backward` makes the COO gradient over the indices
    with vramscope.capture(gpu="h200"):
        bag = torch.nn.EmbeddingBag(1000, 16, mode="sum", sparse=True).cuda()
        idx = torch.randint(0, 1000, (300,), device="cuda")
        offsets = torch.arange(0, 300, 10, device="cuda")
        out = bag(idx, offsets, per_sample_weights=torch.rand(300, device="cuda"))
        seed = torch.ones_like(out)
        _, got = _history(lambda: out.backward(seed))
        grad = bag.weight.grad
        assert grad.is_sparse and grad.shape == (1000, 16) and grad._nnz() == 300
        assert grad._indices().untyped_storage()._cdata == idx.untyped_storage()._cdata
        assert [a for a in got if a[0] == "alloc"] == [("alloc", 300 * 16 * 4)]
        opt = torch.optim.SparseAdam(list(bag.parameters()))
        opt.step()
        assert len(opt.state[bag.weight]) == 3


def test_randperm_sorts_random_keys_with_an_arange_as_the_h200_did():
    # blind135/ee05's H200 history of randperm(4096) (per-op truth: 6 allocations, 157,191 bytes):
    # the output, an 8-byte empty, the arange, int32 keys and their sorted copy, CUB's radix sort
    with vramscope.capture(gpu="h200"):
        p, got = _history(lambda: torch.randperm(4096, device="cuda"))
        assert p.shape == (4096,)
    assert got == [
        ("alloc", 32768),
        ("alloc", 8),
        ("free_requested", 8),
        ("alloc", 32768),
        ("alloc", 16384),
        ("alloc", 16384),
        ("alloc", 58879),
        ("free_requested", 58879),
        ("free_requested", 16384),
        ("free_requested", 16384),
        ("free_requested", 32768),
    ]


PROBE2 = json.loads((FIXTURES / "run" / "sparse" / "sparse_probe2_h200.json").read_text())


def test_sparse_probe2_runs_as_on_the_h200(tmp_path):
    # validation/run/sparse_probe2.py under the twin against its H200 histories, case by case: COO
    # `to_dense` (zeros, then the uncoalesced tensor's flattened indices for `index_add_`),
    # `torch.sparse.mm` of a CSR matrix (`_sparse_addmm` as `addmm`, cuSPARSE SpMM's measured
    # buffer) and its backward, a host COO tensor moved to the GPU (indices, then values), and
    # `Dirichlet.rsample` with its backward; the CSR `to_dense` (an index_put over COO indices on
    # the GPU) is not modelled
    status, _, _, err = run_script(
        ROOT / "validation" / "run" / "sparse_probe2.py", extra=("--gpu", "h200"), env={"OUT": str(tmp_path)}
    )
    assert status == 0, err
    twin = json.loads((tmp_path / "probe2.json").read_text())["cases"]
    assert [c["name"] for c in twin] == [c["name"] for c in PROBE2["cases"]]
    for gpu, got in zip(PROBE2["cases"], twin, strict=True):
        info = {k: v for k, v in gpu.items() if k not in ("name", "events")}
        assert info == {k: v for k, v in got.items() if k not in ("name", "events")}
        if gpu["name"] == "csr_to_dense":
            assert _sequence(got) == _sequence(gpu)[:1]
            continue
        assert _sequence(got) == _sequence(gpu), (gpu["name"], info)


def test_coo_to_dense_is_zeros_then_an_in_place_add():
    # `sparse_to_dense` (SparseTensor.cpp): `zeros` of the size, then `add_` of the sparse tensor,
    # which flattens two sparse dimensions' indices where uncoalesced (sparse_probe2_h200.json);
    # an uncoalesced tensor stopped the twin (blind140/ej02 as first written)
    with vramscope.capture(gpu="h200") as cap:
        rows = torch.arange(64, device="cuda").repeat_interleave(7)
        cols = torch.randint(0, 1000, (448,), device="cuda")
        coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(448, device="cuda"), (64, 1000))
        d, got = _history(coo.to_dense)
        assert d.shape == (64, 1000) and d.layout is torch.strided and d.is_cuda
        assert got == [("alloc", 64 * 1000 * 4), ("alloc", 448 * 8), ("free_requested", 448 * 8)]
        _, got = _history(coo.coalesce().to_dense)
        assert got[-1] == ("alloc", 64 * 1000 * 4)
        assert not cap.unmeasured


def test_sparse_mm_of_a_csr_matrix_is_its_addmm():
    # `torch.sparse.mm(A, D)` of a CSR matrix: `_sparse_mm`'s `zeros` and `_sparse_addmm`, which
    # `_sparse_csr_addmm` (SparseCsrTensorMath.cpp) runs as `addmm`: the same events as `A @ D`
    with vramscope.capture(gpu="h200"):
        idx = torch.tensor([[0, 0, 1, 2], [0, 2, 1, 0]])
        a = torch.sparse_coo_tensor(idx.cuda(), torch.ones(4, device="cuda"), (3, 3)).to_sparse_csr()
        x = torch.ones(3, 2, device="cuda", requires_grad=True)
        y, got = _history(lambda: torch.sparse.mm(a, x))
        _, want = _history(lambda: a @ x.detach())
        assert y.shape == (3, 2) and got == want == [("alloc", 24), ("alloc", 24), ("free_requested", 24)]
        y.sum().backward()
        assert x.grad.shape == (3, 2) and x.grad.is_cuda


def test_a_host_coo_tensor_moves_its_indices_then_its_values():
    # `_to_copy` of a host COO tensor (TensorConversions.cpp): the indices, then the values, each a
    # dense copy; the indices' values come along, so `coalesce` knows the distinct count. A
    # module's sparse buffer moved by `.to("cuda")` stopped the twin (blind140/ej05 as first written)
    h = torch.tensor([3, 1, 3, 0])
    host = torch.sparse_coo_tensor(torch.stack([h, torch.arange(4)]), torch.ones(4), (8, 4))
    with vramscope.capture(gpu="h200"):
        m, got = _history(lambda: host.to("cuda"))
        assert m.is_cuda and m.layout is torch.sparse_coo and not m.is_coalesced()
        assert got == [("alloc", 2 * 4 * 8), ("alloc", 4 * 4)]
        assert m.coalesce()._nnz() == 4
        mod = torch.nn.Module()
        mod.register_buffer("sketch", host.coalesce())
        mod.to("cuda")
        assert mod.sketch.is_cuda and mod.sketch.is_coalesced()
        assert torch.sparse.mm(mod.sketch, torch.ones(4, 2, device="cuda")).shape == (8, 2)


def test_a_host_csr_tensor_moves_its_values_then_crow_then_column_indices():
    # `_to_copy` of a host CSR tensor (TensorConversions.cpp's compressed branch): the values, the
    # crow indices, then the column indices, each a dense copy (blind141/ek01's H200 history:
    # 10,006,884, 1,354,752 and 20,013,768 bytes as its first allocations). The program's first CUDA
    # op: it stopped the twin (`Cannot access storage of SparseCsrTensorImpl`) as answered
    host = torch.sparse_coo_tensor(torch.tensor([[0, 2, 2, 5, 7], [1, 0, 3, 2, 2]]), torch.ones(5), (8, 4))
    host = host.coalesce().to_sparse_csr()
    with vramscope.capture(gpu="h200"):
        m, got = _history(lambda: host.to("cuda"))
        assert m.is_cuda and m.layout is torch.sparse_csr and m.shape == (8, 4)
        assert got == [("alloc", 5 * 4), ("alloc", 9 * 8), ("alloc", 5 * 8)]
        assert torch.sparse.mm(m, torch.ones(4, 2, device="cuda")).shape == (8, 2)


def test_sparse_mm_of_a_csr_matrix_under_autocast_casts_it_and_its_backward_raises():
    # blind198/gp06's H200 history: `torch.sparse.mm(A, D)` of a float32 CSR matrix (300,000 rows,
    # 4,299,902 entries) by a bfloat16 (300,000, 256) under bf16 autocast. `_sparse_addmm` has no
    # autocast kernel; its inner `addmm` has, which casts A (values 8,599,804 bytes in bfloat16,
    # crow 2,400,008 and column 34,399,216 copied) before the result; cuSPARSE's buffer is 1,433,311
    # bytes as in float32; the casts die values, columns, crow, then `_sparse_mm`'s zeros. The
    # autograd node keeps the float32 matrix, so backward's transpose product of a float32 CSR by a
    # bfloat16 gradient fails in `cusparseSpMM_bufferSize` (the GPU's RuntimeError)
    n, nnz, w = 300_000, 4_299_902, 256
    with vramscope.capture(gpu="h200") as cap:
        idx = torch.empty(2, nnz, dtype=torch.long, device="cuda")
        coo = torch.sparse_coo_tensor(idx, torch.empty(nnz, device="cuda"), (n, n), is_coalesced=True)
        a = coo.to_sparse_csr()
        x = torch.empty(n, w, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y, got = _history(lambda: torch.sparse.mm(a, x))
        assert y.dtype == torch.bfloat16
        big = n * w * 2
        assert got == [
            ("alloc", big),
            ("alloc", nnz * 2),
            ("alloc", (n + 1) * 8),
            ("alloc", nnz * 8),
            ("alloc", big),
            ("alloc", 1_433_311),
            ("free_requested", 1_433_311),
            ("free_requested", nnz * 2),
            ("free_requested", nnz * 8),
            ("free_requested", (n + 1) * 8),
            ("free_requested", big),
        ]
        with pytest.raises(
            RuntimeError, match="operation not supported when calling `cusparseSpMM_bufferSize"
        ):
            y.float().sum().backward()
        # in float32 the product's buffer is the same measured one
        _, got = _history(lambda: torch.sparse.mm(a, torch.empty(n, w, device="cuda")))
        assert ("alloc", 1_433_311) in got
        assert not cap.unmeasured


def test_cusparselt_compress_and_matmul_allocate_as_the_h200_measured():
    # fixtures/run/sparse/cslt_probe_h200.jsonl (validation/cslt_probe.py): `_cslt_compress` of a
    # 1024 x 1024 fp16 2:4 matrix returns (1024, 576) and holds a 131,072-byte buffer while it runs;
    # `_cslt_sparse_mm` by a 1024 x 128 matrix holds 131,584 bytes beyond its (1024, 128) result (the
    # twin stopped at `_cslt_compress`, which has no meta kernel)
    with vramscope.capture(gpu="h200"):
        w = torch.empty(1024, 1024, device="cuda", dtype=torch.float16)
        b = torch.empty(1024, 128, device="cuda", dtype=torch.float16)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        packed = torch._cslt_compress(w)
        assert packed.shape == (1024, 576) and packed.dtype == torch.float16
        assert torch.cuda.memory_allocated() - base == 1179648
        assert torch.cuda.max_memory_allocated() - base == 1179648 + 131072
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = torch._cslt_sparse_mm(packed, b)
        assert out.shape == (1024, 128) and out.is_contiguous()
        assert torch.cuda.memory_allocated() - base == 262144
        assert torch.cuda.max_memory_allocated() - base == 262144 + 131584


def test_sparse_semi_structured_tile_allocates_what_its_cuda_kernel_does():
    # SparseSemiStructuredTile.cu (no meta kernel; the twin raised NotImplementedError at
    # `prune_dense_static_sort`): each format's representation of the matrix and its transpose, then
    # the threads' masks (ceil(rows / 32) x 4, ceil(cols / 64) x 8, 8) bytes
    from torch.sparse import SparseSemiStructuredTensorCUSPARSELT

    with vramscope.capture(gpu="h200"):
        w = torch.empty(256, 512, device="cuda", dtype=torch.float16)
        base = torch.cuda.memory_allocated()
        packed, meta, packed_t, meta_t, masks = torch._sparse_semi_structured_tile(w)
        # CUTLASS: (256, 256) fp16 values, 256 x 512 / 16 int16 metadata viewed (256, 2, 16), both
        # again for the transpose
        assert packed.shape == (256, 256) and packed_t.shape == (512, 128)
        assert meta.dtype == torch.int16 and meta.shape == (256, 2, 16) and meta.stride() == (2, 1, 512)
        assert masks.shape == (32, 64, 8) and masks.dtype == torch.uint8
        assert torch.cuda.memory_allocated() - base == 2 * (131072 + 16384) + 16384
        del packed, meta, packed_t, meta_t, masks
        out = torch._sparse_semi_structured_tile(w, use_cutlass=False)
        # cuSPARSELt: one storage of 256 x 256 values and 256 x 512 / 16 metadata scalars
        assert out[0].shape == (73728,) and out[1].shape == (2, 16, 256) and out[1].storage_offset() == 65536
        assert torch.cuda.memory_allocated() - base == 2 * 147456 + 16384
        del out
        with pytest.raises(RuntimeError, match="Only supports rows/cols multiples of 128"):
            torch._sparse_semi_structured_tile(w[:200], use_cutlass=False)
        with pytest.raises(RuntimeError, match='Unknown algorithm "top2"'):
            torch._sparse_semi_structured_tile(w, algorithm="top2")
        assert torch.cuda.memory_allocated() == base
        s = SparseSemiStructuredTensorCUSPARSELT.prune_dense_static_sort(w)
        assert s.shape == (256, 512)


def test_semi_structured_linear_under_inference_mode_takes_the_subclass_linear():
    # inference mode drops the Autograd keys, whose composite is Linear.cpp's: a 3-D input that is not
    # contiguous (a sparse linear's own output, strides (128, 1, 4096)) reaches the semi-structured
    # weight's `semi_sparse_linear` whole, as PyTorch on meta tensors shows; the twin ran Linear.cpp's
    # `matmul(input, weight.t())` out of the mode, and `weight.t()` raised "Cannot set version_counter
    # for inference tensor" (blind261/jb04, a BERT's intermediate layer)
    from torch.sparse import to_sparse_semi_structured

    with vramscope.capture(gpu="h200"):
        lin = torch.nn.Linear(768, 3072).half().cuda().eval()
        lin.weight = torch.nn.Parameter(to_sparse_semi_structured(lin.weight.detach()))
        with torch.inference_mode():
            x = torch.empty(32, 768, 128, device="cuda", dtype=torch.float16)
            x = x.as_strided((32, 128, 768), (128, 1, 4096))
            y = lin(x)
        assert y.shape == (32, 128, 3072)


def test_sparse_softmax_and_its_backward_run_with_their_outputs_counted():
    # blind271 probing (a GAT's attention by `torch.sparse.softmax` over COO scores): the twin raised
    # "no rule ... and no meta kernel" where the GPU runs `softmax_sparse_cuda` (sparse/cuda/SoftMax.cu):
    # the coalesced input's indices and values' sizes again for the output (values first, then the
    # indices copied), the backward's gradient likewise; over a sparse dimension `compute_pool_max`'s
    # pools (strides, offsets, sorted positions, merge sort, pool sizes, pool offsets, max rows:
    # `_softmax_pools`), whose reduce_by_key and scan scratch are named unmeasured at these sizes
    host = torch.randint(0, 512, (2, 4096), generator=torch.Generator().manual_seed(0))
    rows = torch.unique(host[0]).numel()
    with vramscope.capture(gpu="h200") as cap:
        idx = host.cuda()
        s = torch.sparse_coo_tensor(idx, torch.randn(4096, device="cuda"), (512, 512)).coalesce()
        s.requires_grad_()
        nnz = s._nnz()
        before = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
        out = torch.sparse.softmax(s, 1)
        grown = torch.cuda.memory_stats()["requested_bytes.all.allocated"] - before
        pools = 16 + 3 * nnz * 8 + _sparse.merge_sort_pairs_bytes(nnz, 8, 0) + rows * (8 + 4)
        assert out.is_sparse and out._nnz() == nnz and grown == nnz * 4 + 2 * nnz * 8 + pools
        (g,) = torch.autograd.grad(out.to_dense().sum(), s)
        assert g.is_sparse and g._nnz() == nnz
        log_out = torch.sparse.log_softmax(s.detach(), 0)
        assert log_out._nnz() == nnz
    assert any("_sparse_softmax" in u for u in cap.unmeasured)
    assert any("_sparse_softmax_backward_data" in u for u in cap.unmeasured)


def test_a_sparse_gradient_masked_by_a_sparse_tensor_takes_the_masks_pattern():
    # blind271 probing (a GCN with learnable edge weights: `torch.sparse.mm` of a COO adjacency whose
    # values need a gradient): the constructor's backward, `grad.sparse_mask(A)` of two COO tensors,
    # raised "no rule ... and no meta kernel"; SparseTensor.cpp's `sparse_mask` gives new indices and
    # values over the mask's pattern (its nnz, the gradient's dtype); the intersection's scratch of a
    # coalesced gradient (rp62's H100 probe, test below): arange and buffer of the mask's nnz, the
    # gradient's hashes, an 8-byte dummy
    with vramscope.capture(gpu="h200") as cap:
        idx = torch.randint(0, 2048, (2, 16384), device="cuda")
        w = torch.rand(16384, device="cuda", requires_grad=True)
        x = torch.randn(2048, 64, device="cuda", requires_grad=True)
        a = torch.sparse_coo_tensor(idx, w, (2048, 2048))
        torch.sparse.mm(a, x).square().sum().backward()
        assert w.grad.shape == (16384,) and x.grad.shape == (2048, 64)
        g = torch.sparse_coo_tensor(idx[:, :5000], torch.rand(5000, device="cuda"), (2048, 2048)).coalesce()
        before = torch.cuda.memory_stats()["requested_bytes.all.current"]
        torch.cuda.reset_peak_memory_stats()
        r = g.sparse_mask(a.detach())
        stats = torch.cuda.memory_stats()
        grown = stats["requested_bytes.all.current"] - before
        peak = stats["requested_bytes.all.peak"] - before
        assert r._nnz() == 16384 and not r.is_coalesced() and grown == 2 * 16384 * 8 + 16384 * 4
        assert peak == grown + 16384 * 8 + g._nnz() * 8 + 16384 * 16
    assert not any("sparse_mask" in u for u in cap.unmeasured)


def test_sparse_mask_of_a_sparse_gradient_allocates_as_the_h100_probe():
    # rp62's probe of a COO decode's backward on the H100 (fixtures/run/probes): every op's allocated
    # and peak line; its sparse-to-sparse sparse_mask peaks at +6,815,744 over a +2,621,440 result
    # (the twin had +2,621,440 and named the intersection's scratch unmeasured)
    script = ROOT / "validation/run/probes/rp62_sparse_coo_values_sparse_mask_probe_s62.py"
    status, lines, report, _ = run_script(script, extra=("--gpu", "h100"))
    gpu = (FIXTURES / "run" / "probes" / "rp62_sparse_mask_probe_s62_h100.txt").read_text().splitlines()
    assert status == 0 and lines == gpu
    assert not any("sparse_mask" in u for u in report["unmeasured"])


def test_sparse_sum_over_a_sparse_dimension_clones_values_and_coalesces_the_kept_rows():
    # blind276/jq03 (degrees by `torch.sparse.sum(adj, 1)`): the twin raised "no rule ... and no meta
    # kernel" where the GPU runs `_sparse_sum`'s composite (SparseTensorMath.cpp): the values
    # cloned, the kept index row copied into new indices, the tensor over them coalesced
    host = torch.tensor([[0, 0, 1, 3, 3, 3], [1, 2, 0, 0, 1, 2]])
    with vramscope.capture(gpu="h100"):
        s = torch.sparse_coo_tensor(host.cuda(), torch.ones(6, device="cuda"), (4, 3)).coalesce()
        out = torch.sparse.sum(s, 1)
        assert out.is_sparse and out.shape == (4,) and out._nnz() == 3  # rows 0, 1 and 3
        dense = out.to_dense()
        assert dense.shape == (4,)
        total = torch.sparse.sum(s, (0, 1))
        assert total.shape == () and not total.is_sparse


def test_dense_times_sparse_coo_is_the_transposed_sparse_product():
    # blind276/jq03 (`torch.svd_lowrank` of a sparse COO matrix: `Q.mH @ A`): mm(dense, sparse) had no
    # rule; `_sparse_mm` (SparseTensorMath.cpp) runs `_sparse_addmm(t^T, S^T, D^T)` over a zeros
    # result and returns its product transposed
    with vramscope.capture(gpu="h100"):
        idx = torch.randint(0, 256, (2, 2048), device="cuda")
        s = torch.sparse_coo_tensor(idx, torch.randn(2048, device="cuda"), (256, 128)).coalesce()
        d = torch.randn(64, 256, device="cuda")
        out = d @ s
        assert out.shape == (64, 128) and out.stride() == (1, 64)
        assert (out * 2).shape == (64, 128)


def test_a_csr_tensor_made_coo_differentiates_back_to_csr():
    # blind276/jq03: `to_sparse_coo()` of a CSR matrix ran PyTorch's meta kernel (named unmeasured,
    # its values counted again as new); `sparse_compressed_to_sparse` (TensorConversions.cpp) makes
    # only the COO indices (2 x nnz int64) and shares the values; its backward's
    # `_to_sparse(grad, layout=torch.sparse_csr)` of the COO gradient raised "no rule" and now takes
    # `to_sparse_csr`'s path (`sparse_coo_to_sparse`)
    with vramscope.capture(gpu="h100") as cap:
        a = torch.eye(128, device="cuda").to_sparse_csr()
        q, k = torch.randn(128, 16, device="cuda", requires_grad=True), torch.randn(128, 16, device="cuda")
        logits = torch.sparse.sampled_addmm(a, q, k.t(), beta=0.0)
        before = torch.cuda.memory_allocated()
        coo = logits.to_sparse_coo()
        assert torch.cuda.memory_allocated() - before == 2048  # 2 x 128 int64 indices
        assert coo.is_sparse and coo.is_coalesced() and coo._nnz() == 128
        grad = torch.sparse_coo_tensor(
            coo.detach()._indices(), torch.ones(128, device="cuda"), (128, 128), is_coalesced=True
        )
        back = torch.ops.aten._to_sparse(grad, layout=torch.sparse_csr)
        assert back.layout is torch.sparse_csr and back.values().shape == (128,)
    assert not any("_to_sparse" in u for u in cap.unmeasured)


def test_sampled_addmm_backward_masks_its_csr_gradient_and_multiplies_dense_by_csr():
    # blind276/jq03: `sparse_sampled_addmm`'s backward raised "no rule" at `grad.sparse_mask(self)` of
    # two CSR matrices (`sparse_mask_sparse_compressed`: `t.mul(ones_like(mask))` through COO) and
    # then needs `q^H.mm(grad_projected)`, dense x CSR (`addmm_out_sparse_csr` multiplies
    # `A.t().to_sparse_csr()` by `D.t()` into the result's transpose)
    with vramscope.capture(gpu="h100") as cap:
        a = torch.eye(256, device="cuda").to_sparse_csr()
        q = torch.randn(256, 16, device="cuda", requires_grad=True)
        k = torch.randn(256, 16, device="cuda", requires_grad=True)
        s = torch.sparse.sampled_addmm(a, q, k.t(), beta=0.0)
        g = torch.sparse.sampled_addmm(a, q.detach(), k.detach().t(), beta=0.0)
        before = torch.cuda.memory_allocated()
        projected = g.sparse_mask(a)
        # the result's crow (257 int64: 2,560 bytes), column indices and values (256 each: 2,048 and
        # 1,024 bytes), in 512-byte blocks; the temporaries are freed
        assert projected.layout is torch.sparse_csr and projected.values().shape == (256,)
        assert torch.cuda.memory_allocated() - before == 2560 + 2048 + 1024
        out = q.detach().t() @ projected
        assert out.shape == (16, 256) and out.layout is torch.strided
        gq, gk = torch.autograd.grad(s, (q, k), grad_outputs=g)
        assert gq.shape == q.shape and gk.shape == k.shape
    # the COO intersection's scratch is modelled (pt62_tunableop_and_csr_backward_probe's H100 lines)
    assert not any("sparse_mask" in u for u in cap.unmeasured)


def test_sparse_csr_tensor_from_simulated_parts_aliases_them():
    # blind276 probing (a CSR matrix rebuilt over learnable values, as GNN code does):
    # `torch.sparse_csr_tensor(crow, col, values, size)` raised "of a dense CUDA tensor makes a sparse
    # one, which has no rule"; `sparse_compressed_tensor` (SparseCsrTensor.cpp) aliases its parts
    with vramscope.capture(gpu="h100"):
        a = torch.eye(512, device="cuda").to_sparse_csr()
        values = a.values().clone().requires_grad_(True)
        before = torch.cuda.memory_allocated()
        b = torch.sparse_csr_tensor(a.crow_indices(), a.col_indices(), values, (512, 512))
        assert torch.cuda.memory_allocated() == before
        assert b.layout is torch.sparse_csr and b.shape == (512, 512) and b.requires_grad
        out = torch.sparse.mm(b, torch.randn(512, 8, device="cuda"))
        assert out.shape == (512, 8)


def test_sparse_bsr_tensor_from_simulated_parts_and_its_product_with_a_dense_matrix():
    # blind280/ju03 probing: `torch.sparse_bsr_tensor(crow, col, blocks, size)` raised "makes a sparse
    # one, which has no rule"; it aliases its parts. `mm(BSR, D)`: zeros and the result (m x n), then
    # `_compressed_row_strided_addmm_out` (sparse/SparseBlasImpl.cpp) hands float32 with 64 x 64
    # blocks and n a multiple of 64 to Triton's `bsr_dense_addmm` (two 0-dim empties: 1,024 bytes);
    # else its reference path: D's block rows gathered per stored block (nnzb x b1 x n), the pairwise
    # block products (nnzb x b0 x n), the COO row indices (2 x nnzb). The figures are the H100's
    # (session 64, probes/pt63_ldl_and_bsr_mm_scratch_probe.py: peak over the allocated before)
    bs = 64
    cases = (
        (16, 8, 4, 256, 2_098_176),  # blind280/ju03 ran the twin's reference path here: 4 GiB over
        (128, 32, 8, 8192, 536_871_936),
        (32, 128, 32, 8192, 134_218_752),
        (128, 32, 8, 1000, 589_840_384),  # 1000 % 64: the reference path
    )
    with vramscope.capture(gpu="h100"):
        torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")  # cuBLAS workspace
        for rows, cols, k, n, peak in cases:
            crow = torch.arange(0, rows * k + 1, k, device="cuda")
            col = torch.randint(0, cols, (rows * k,), device="cuda")
            vals = torch.randn(rows * k, bs, bs, device="cuda")
            before = torch.cuda.memory_allocated()
            w = torch.sparse_bsr_tensor(crow, col, vals, (rows * bs, cols * bs))
            assert torch.cuda.memory_allocated() == before
            assert w.layout is torch.sparse_bsr and w.shape == (rows * bs, cols * bs)
            assert w.values().shape == (rows * k, bs, bs)
            for h in (
                torch.randn(cols * bs, n, device="cuda"),
                torch.randn(n, cols * bs, device="cuda").t(),
            ):
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                y = torch.mm(w, h)
                assert y.shape == (rows * bs, n)
                assert torch.cuda.memory_allocated() - base == rows * bs * n * 4
                assert torch.cuda.max_memory_allocated() - base == peak, (rows, cols, k, n)
                del y, h
            del w, crow, col, vals


def test_linear_with_a_bsr_weight_runs_the_transposed_block_product():
    # blind280 probing: `F.linear(x, W_bsr[, b])` (`t()` of the BSR weight, a BSC view, then
    # `mm(x, W^T)` or `addmm(b, x, W^T)`) raised "aten::mm of a sparse CSR CUDA tensor has no rule".
    # `addmm_out_sparse_csr` (sparse/cuda/SparseBlasImpl.cpp) runs `block_sparse_mm` on the
    # transposes into `result.t()`; with a bias, `_compressed_row_strided_addmm_out` adds `b.mul(beta)`
    rows, cols, k, bs, tokens = 16, 8, 4, 64, 256
    with vramscope.capture(gpu="h100"):
        torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")  # cuBLAS workspace
        crow = torch.arange(0, rows * k + 1, k, device="cuda")
        col = torch.randint(0, cols, (rows * k,), device="cuda")
        w = torch.sparse_bsr_tensor(
            crow, col, torch.randn(rows * k, bs, bs, device="cuda"), (rows * bs, cols * bs)
        )
        x = torch.randn(tokens, cols * bs, device="cuda")
        b = torch.randn(rows * bs, device="cuda")
        before = torch.cuda.memory_allocated()
        wt = w.t()
        assert wt.layout is torch.sparse_bsc and torch.cuda.memory_allocated() == before
        out = tokens * rows * bs * 4
        pairs = rows * k * bs * tokens * 4  # gathered rows, and again the block products
        # 64 x 64 float32 blocks, 256 tokens: Triton's `bsr_dense_addmm` on the transposes (its two
        # 0-dim empties), after the zeros of `_sparse_csr_mm` where there is no bias; 200 tokens
        # (not a multiple of 64): the reference path
        cases = [(x, None, out + 1024), (x, b, 1024)]
        x2 = torch.randn(200, cols * bs, device="cuda")
        out2, pairs2 = out * 200 // tokens, pairs * 200 // tokens
        cases += [(x2, None, out2 + 2 * pairs2 + 2 * rows * k * 8), (x2, b, 2 * pairs2 + 2 * rows * k * 8)]
        for inp, bias, scratch in cases:
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = torch.nn.functional.linear(inp, w, bias)
            assert y.shape == (inp.shape[0], rows * bs)
            n_out = inp.shape[0] * rows * bs * 4
            assert torch.cuda.memory_allocated() - base == n_out
            assert torch.cuda.max_memory_allocated() - base == n_out + scratch
            del y


def test_a_cuda_coo_tensor_cast_to_another_dtype_copies_indices_then_values():
    # `_to_copy` of a COO tensor already on the GPU (TensorConversions.cpp's kSparse branch): the
    # indices copied (`at::native::to(..., copy=true)`), then the values in the new dtype, and
    # `_sparse_coo_tensor_unsafe` over them with the coalesced flag. `A_hat.float()` of a float64
    # normalised adjacency had no rule (blind285/jz05 as first answered)
    with vramscope.capture(gpu="h200") as cap:
        idx = torch.tensor([[0, 1, 2, 2], [1, 0, 2, 0]]).cuda()
        a = torch.sparse_coo_tensor(idx, torch.ones(4, dtype=torch.float64, device="cuda"), (3, 3)).coalesce()
        f, got = _history(a.float)
        assert f.is_cuda and f.layout is torch.sparse_coo and f.dtype is torch.float32
        assert f.is_coalesced() and f._nnz() == 4
        assert got == [("alloc", 2 * 4 * 8), ("alloc", 4 * 4)]
        assert not cap.unmeasured


KX69 = "kx69_blind309_workspaces_probe_h100.txt"


@pytest.mark.parametrize("width", [128, 16])
def test_csr_product_of_a_large_adjacency_takes_the_spmm_buffer_the_h100_measured(width):
    # blind309/kx02's normalised 120,000-node adjacency (1,560,000 entries, int64 indices) by its
    # features: the result, cuSPARSE SpMM's 520,007-byte buffer, in the probe's order
    n, nnz = 120_000, 1_560_000
    with vramscope.capture(gpu="h100") as cap:
        idx = torch.empty(2, nnz, dtype=torch.long, device="cuda")
        coo = torch.sparse_coo_tensor(idx, torch.empty(nnz, device="cuda"), (n, n), is_coalesced=True)
        a = coo.to_sparse_csr()
        x = torch.empty(n, width, device="cuda")
        _, got = _history(lambda: torch.sparse.mm(a, x))
        assert got == probe_events(KX69, f"csr spmm ({n} x {n}, {nnz}) x {width} float32")
    assert not cap.unmeasured


def test_sparse_softmax_over_a_sparse_dimension_allocates_the_h100s_pools():
    # blind309/kx02's scores over its circulant adjacency (120,000 rows of 13 entries), softmax over
    # dim 1: the output's values and indices, then `compute_pool_max`'s offsets, sorted positions,
    # merge sort, pool sizes, reduce_by_key, pool offsets, exclusive scan and max rows, in the
    # probe's order; the pool count from the indices' values
    n, k = 120_000, 12
    offsets = torch.tensor([1, 2, 5, 17, 64, 301, 1024, 4099, 16411, 40009, 77773, 99991])
    rows = torch.arange(n).repeat_interleave(k)
    index = torch.stack(
        [torch.cat([rows, torch.arange(n)]), torch.cat([(rows + offsets.repeat(n)) % n, torch.arange(n)])]
    )
    with vramscope.capture(gpu="h100") as cap:
        a = torch.sparse_coo_tensor(
            index.cuda(), torch.ones(index.shape[1], device="cuda"), (n, n)
        ).coalesce()
        s = torch.sparse_coo_tensor(
            a.indices(), torch.empty(a._nnz(), device="cuda"), (n, n), is_coalesced=True
        )
        out = []
        _, got = _history(lambda: out.append(torch.sparse.softmax(s, dim=1)))
        assert got == probe_events(KX69, "coo sparse.softmax dim 1 (1560000 entries)")
    assert not cap.unmeasured


def test_coalescing_unknown_indices_keeps_no_more_rows_than_the_table():
    # blind328/lq03 (DeepWalk, SparseAdam): walk indices the twin carries no values of, 3.4M summed
    # gradient rows over a 200,000-row table; every entry taken as distinct gave 13.6 GB, but the
    # coalesced tensor holds at most one row per index tuple of its sparse dimensions
    with vramscope.capture(gpu="h100"):
        emb = torch.nn.Embedding(1000, 64, sparse=True).to("cuda")
        ids = (torch.randn(100_000, device="cuda").abs() * 300).long().clamp(max=999)  # no values
        assert vramscope._tensor.value(ids) is None
        emb(ids).sum().backward()
        assert emb.weight.grad._nnz() == 100_000
        assert emb.weight.grad.coalesce()._nnz() == 1000
