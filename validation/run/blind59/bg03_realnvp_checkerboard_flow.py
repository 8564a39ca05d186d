"""A RealNVP normalizing flow written by hand on 64x64x3 images at batch 64: 6 affine coupling
layers with checkerboard masks whose scale and shift come from small ResNets (BatchNorm, tanh-scaled
log-scales), the log-determinant summed per image, a standard-normal prior's log_prob from
torch.distributions; Adam with weight decay and gradient norm clipping, fp32, 2 steps; then
sampling 64 images backwards through the flow under no_grad; 4 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5903)
B, HW, C = (2, 8, 16) if SMALL else (64, 64, 128)


class ST(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(4, C, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(C), nn.ReLU(), nn.Conv2d(C, C, 3, padding=1)) for _ in range(4)
        )
        self.out = nn.Conv2d(C, 6, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(1, 3, 1, 1))

    def forward(self, x, mask):
        h = self.inp(torch.cat([x * mask, mask.expand(x.shape[0], 1, -1, -1)], dim=1))
        for blk in self.blocks:
            h = h + blk(h)
        s, t = self.out(h).chunk(2, dim=1)
        return self.scale * torch.tanh(s), t


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(ST() for _ in range(6))
        yy, xx = torch.meshgrid(torch.arange(HW), torch.arange(HW), indexing="ij")
        self.register_buffer("board", ((yy + xx) % 2).float().view(1, 1, HW, HW))

    def mask(self, i):
        return self.board if i % 2 == 0 else 1 - self.board

    def forward(self, x):
        logdet = torch.zeros(x.shape[0], device=x.device)
        for i, layer in enumerate(self.layers):
            m = self.mask(i)
            s, t = layer(x, m)
            s, t = s * (1 - m), t * (1 - m)
            x = x * torch.exp(s) + t
            logdet = logdet + s.flatten(1).sum(1)
        return x, logdet

    def inverse(self, z):
        for i in reversed(range(len(self.layers))):
            m = self.mask(i)
            s, t = self.layers[i](z, m)
            s, t = s * (1 - m), t * (1 - m)
            z = (z - t) * torch.exp(-s)
        return z


device = "cuda" if torch.cuda.is_available() else "cpu"
flow = Flow().to(device)
prior = torch.distributions.Normal(torch.tensor(0.0, device=device), torch.tensor(1.0, device=device))
optimizer = torch.optim.Adam(flow.parameters(), lr=1e-3, weight_decay=5e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.rand(B, 3, HW, HW, device=device) - 0.5
    z, logdet = flow(x)
    nll = -(prior.log_prob(z).flatten(1).sum(1) + logdet).mean() / (3 * HW * HW * math.log(2))
    nll.backward()
    torch.nn.utils.clip_grad_norm_(flow.parameters(), 100.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, z, logdet, nll
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
flow.eval()
with torch.no_grad():
    samples = flow.inverse(prior.sample((B, 3, HW, HW)))
if device == "cuda":
    print(f"sample {tuple(samples.shape)} peak {torch.cuda.max_memory_allocated()}")
