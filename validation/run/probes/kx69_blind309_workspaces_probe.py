"""Session 69 (helper kx): the allocations inside the calls of blind309 that the twin names unmeasured
(plain `python3`, one GPU, about 15 s, < 4 GB). For each case: the caching allocator's alloc/free events
inside the call (memory history, sizes in bytes, in order) and the call's peak above what was allocated
before it.

- kx02: cuSPARSE SpMM of the 120,000-node CSR adjacency (1,560,000 entries, int64 indices, float32) by
  128- and 16-column dense operands, forward and backward (`torch.sparse.mm`); `torch.sparse.softmax`
  over dim 1 of the COO score matrix (Thrust pools) and `torch.sparse.mm` of that COO result.
- kx04: `torch.linalg.eigh` of (2,048, 16, 16) complex128 (syevjBatched) and, for a rule, of 1 and 512
  such matrices and of (2,048, 16, 16) float64 / complex64; `torch.linalg.svdvals` of (512, 16, 256)
  complex64 (gesvdj) and of 1 such matrix and of (512, 16, 256) float32.
"""

import torch
from _events import events

dev = "cuda"
torch.manual_seed(0)


# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

# kx02's graph, as the script builds it
N, K = 120_000, 12
offsets = torch.tensor([1, 2, 5, 17, 64, 301, 1024, 4099, 16411, 40009, 77773, 99991], device=dev)
rows = torch.arange(N, device=dev).repeat_interleave(K)
cols = (rows + offsets.repeat(N)) % N
loops = torch.arange(N, device=dev)
index = torch.stack([torch.cat([rows, loops]), torch.cat([cols, loops])])
A = torch.sparse_coo_tensor(index, torch.ones(index.shape[1], device=dev), (N, N)).coalesce()
A_csr = A.to_sparse_csr()
del rows, cols, loops, index
for width in (128, 16):
    x = torch.randn(N, width, device=dev)
    events(f"csr spmm ({N} x {N}, 1560000) x {width} float32", lambda x=x, a=A_csr: torch.sparse.mm(a, x))
    xg = x.clone().requires_grad_()
    y = torch.sparse.mm(A_csr, xg)
    events(f"csr spmm backward x {width}", lambda y=y: y.sum().backward())
    del x, xg, y
S = torch.sparse_coo_tensor(A.indices(), torch.randn(A._nnz(), device=dev), (N, N), is_coalesced=True)
att = events("coo sparse.softmax dim 1 (1560000 entries)", lambda s=S: torch.sparse.softmax(s, dim=1))
h = torch.randn(N, 128, device=dev)
events("coo spmm (softmax output) x 128 float32", lambda a=att, h=h: torch.sparse.mm(a, h))
del S, att, h, A, A_csr

for batch, dtype in (
    (2048, torch.complex128),
    (1, torch.complex128),
    (512, torch.complex128),
    (2048, torch.float64),
    (2048, torch.complex64),
):
    x = torch.randn(batch, 16, 16, device=dev, dtype=dtype)
    R = x @ x.mH
    events(f"eigh ({batch}, 16, 16) {dtype}", lambda R=R: torch.linalg.eigh(R))
    del x, R
for batch, dtype in ((512, torch.complex64), (1, torch.complex64), (512, torch.float32)):
    X = torch.randn(batch, 16, 256, device=dev, dtype=dtype)
    events(f"svdvals ({batch}, 16, 256) {dtype}", lambda X=X: torch.linalg.svdvals(X))
    del X
