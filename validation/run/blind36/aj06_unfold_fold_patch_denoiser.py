"""A patch-based image denoiser built on F.unfold and F.fold: overlapping 8x8 patches (stride 4)
of 3x256x256 images are unfolded, each patch vector passes through a shared MLP (192 -> 768 ->
192), and the patches are folded back and divided by the overlap counts (a fold of ones); fp32,
MSE loss against the clean images, AdamW (foreach), batch 16, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3606)
B, R = (2, 32) if SMALL else (16, 256)
K, S = 8, 4
device = "cuda" if torch.cuda.is_available() else "cpu"
mlp = nn.Sequential(nn.Linear(3 * K * K, 768), nn.GELU(), nn.Linear(768, 3 * K * K)).to(device)
optimizer = torch.optim.AdamW(mlp.parameters(), lr=1e-3)


def denoise(noisy):
    patches = F.unfold(noisy, K, stride=S)  # (B, 3*K*K, L)
    out = mlp(patches.transpose(1, 2)).transpose(1, 2)
    folded = F.fold(out, (R, R), K, stride=S)
    counts = F.fold(torch.ones_like(out), (R, R), K, stride=S)
    return folded / counts


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clean = torch.rand(B, 3, R, R, device=device)
    noisy = clean + 0.1 * torch.randn_like(clean)
    loss = F.mse_loss(denoise(noisy), clean)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clean, noisy, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
