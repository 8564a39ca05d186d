"""Word-embedding alignment by orthogonal Procrustes (MUSE-style refinement, written by hand):
a learned linear encoder maps 32,768 source vectors of 768 into the target space, and 64 batched
per-cluster Procrustes problems (256 x 256 cross-covariances) give the rotation by
torch.linalg.svd(full_matrices=False) with gradients through U and V; the global rotation from one
768 x 768 SVD (driver gesvd, full_matrices=True); a batched small-matrix check with driver gesvdj
(4,096 matrices of 32 x 32) and a tall-skinny one with gesvda (256 matrices of 512 x 16, its
singular values only); torch.svd_lowrank (q 64) on a 32,768 x 768 matrix and torch.pca_lowrank
(q 32) on the aligned vectors; fp32, AdamW, 3 training steps; 6 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11703)
N, D, C, CD, STEPS = (512, 32, 4, 16, 2) if SMALL else (32768, 768, 64, 256, 3)
NB, NJ, NT, TJ = (16, 8, 8, 4) if SMALL else (4096, 32, 256, 16)
TM = 64 if SMALL else 512
device = "cuda" if torch.cuda.is_available() else "cpu"

src = torch.randn(N, D, device=device)
Q0, _ = torch.linalg.qr(torch.randn(D, D, device=device))
tgt = src @ Q0 + 0.05 * torch.randn(N, D, device=device)
cluster = torch.randint(0, C, (N,), device=device)
enc = nn.Sequential(nn.Linear(D, D), nn.LayerNorm(D)).to(device)
opt = torch.optim.AdamW(enc.parameters(), lr=1e-4)

if device == "cuda":
    print(f"data {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    z = enc(src)
    zc = z[:, :CD].view(C, N // C, CD)
    tc = tgt[:, :CD].view(C, N // C, CD)
    M = zc.transpose(1, 2) @ tc
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    R = U @ Vh
    loss = (torch.bmm(zc, R) - tc).pow(2).mean() + 1e-3 * S.sum(-1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del z, zc, tc, M, U, S, Vh, R, loss

with torch.no_grad():
    z = enc(src)
    U, S, Vh = torch.linalg.svd(z.T @ tgt, full_matrices=True, driver="gesvd" if device == "cuda" else None)
    W = U @ Vh
    err = (z @ W - tgt).norm() / tgt.norm()
    small = torch.randn(NB, NJ, NJ, device=device)
    Us, Ss, Vs = torch.linalg.svd(small, driver="gesvdj" if device == "cuda" else None)
    recon = (Us * Ss.unsqueeze(-2)) @ Vs
    tall = torch.randn(NT, TM, TJ, device=device)
    sv = torch.linalg.svdvals(tall, driver="gesvda" if device == "cuda" else None)
if device == "cuda":
    print(
        f"global err {err.item():.4f} gesvdj {(recon - small).abs().max().item():.2e}"
        f" gesvda {sv.max().item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del small, Us, Ss, Vs, recon, tall, sv

with torch.no_grad():
    Ul, Sl, Vl = torch.svd_lowrank(z, q=64 if not SMALL else 8, niter=2)
    aligned = z @ W
    Up, Sp, Vp = torch.pca_lowrank(aligned, q=32 if not SMALL else 6, center=True)
    proj = (aligned - aligned.mean(0)) @ Vp
if device == "cuda":
    print(
        f"lowrank top {Sl[0].item():.2f} pca {Sp[0].item():.2f} proj {tuple(proj.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
