"""Scientific solver code: the 2-D Poisson equation on a 1,500x1,500 grid (2.25M unknowns)
assembled as a torch sparse CSR matrix (5-point Laplacian built from COO indices, coalesced,
converted to CSR) in float64, solved by Jacobi-preconditioned conjugate gradients (sparse
matrix-vector products, dot products, axpy updates in place) for 300 iterations; then a batch of 8
right-hand sides solved together with a sparse matrix times dense matrix (spmm) for 200 iterations;
2 phases."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8906)
N, IT1, IT2, R = (40, 30, 20, 3) if SMALL else (1500, 300, 200, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


def laplacian(n):
    idx = torch.arange(n * n, device=device)
    i, j = idx // n, idx % n
    rows, cols, vals = [idx], [idx], [torch.full((n * n,), 4.0, device=device, dtype=torch.float64)]
    for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        ok = (i + di >= 0) & (i + di < n) & (j + dj >= 0) & (j + dj < n)
        src = idx[ok]
        rows.append(src)
        cols.append((i[ok] + di) * n + (j[ok] + dj))
        vals.append(torch.full((src.numel(),), -1.0, device=device, dtype=torch.float64))
    coo = torch.sparse_coo_tensor(
        torch.stack([torch.cat(rows), torch.cat(cols)]), torch.cat(vals), (n * n, n * n)
    ).coalesce()
    return coo.to_sparse_csr()


A = laplacian(N)
diag_inv = torch.full((N * N,), 0.25, device=device, dtype=torch.float64)
if device == "cuda":
    print(f"matrix {torch.cuda.memory_allocated()} nnz {A.values().numel()}")
    torch.cuda.reset_peak_memory_stats()


def pcg(b, iters):
    x = torch.zeros_like(b)
    r = b.clone()
    z = diag_inv.view(-1, *([1] * (b.dim() - 1))) * r
    p = z.clone()
    rz = (r * z).sum(0)
    for _ in range(iters):
        Ap = A @ p
        alpha = rz / (p * Ap).sum(0)
        x.add_(alpha * p)
        r.sub_(alpha * Ap)
        z = diag_inv.view(-1, *([1] * (b.dim() - 1))) * r
        rz_new = (r * z).sum(0)
        p.mul_(rz_new / rz).add_(z)
        rz = rz_new
    return x, r.norm(dim=0)


b = torch.randn(N * N, device=device, dtype=torch.float64)
x, res = pcg(b, IT1)
if device == "cuda":
    print(
        f"one rhs residual {res.item():.3e} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del b, x, res
b = torch.randn(N * N, R, device=device, dtype=torch.float64)
x, res = pcg(b, IT2)
if device == "cuda":
    print(
        f"{R} rhs residual {res.max().item():.3e} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
