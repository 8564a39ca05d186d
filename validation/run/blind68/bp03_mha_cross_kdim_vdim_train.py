"""nn.MultiheadAttention as cross-attention with kdim and vdim different from embed_dim (separate q, k
and v projection weights): 1,024-wide queries of 256 tokens attending to 768-wide keys and 512-wide
values of 1,024 tokens, 16 heads, 6 stacked layers with a feed-forward, batch 32, fp32, Adam, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6803)
E, KD, VD, H, N, B, TQ, TK = (32, 24, 16, 2, 2, 2, 8, 16) if SMALL else (1024, 768, 512, 16, 6, 32, 256, 1024)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(E, H, kdim=KD, vdim=VD, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(E), nn.LayerNorm(E)
        self.ff = nn.Sequential(nn.Linear(E, 4 * E), nn.ReLU(), nn.Linear(4 * E, E))

    def forward(self, q, k, v):
        q = self.norm1(q + self.attn(q, k, v, need_weights=False)[0])
        return self.norm2(q + self.ff(q))


device = "cuda" if torch.cuda.is_available() else "cpu"
layers = nn.ModuleList(Layer() for _ in range(N)).to(device)
optimizer = torch.optim.Adam(layers.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    q = torch.randn(B, TQ, E, device=device)
    k = torch.randn(B, TK, KD, device=device)
    v = torch.randn(B, TK, VD, device=device)
    for layer in layers:
        q = layer(q, k, v)
    loss = F.mse_loss(q, torch.zeros_like(q))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del q, k, v, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
