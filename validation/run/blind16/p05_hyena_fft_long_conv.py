"""A Hyena-style language model block stack: short depthwise conv1d projections, implicit long filters
from a small MLP over positional features, the long convolution by torch.fft.rfft/irfft over 2L with
complex multiplication, data-controlled gating; fp32 weights under bf16 autocast (the FFTs run in
fp32), AdamW, batch 4 x 4096 tokens, width 512, 4 layers, 2 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1605)
VOCAB, D, LAYERS, B, L = (100, 16, 1, 2, 32) if SMALL else (8192, 512, 4, 4, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"


class HyenaFilter(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(17, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, D))

    def forward(self, length, device):
        t = torch.linspace(0, 1, length, device=device)[:, None]
        bands = torch.arange(8, device=device)[None, :].float()
        feats = torch.cat([t, torch.sin(bands * t * 3.14159), torch.cos(bands * t * 3.14159)], dim=-1)
        decay = torch.exp(-t * 4.0)
        return (self.mlp(feats) * decay).transpose(0, 1)  # D, L


class HyenaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.in_proj = nn.Linear(D, 3 * D)
        self.short = nn.Conv1d(3 * D, 3 * D, 3, padding=2, groups=3 * D)
        self.filter = HyenaFilter()
        self.bias = nn.Parameter(torch.zeros(D))
        self.out_proj = nn.Linear(D, D)

    def forward(self, x):
        b, length, _ = x.shape
        u = self.in_proj(self.ln(x)).transpose(1, 2)
        u = self.short(u)[..., :length]
        x1, x2, v = u.split(D, dim=1)
        k = self.filter(length, x.device)
        with torch.autocast(device_type=x.device.type, enabled=False):
            vf = torch.fft.rfft((v * x1).float(), n=2 * length)
            kf = torch.fft.rfft(k.float(), n=2 * length)
            y = torch.fft.irfft(vf * kf, n=2 * length)[..., :length]
        y = (y + (v * x1).float() * self.bias[:, None]) * x2.float()
        return x + self.out_proj(y.transpose(1, 2).to(x.dtype))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(HyenaBlock() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.emb.weight.t()


model = Model().to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, VOCAB, (B, L + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del logits
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
