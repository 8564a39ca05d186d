"""A ViT-style classifier written with nn.MultiheadAttention (batch_first) that also returns the
head-averaged attention weights (need_weights=True) under a key-padding mask, pre-norm blocks, fp32,
AdamW (foreach), 512 wide, 8 layers, batch 32 of 257 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3802)
D, L, H, B, T, C = (32, 2, 4, 2, 17, 10) if SMALL else (512, 8, 8, 32, 257, 1000)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, pad):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, key_padding_mask=pad, need_weights=True)
        x = x + a
        return x + self.mlp(self.ln2(x)), w


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(48, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, C)

    def forward(self, patches, pad):
        x = self.embed(patches)
        maps = []
        for blk in self.blocks:
            x, w = blk(x, pad)
            maps.append(w)
        return self.head(x[:, 0]), maps


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Net().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    patches = torch.randn(B, T, 48, device=device)
    pad = torch.zeros(B, T, dtype=torch.bool, device=device)
    pad[:, T - 16 :] = True
    y = torch.randint(0, C, (B,), device=device)
    logits, maps = model(patches, pad)
    loss = F.cross_entropy(logits, y) + 0.01 * torch.stack([m.mean() for m in maps]).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del patches, pad, y, logits, maps, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
