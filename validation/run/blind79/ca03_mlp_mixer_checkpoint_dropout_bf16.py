"""A hand-written MLP-Mixer-B/16 (token mixing by transposes around a per-channel MLP, channel
mixing, LayerNorm, dropout), bf16 weights, each block under torch.utils.checkpoint (non-reentrant,
RNG state preserved for its dropout), AdamW, batch 64 at 224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7903)
B, S, P, D, N, TOK, CH = (2, 32, 8, 32, 2, 16, 64) if SMALL else (64, 224, 16, 768, 12, 384, 3072)
T = (S // P) ** 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.tok = nn.Sequential(nn.Linear(T, TOK), nn.GELU(), nn.Dropout(0.1), nn.Linear(TOK, T))
        self.ch = nn.Sequential(nn.Linear(D, CH), nn.GELU(), nn.Dropout(0.1), nn.Linear(CH, D))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, D, P, P)
        self.blocks = nn.ModuleList(Block() for _ in range(N))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, 1000)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(self.norm(x).mean(1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Mixer().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device, dtype=torch.bfloat16)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
