"""A 3-layer graph convolutional network written with index_select / index_add_ over an edge list
(symmetric degree normalisation from a scatter of ones, rsqrt), dropout, 200k nodes, 2M edges, 256 features,
full-batch node classification with a boolean train mask, RMSprop, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
NODES, EDGES, FEATS, HIDDEN, CLASSES = (100, 400, 8, 16, 4) if SMALL else (200_000, 2_000_000, 256, 256, 40)
torch.manual_seed(1007)
device = "cuda" if torch.cuda.is_available() else "cpu"


class GCNLayer(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.lin = nn.Linear(fin, fout)

    def forward(self, x, src, dst, norm):
        h = self.lin(x)
        msg = h.index_select(0, src) * norm[:, None]
        return torch.zeros_like(h).index_add_(0, dst, msg)


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([GCNLayer(FEATS, HIDDEN), GCNLayer(HIDDEN, HIDDEN), GCNLayer(HIDDEN, CLASSES)])

    def forward(self, x, src, dst, norm):
        for i, layer in enumerate(self.layers):
            x = layer(x, src, dst, norm)
            if i < len(self.layers) - 1:
                x = F.dropout(F.relu(x), 0.5, self.training)
        return x


x = torch.randn(NODES, FEATS, device=device)
src = torch.randint(0, NODES, (EDGES,), device=device)
dst = torch.randint(0, NODES, (EDGES,), device=device)
deg = torch.zeros(NODES, device=device).scatter_add_(0, dst, torch.ones(EDGES, device=device)).clamp_(min=1)
norm = deg.rsqrt()[src] * deg.rsqrt()[dst]
y = torch.randint(0, CLASSES, (NODES,), device=device)
train = torch.rand(NODES, device=device) < 0.6
model = GCN().to(device)
optimizer = torch.optim.RMSprop(model.parameters(), lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    out = model(x, src, dst, norm)
    loss = F.cross_entropy(out[train], y[train])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
