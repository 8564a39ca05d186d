"""A 3-layer graph attention network (GAT) written by hand over a random graph of 100,000 nodes and
2,000,000 edges: per-edge attention logits gathered by index_select, a softmax over each node's
incoming edges by scatter_reduce (amax) and index_add_ (sum), messages aggregated by index_add_;
8 heads of 64, fp32, node classification with Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6404)
N, E, FIN, H, FH, K = (50, 200, 16, 2, 8, 5) if SMALL else (100_000, 2_000_000, 128, 8, 64, 40)


class GATLayer(nn.Module):
    def __init__(self, fin, heads, fout):
        super().__init__()
        self.lin = nn.Linear(fin, heads * fout, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, fout) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, fout) * 0.1)
        self.heads, self.fout = heads, fout

    def forward(self, x, src, dst):
        h = self.lin(x).view(-1, self.heads, self.fout)
        a_src, a_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)
        logits = F.leaky_relu(a_src.index_select(0, src) + a_dst.index_select(0, dst), 0.2)
        peak = torch.full((x.shape[0], self.heads), -1e9, device=x.device)
        peak = peak.scatter_reduce(0, dst[:, None].expand_as(logits), logits, "amax", include_self=True)
        w = torch.exp(logits - peak.index_select(0, dst))
        denom = torch.zeros(x.shape[0], self.heads, device=x.device).index_add_(0, dst, w)
        w = w / denom.index_select(0, dst).clamp_min(1e-16)
        msg = h.index_select(0, src) * w[..., None]
        out = torch.zeros_like(h).index_add_(0, dst, msg)
        return out.flatten(1)


device = "cuda" if torch.cuda.is_available() else "cpu"
layers = nn.ModuleList([GATLayer(FIN, H, FH), GATLayer(H * FH, H, FH), GATLayer(H * FH, 1, K)]).to(device)
optimizer = torch.optim.Adam(layers.parameters(), lr=5e-3)
x = torch.randn(N, FIN, device=device)
src, dst = torch.randint(0, N, (2, E), device=device)
y = torch.randint(0, K, (N,), device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    h = x
    for i, layer in enumerate(layers):
        h = layer(h, src, dst)
        if i < len(layers) - 1:
            h = F.elu(h)
    loss = F.cross_entropy(h, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del h, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
