"""A Perceiver-style encoder written by hand: 256 learned latents cross-attend (SDPA, 8 heads) to
a 4096-token input, then 6 latent self-attention blocks, each block under non-reentrant
torch.utils.checkpoint, bf16 autocast, AdamW (fused), batch 16, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4304)
B, M, L, D, IN = (2, 64, 8, 32, 16) if SMALL else (16, 4096, 256, 512, 192)
H = 8


class Attention(nn.Module):
    def __init__(self, dq, dkv):
        super().__init__()
        self.nq, self.nkv = nn.LayerNorm(dq), nn.LayerNorm(dkv)
        self.q, self.kv, self.o = nn.Linear(dq, D), nn.Linear(dkv, 2 * D), nn.Linear(D, dq)
        self.mlp = nn.Sequential(nn.LayerNorm(dq), nn.Linear(dq, 4 * dq), nn.GELU(), nn.Linear(4 * dq, dq))

    def forward(self, x, ctx):
        b = x.shape[0]
        q = self.q(self.nq(x)).view(b, -1, H, D // H).transpose(1, 2)
        k, v = self.kv(self.nkv(ctx)).view(b, -1, 2, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, D)
        x = x + self.o(a)
        return x + self.mlp(x)


class Perceiver(nn.Module):
    def __init__(self):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(L, D) * 0.02)
        self.cross = Attention(D, IN)
        self.selfs = nn.ModuleList([Attention(D, D) for _ in range(6)])
        self.head = nn.Linear(D, 10)

    def forward(self, inputs):
        x = self.latents.expand(inputs.shape[0], -1, -1)
        x = checkpoint(self.cross, x, inputs, use_reentrant=False)
        for blk in self.selfs:
            x = checkpoint(blk, x, x, use_reentrant=False)
        return self.head(x.mean(1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Perceiver().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    inputs = torch.randn(B, M, IN, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(inputs), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del inputs, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
