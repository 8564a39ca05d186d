"""NeRF written by hand: positional encodings of points and directions (10 and 4 frequencies), an
8-layer MLP with a skip, volume rendering by `cumprod` of transmittance, hierarchical sampling of 64
fine points per ray by inverse-CDF `torch.searchsorted` over the coarse weights; 16,384 rays,
64 coarse samples, fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5101)
RAYS, NC, NF, W = (64, 8, 8, 32) if SMALL else (16384, 64, 64, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


def encode(x, freqs):
    bands = 2.0 ** torch.arange(freqs, device=x.device) * torch.pi
    xb = x[..., None] * bands
    return torch.cat([x, xb.sin().flatten(-2), xb.cos().flatten(-2)], -1)


class NeRF(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.ModuleList([nn.Linear(63 if i == 0 else W, W) for i in range(4)])
        self.second = nn.ModuleList([nn.Linear(W + 63 if i == 0 else W, W) for i in range(4)])
        self.sigma = nn.Linear(W, 1)
        self.feat = nn.Linear(W, W)
        self.rgb = nn.Sequential(nn.Linear(W + 27, W // 2), nn.ReLU(), nn.Linear(W // 2, 3))

    def forward(self, pts, dirs):
        p = encode(pts, 10)
        h = p
        for layer in self.first:
            h = F.relu(layer(h))
        h = torch.cat([h, p], -1)
        for layer in self.second:
            h = F.relu(layer(h))
        d = encode(dirs, 4).expand(*pts.shape[:-1], 27)
        return F.relu(self.sigma(h)).squeeze(-1), torch.sigmoid(self.rgb(torch.cat([self.feat(h), d], -1)))


def render(model, o, d, t):
    pts = o[:, None] + d[:, None] * t[..., None]
    sigma, rgb = model(pts, d[:, None])
    delta = torch.cat([t[:, 1:] - t[:, :-1], torch.full_like(t[:, :1], 1e10)], -1)
    alpha = 1 - torch.exp(-sigma * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)[:, :-1]
    weights = alpha * trans
    return (weights[..., None] * rgb).sum(1), weights


coarse, fine = NeRF().to(device), NeRF().to(device)
optimizer = torch.optim.Adam([*coarse.parameters(), *fine.parameters()], lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    o = torch.randn(RAYS, 3, device=device)
    d = F.normalize(torch.randn(RAYS, 3, device=device), dim=-1)
    target = torch.rand(RAYS, 3, device=device)
    t = torch.linspace(2.0, 6.0, NC, device=device).expand(RAYS, NC).contiguous()
    rgb_c, w = render(coarse, o, d, t)
    with torch.no_grad():
        mids = 0.5 * (t[:, 1:] + t[:, :-1])
        pdf = (w[:, 1:-1] + 1e-5) / (w[:, 1:-1] + 1e-5).sum(-1, keepdim=True)
        cdf = torch.cat([torch.zeros_like(pdf[:, :1]), torch.cumsum(pdf, -1)], -1)
        u = torch.rand(RAYS, NF, device=device)
        idx = torch.searchsorted(cdf, u, right=True).clamp(1, cdf.shape[-1] - 1)
        lo, hi = torch.gather(cdf, 1, idx - 1), torch.gather(cdf, 1, idx)
        blo, bhi = torch.gather(mids, 1, idx - 1), torch.gather(mids, 1, idx)
        samples = blo + (u - lo) / (hi - lo).clamp(min=1e-5) * (bhi - blo)
        t_fine = torch.sort(torch.cat([t, samples], -1), -1).values
    rgb_f, _ = render(fine, o, d, t_fine)
    loss = F.mse_loss(rgb_c, target) + F.mse_loss(rgb_f, target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del o, d, target, t, rgb_c, w, rgb_f, loss, t_fine
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
