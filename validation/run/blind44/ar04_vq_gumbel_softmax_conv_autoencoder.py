"""A discrete VAE: a conv encoder gives logits over a 1024-entry codebook at each of 32x32 positions,
F.gumbel_softmax(hard=True, tau=0.9) picks codes (straight-through), codes are embedded by a matmul
with the codebook and decoded by transposed convs, KL to a uniform prior, fp32, Adam, batch 32 at
128x128, 2 steps; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4404)
B, H, K, D = (2, 32, 64, 16) if SMALL else (32, 128, 1024, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
enc = nn.Sequential(
    nn.Conv2d(3, 128, 4, 2, 1), nn.ReLU(), nn.Conv2d(128, 256, 4, 2, 1), nn.ReLU(), nn.Conv2d(256, K, 1)
).to(device)
codebook = nn.Parameter(torch.randn(K, D, device=device) * 0.02)
dec = nn.Sequential(nn.ConvTranspose2d(D, 128, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(128, 3, 4, 2, 1)).to(
    device
)
optimizer = torch.optim.Adam([*enc.parameters(), codebook, *dec.parameters()], lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, H, H, device=device)
    logits = enc(x)
    codes = F.gumbel_softmax(logits, tau=0.9, hard=True, dim=1)
    z = torch.einsum("bkhw,kd->bdhw", codes, codebook)
    recon = dec(z)
    logq = F.log_softmax(logits, dim=1)
    kl = (logq.exp() * (logq + math.log(K))).sum(1).mean()
    loss = F.mse_loss(recon, x) + 1e-3 * kl
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, logits, codes, z, recon, logq, kl, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
