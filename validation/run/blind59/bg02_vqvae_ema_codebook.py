"""A VQ-VAE written by hand on 128x128 images at batch 32: a strided conv encoder to a 32x32 grid
of 64-d latents, nearest codes of a 1,024-entry codebook by squared distances and argmin, the
straight-through estimator, a commitment loss, EMA codebook updates (one_hot counts, index_add_ of
the latents, Laplace smoothing) under no_grad, a transposed-conv decoder; Adam, fp32, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5902)
B, HW, K, D = (2, 32, 16, 8) if SMALL else (32, 128, 1024, 64)


def res(c):
    return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 1))


class VQVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(3, 128, 4, 2, 1), nn.ReLU(), nn.Conv2d(128, 128, 4, 2, 1), res(128)
        )
        self.pre = nn.Conv2d(128, D, 1)
        self.dec = nn.Sequential(
            nn.Conv2d(D, 128, 3, padding=1),
            res(128),
            nn.ReLU(),
            nn.ConvTranspose2d(128, 128, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(128, 3, 4, 2, 1),
        )
        self.register_buffer("codebook", torch.randn(K, D))
        self.register_buffer("ema_count", torch.ones(K))
        self.register_buffer("ema_sum", self.codebook.clone())

    def forward(self, x):
        z = self.pre(self.enc(x))
        b, d, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, d)
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.codebook.t() + self.codebook.pow(2).sum(1)
        codes = dist.argmin(dim=1)
        q = self.codebook[codes].view(b, h, w, d).permute(0, 3, 1, 2)
        commit = F.mse_loss(z, q.detach())
        q = z + (q - z).detach()
        if self.training:
            with torch.no_grad():
                onehot = F.one_hot(codes, K).type_as(flat)
                self.ema_count.mul_(0.99).add_(onehot.sum(0), alpha=0.01)
                summed = torch.zeros_like(self.ema_sum).index_add_(0, codes, flat)
                self.ema_sum.mul_(0.99).add_(summed, alpha=0.01)
                n = self.ema_count.sum()
                count = (self.ema_count + 1e-5) / (n + K * 1e-5) * n
                self.codebook.copy_(self.ema_sum / count.unsqueeze(1))
        return self.dec(q), commit


device = "cuda" if torch.cuda.is_available() else "cpu"
model = VQVAE().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.rand(B, 3, HW, HW, device=device)
    recon, commit = model(x)
    loss = F.mse_loss(recon, x) + 0.25 * commit
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, recon, commit, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
