"""Session 62 (helper pt): what blind276 does that the twin cannot settle without the GPU (plain
`python3`, one GPU, well under a minute). For each case: the caching allocator's alloc/free events inside
the call (memory history, sizes in bytes, in order) and the call's peak above what was allocated before.

- jq04 (TunableOp): `TunableOp::FindFastest` (aten/src/ATen/cuda/tunable/TunableOp.h) tunes a GEMM
  signature on `rotating_size / params->GetSize(rotation) + 1` deep copies of its parameters
  (`GemmParams::DeepCopy`, GemmCommon.h), deleted after tuning. The twin names the tuning unmeasured. Cases:
  a bf16 `mm` and `addmm` (Linear with bias) and a `bmm`-free backward pair at three sizes, each under
  tuning with the default rotating buffer (L2 size), with it set to 0 and 256 MB, and a second call of the
  same signature (a lookup: nothing expected).
- jq03 (sparse CSR attention): the backward of `torch.sparse.sampled_addmm` (`grad.sparse_mask(self)` of
  two CSR tensors: `self.mul(ones_like(mask))` through COO, then `grad_projected.mm(k^H)` and
  `q^H.mm(grad_projected)`, dense x CSR), which the twin has no rule for (it raises), at N = 4,096 and
  32,768 nodes, 16 neighbours; and `to_sparse_coo()` of a CSR matrix and its backward `to_sparse_csr`.
"""

import os
import tempfile

import torch

dev = "cuda"
torch.manual_seed(0)


def events(tag, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ev.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            ev.append(f"-{e['size']}")
    print(f"{tag}: peak_above {torch.cuda.max_memory_allocated() - base} events {' '.join(ev)}", flush=True)
    return out


def tune_case(rot, m, n, k):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)
    g = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    torch.cuda.tunable.enable(True)
    torch.cuda.tunable.tuning_enable(True)
    events(f"rot={rot} mm {m}x{k}@{k}x{n} tune", lambda: a @ w.t())
    events(f"rot={rot} mm {m}x{k}@{k}x{n} lookup", lambda: a @ w.t())
    events(f"rot={rot} addmm {m}x{k}@{k}x{n} tune", lambda: torch.nn.functional.linear(a, w, b))
    events(f"rot={rot} mm grad_w {n}x{m}@{m}x{k} tune", lambda: g.t() @ a)
    torch.cuda.tunable.enable(False)
    events(f"rot={rot} mm {m}x{k}@{k}x{n} tunableop off", lambda: a @ w.t())


def csr_case(N):
    src = torch.arange(N, device=dev).repeat_interleave(16)
    dst = torch.randint(0, N, (N * 16,), device=dev)
    idx = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
    adj = torch.sparse_coo_tensor(idx, torch.ones(idx.shape[1], device=dev), (N, N)).coalesce()
    pattern = torch.sparse_coo_tensor(adj.indices(), torch.ones_like(adj.values()), (N, N)).coalesce()
    csr = pattern.to_sparse_csr()
    q = torch.randn(N, 64, device=dev, requires_grad=True)
    k = torch.randn(N, 64, device=dev, requires_grad=True)
    print(f"N={N} nnz {csr._nnz()}")
    s = events(f"N={N} sampled_addmm", lambda: torch.sparse.sampled_addmm(csr, q, k.t(), beta=0.0))
    c = events(f"N={N} to_sparse_coo", lambda: s.to_sparse_coo())
    ones = torch.ones(c._nnz(), device=dev)
    gc = torch.sparse_coo_tensor(c.detach()._indices(), ones, (N, N))._coalesced_(True)
    gs = events(
        f"N={N} coo grad to_sparse_csr", lambda: torch.ops.aten._to_sparse(gc, layout=torch.sparse_csr)
    )
    events(f"N={N} sampled_addmm backward", lambda: torch.autograd.grad(s, (q, k), grad_outputs=gs))
    events(f"N={N} sparse_mask csr csr", lambda: gs.sparse_mask(csr))
    events(f"N={N} dense @ csr", lambda: q.detach().t() @ gs)


tmp = tempfile.mkdtemp(prefix="tunableop_probe_")
torch.cuda.tunable.set_filename(os.path.join(tmp, "r.csv"), insert_device_ordinal=True)
torch.cuda.tunable.set_max_tuning_iterations(10)
torch.cuda.tunable.set_max_tuning_duration(5)
print("rotating default (bytes)", torch.cuda.tunable.get_rotating_buffer_size())
for j, rot in enumerate((None, 0, 256)):
    if rot is not None:
        torch.cuda.tunable.set_rotating_buffer_size(rot)
    for m, n, k in ((512, 512, 512), (4096, 2048, 2048), (4096, 32000, 2048)):
        tune_case(rot, m + 8 * j, n, k)  # a new signature per setting
print("tuned signatures", len(torch.cuda.tunable.get_results()))

for N in (4096, 32768):
    csr_case(N)
