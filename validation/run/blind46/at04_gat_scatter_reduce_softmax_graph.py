"""A graph attention network written by hand over an edge list: per-edge scores, a softmax over each
node's incoming edges with scatter_reduce(amax) and index_add_, messages aggregated by index_add_,
3 layers of 8 heads, 100,000 nodes and 1,600,000 edges, fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4604)
N, E, D, H = (50, 400, 16, 2) if SMALL else (100000, 1600000, 128, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


class GATLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, D, bias=False)
        self.att_src = nn.Parameter(torch.randn(H, D // H) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(H, D // H) * 0.1)

    def forward(self, x, src, dst):
        h = self.proj(x).view(-1, H, D // H)
        score = F.leaky_relu((h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst], 0.2)
        amax = torch.full((x.shape[0], H), -1e9, device=x.device).scatter_reduce(
            0, dst[:, None].expand(-1, H), score, reduce="amax", include_self=True
        )
        w = (score - amax[dst]).exp()
        denom = torch.zeros(x.shape[0], H, device=x.device).index_add_(0, dst, w)
        alpha = w / denom[dst].clamp_min(1e-16)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * alpha[..., None])
        return F.elu(out.reshape(-1, D))


layers = nn.ModuleList([GATLayer() for _ in range(3)]).to(device)
head = nn.Linear(D, 40).to(device)
optimizer = torch.optim.AdamW([*layers.parameters(), *head.parameters()], lr=5e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(N, D, device=device)
    src = torch.randint(0, N, (E,), device=device)
    dst = torch.randint(0, N, (E,), device=device)
    y = torch.randint(0, 40, (N,), device=device)
    for layer in layers:
        x = layer(x, src, dst)
    loss = F.cross_entropy(head(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, src, dst, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
