"""Allocation sequences of more sparse and sampling ops on CUDA, from the allocator's memory history
(as sparse_probe.py): COO `to_dense` (coalesced and not), CSR `to_dense`, `torch.sparse.mm` of a
CSR matrix (`_sparse_addmm`) and its dense operand's gradient, a sparse COO tensor moved from the
host (`.to("cuda")`), `Dirichlet.rsample` and its backward (`_sample_dirichlet`,
`_dirichlet_grad`), at a few sizes.

    OUT=DIR python3 validation/run/sparse_probe2.py      (writes DIR/probe2.json)
"""

import json
import os

import torch
from probe_history import dev, new_output, recorder

out = new_output()
record = recorder(out)


def matrix_case(rows, cols, per_row, width):
    g = torch.Generator(device=dev).manual_seed(rows)
    n = rows * per_row
    r = torch.arange(rows, device=dev).repeat_interleave(per_row)
    c = torch.randint(0, cols, (n,), device=dev, generator=g)
    coo = torch.sparse_coo_tensor(torch.stack([r, c]), torch.rand(n, device=dev, generator=g), (rows, cols))
    info = dict(rows=rows, cols=cols, n=n, width=width)
    d = record("coo_to_dense_uncoalesced", lambda: coo.to_dense(), **info)
    del d
    cc = coo.coalesce()
    info["nnz"] = cc._nnz()
    d = record("coo_to_dense_coalesced", lambda: cc.to_dense(), **info)
    del d
    csr = cc.to_sparse_csr()
    d = record("csr_to_dense", lambda: csr.to_dense(), **info)
    del d
    w = torch.randn(cols, width, device=dev, requires_grad=True)
    y = record("sparse_mm_csr", lambda: torch.sparse.mm(csr, w), **info)
    record("sparse_mm_csr_backward", lambda: y.sum().backward(), **info)
    record("mm_csr", lambda: csr @ w.detach(), **info)


def host_case(in_dim, out_dim):
    h = torch.randint(out_dim, (in_dim,))
    s = 2 * torch.randint(2, (in_dim,)).float() - 1
    idx = torch.stack([h, torch.arange(in_dim)])
    host = torch.sparse_coo_tensor(idx, s, (out_dim, in_dim)).coalesce()
    record("sparse_coo_host_to_device", lambda: host.to(dev), n=in_dim)
    host_unc = torch.sparse_coo_tensor(idx, s, (out_dim, in_dim))
    record("sparse_coo_host_to_device_uncoalesced", lambda: host_unc.to(dev), n=in_dim)


def dirichlet_case(b, k):
    conc = (torch.rand(b, k, device=dev) + 0.1).requires_grad_()
    theta = record("dirichlet_rsample", lambda: torch.distributions.Dirichlet(conc).rsample(), b=b, k=k)
    weights = torch.arange(k, device=dev)
    record("dirichlet_rsample_backward", lambda: (theta * weights).sum().backward(), b=b, k=k)


for case in [(64, 1000, 7, 32), (1024, 41140, 128, 600), (2000, 41140, 100, 600)]:
    matrix_case(*case)
for case in [(512, 1024), (2048, 8192)]:
    host_case(*case)
for case in [(64, 10), (2048, 200)]:
    dirichlet_case(*case)

path = os.path.join(os.environ.get("OUT", "."), "probe2.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path, len(out["cases"]))
