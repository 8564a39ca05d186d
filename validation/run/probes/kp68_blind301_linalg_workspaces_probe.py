"""Session 68 (helper kp): the allocations inside the linalg calls of blind301 that the twin names
unmeasured or that a source rule added (plain `python3`, one GPU, about 10 s, < 6 GB). For each case:
the caching allocator's alloc/free events inside the call (memory history, sizes in bytes, in order)
and the call's peak above what was allocated before it.

- kp01: `torch.linalg.solve_triangular` of one 4,096-row float64 factor against (32, 4,096, 8)
  right-hand sides (A broadcast to B's batch: `linalg_solve_triangular_out` clones it, 32 x 128 MiB,
  then MAGMA's batched trsm: anything beyond the clone?), the same with 8 and with 9 batches of 512
  and 513 rows (the cuBLAS looped / batched / MAGMA thresholds), and its backward.
- kp04: `torch.linalg.qr` of (16,384, 50) float64 (geqrf and orgqr workspaces) and `torch.linalg.lstsq`
  of (16,384, 512) float64 with 512 right-hand sides (gels: geqrf and ormqr workspaces).
"""

import torch
from _events import events

dev = "cuda"
torch.manual_seed(0)

f64 = torch.float64
# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev, dtype=f64) @ torch.randn(64, 64, device=dev, dtype=f64)

for n, batch in ((4096, 32), (512, 8), (512, 9), (513, 9)):
    eye = torch.eye(n, device=dev, dtype=f64)
    L = torch.linalg.cholesky(2 * eye)
    B = torch.randn(batch, n, 8, device=dev, dtype=f64)
    events(
        f"solve_triangular A ({n}, {n}) B ({batch}, {n}, 8) float64",
        lambda L=L, B=B: torch.linalg.solve_triangular(L, B, upper=False),
    )
    Bb = B.clone().requires_grad_()
    X = torch.linalg.solve_triangular(L, Bb, upper=False)
    events(f"solve_triangular backward A ({n}, {n}) B ({batch}, {n}, 8)", lambda X=X: X.sum().backward())
    del eye, L, B, Bb, X

a = torch.randn(16384, 50, device=dev, dtype=f64)
events("qr (16384, 50) float64", lambda a=a: torch.linalg.qr(a))
a = torch.randn(16384, 512, device=dev, dtype=f64)
b = torch.randn(16384, 512, device=dev, dtype=f64)
events("lstsq (16384, 512) x 512 float64", lambda a=a, b=b: torch.linalg.lstsq(a, b))
del a, b
