"""A 6-layer encoder of `nn.MultiheadAttention` blocks (1,024 wide, 16 heads, batch_first) trained
in fp32 while returning every head's attention weights (`need_weights=True,
average_attn_weights=False`) for an attention-entropy regularizer, a key padding mask, Adam, batch 16
of 512 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8003)
B, L, D, H, N = (2, 16, 32, 4, 2) if SMALL else (16, 512, 1024, 16, 6)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, H, dropout=0.1, batch_first=True)
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, pad):
        a, w = self.attn(x, x, x, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
        x = self.n1(x + a)
        return self.n2(x + self.ff(x)), w


device = "cuda" if torch.cuda.is_available() else "cpu"
blocks = nn.ModuleList(Block() for _ in range(N)).to(device)
head = nn.Linear(D, 10).to(device)
params = list(blocks.parameters()) + list(head.parameters())
optimizer = torch.optim.Adam(params, lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, L, D, device=device)
    pad = (
        torch.arange(L, device=device)[None, :] >= torch.linspace(L // 2, L, B, device=device).long()[:, None]
    )
    y = torch.randint(0, 10, (B,), device=device)
    entropy = 0.0
    for b in blocks:
        x, w = b(x, pad)
        entropy = entropy - (w * torch.log(w + 1e-9)).sum(-1).mean()
    loss = F.cross_entropy(head(x.mean(1)), y) + 0.01 * entropy
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, pad, y, w, entropy, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
