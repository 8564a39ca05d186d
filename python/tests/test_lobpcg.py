"""`torch.lobpcg` on the simulated device (vramscope/_lobpcg.py): over values the twin does not
carry, the branch operands of full rank take (blind285/jz05)."""

from __future__ import annotations

import torch
import vramscope


def _widths(A, X=None, **kw):
    """`converged_count`, `converged_end` (the search basis' end) and the orthogonalisation's
    passes after each iteration."""
    seen = []

    def tracker(w):
        iv = w.ivars
        seen.append((iv["converged_count"], iv["converged_end"], iv["ortho_i"], iv["ortho_j"]))

    torch.lobpcg(A, X=X, tracker=tracker, **kw)
    return seen


def test_sparse_lobpcg_over_unknown_values_runs_at_full_width():
    m, k, nnz = 30_000, 4, 120_000
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, m, (2, nnz), generator=g)
    x0 = torch.randn(m, k, dtype=torch.float64, generator=g)
    with vramscope.capture(gpu="h100"):
        # values drawn on the device: the twin does not carry them
        vals = torch.rand(nnz, dtype=torch.float64, device="cuda")
        A = torch.sparse_coo_tensor(idx.cuda(), vals, (m, m)).coalesce()
        A = (A + A.t()).coalesce()
        seen = _widths(A, X=x0.cuda(), niter=4, method="ortho")
        # no start block: `randn` on the device, whose norm the twin does not know either (the
        # first step's `X_norm ** -1` raised ZeroDivisionError before)
        _, v = torch.lobpcg(A, k=k, niter=2)
    # the basis is X and W, then X, P and W; one orthogonalisation pass each (i = j = 0); pairs
    # converge one an iteration from the first over the full basis, after which it is narrower
    # (X's n, P's n - 1 and W's n - 1 columns from the first not converged)
    assert seen == [(0, 2 * k, 0, 0), (0, 3 * k, 0, 0), (1, 3 * k - 1, 0, 0), (2, 3 * k - 3, 0, 0)]
    assert tuple(v.shape) == (m, k)


def test_host_lobpcg_takes_pytorchs_own_path():
    # the twin's worker stands in for PyTorch's in `torch._lobpcg` for every call; host tensors
    # (and any whose values the twin carries) go through PyTorch's own methods
    g = torch.Generator().manual_seed(1)
    a = torch.randn(60, 60, dtype=torch.float64, generator=g)
    a = a @ a.T
    x0 = torch.randn(60, 3, dtype=torch.float64, generator=g)
    with vramscope.capture(gpu="h100"):
        e = torch.lobpcg(a, X=x0, niter=200, tol=1e-10)[0]
    torch.testing.assert_close(e, torch.linalg.eigvalsh(a).flip(0)[:3])
