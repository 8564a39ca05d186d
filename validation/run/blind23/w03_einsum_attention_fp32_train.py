"""A transformer whose attention is written with torch.einsum ('bhqd,bhkd->bhqk', softmax,
'bhqk,bhkd->bhqd') and a relative-position bias table gathered per head, fp32, 640 wide, 10 heads,
6 layers, Adam, batch 8 x 512, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2303)
B, T, W, H, DEPTH = (2, 16, 32, 4, 1) if SMALL else (8, 512, 640, 10, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(W, 3 * W)
        self.out = nn.Linear(W, W)
        self.table = nn.Parameter(torch.zeros(2 * T - 1, H))
        idx = torch.arange(T)
        self.register_buffer("rel", idx[None, :] - idx[:, None] + T - 1, persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x).view(B, T, 3, H, W // H).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / (W // H) ** 0.5
        scores = scores + self.table[self.rel].permute(2, 0, 1)[None]
        a = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)
        return self.out(a.transpose(1, 2).reshape(B, T, W))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(W), nn.LayerNorm(W)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(W, 4 * W), nn.GELU(), nn.Linear(4 * W, W))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


model = nn.Sequential(*[Block() for _ in range(DEPTH)], nn.LayerNorm(W), nn.Linear(W, 100)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, T, W, device=device)
    y = torch.randint(0, 100, (B, T), device=device)
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
