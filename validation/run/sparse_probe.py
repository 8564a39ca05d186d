"""Allocation sequences of sparse COO ops on CUDA: `coalesce`, `sparse_mask`, dense `add_(sparse)`,
sparse `clone`, sparse + sparse, `AccumulateGrad` of `nn.Embedding(sparse=True)`'s gradients and a
`SparseAdam` step, at several sizes, from the allocator's memory history.

    OUT=DIR python3 validation/run/sparse_probe.py      (writes DIR/probe.json)

fixtures/run/sparse/sparse_probe_h200.json is its output on an H200 (torch 2.11.0+cu130)."""

import json, os, sys
import torch
from probe_history import dev, new_output, recorder

out = new_output()
record = recorder(out)


R, D = 1_000_000, 128
for n in [100, 4097, 65536, 524288, 2000000]:
    g = torch.Generator(device=dev).manual_seed(n)
    idx = torch.randint(0, R, (1, n), device=dev, generator=g)
    vals = torch.randn(n, D, device=dev, generator=g)
    s = torch.sparse_coo_tensor(idx, vals, (R, D))
    c = record("coalesce", lambda: s.coalesce(), n=n)
    nu = c._nnz()
    dense = torch.zeros(R, D, device=dev)
    m = record("sparse_mask_coalesced", lambda: dense.sparse_mask(c), n=n, nnz=nu)
    del m
    m = record("sparse_mask_uncoalesced", lambda: dense.sparse_mask(s), n=n)
    del m
    new = c.new(c._indices(), c._values().clone(), (R, D))
    record("add_dense_sparse_new", lambda: dense.add_(new), n=n, nnz=nu)
    record("add_dense_sparse_uncoalesced", lambda: dense.add_(s), n=n)
    record("add_dense_sparse_coalesced", lambda: dense.add_(c), n=n, nnz=nu)
    cl = record("clone_sparse", lambda: s.clone(), n=n)
    del cl
    ss = record("add_sparse_sparse", lambda: s + s, n=n)
    del ss, dense, new, c, s, idx, vals

# sparse coo with 2 sparse dims
g = torch.Generator(device=dev).manual_seed(7)
idx2 = torch.randint(0, 1000, (2, 300000), device=dev, generator=g)
s2 = torch.sparse_coo_tensor(idx2, torch.randn(300000, 16, device=dev, generator=g), (1000, 1000, 16))
c2 = record("coalesce_2d", lambda: s2.coalesce(), n=300000)
out["cases"][-1]["nnz"] = c2._nnz()
del s2, c2, idx2

# AccumulateGrad of sparse embedding grads: first, then accumulated without zero_grad
emb = torch.nn.Embedding(R, D, sparse=True).to(dev)
ids = torch.randint(0, R, (2048, 256), device=dev)


def bwd():
    emb(ids).mean(1).sum().backward()


record("embedding_sparse_backward_first", bwd, n=ids.numel())
out["cases"][-1]["grad_indices_is_ids"] = (
    emb.weight.grad._indices().untyped_storage().data_ptr() == ids.untyped_storage().data_ptr()
)
record("embedding_sparse_backward_accumulate", bwd, n=ids.numel())
out["cases"][-1]["grad_nnz"] = emb.weight.grad._nnz()
opt = torch.optim.SparseAdam([emb.weight], lr=1e-3)
record("sparse_adam_step", lambda: opt.step(), n=ids.numel())
out["cases"][-1]["nnz"] = emb.weight.grad.coalesce()._nnz()

path = os.path.join(os.environ.get("OUT", "."), "probe.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path, len(out["cases"]))
