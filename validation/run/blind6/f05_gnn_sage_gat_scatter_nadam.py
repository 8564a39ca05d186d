"""Full-graph node classification on a random graph (1M nodes, 12M directed edges, 128 features, 47
classes): hand-written GraphSAGE mean layers (`index_add_` of gathered neighbour features divided by
degree) alternating with single-head GAT-style layers (edge scores, `scatter_reduce(amax)` per destination,
exp, `index_add_` normalizer, weighted `index_add_` aggregation); ReLU, dropout, LayerNorm, fp32, NAdam,
CE on a fixed training index set, 3 steps; then a `no_grad` full-graph inference."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

N, E, FEAT, HIDDEN, CLASSES = (
    (200, 1000, 16, 32, 5) if os.environ.get("SMOKE") else (1_000_000, 12_000_000, 128, 256, 47)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(605)


class SAGE(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.self_lin = nn.Linear(cin, cout)
        self.neigh_lin = nn.Linear(cin, cout, bias=False)

    def forward(self, x, src, dst, inv_deg):
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        return self.self_lin(x) + self.neigh_lin(agg * inv_deg[:, None])


class GAT(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.att_src = nn.Parameter(torch.randn(cout) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(cout) * 0.1)

    def forward(self, x, src, dst, inv_deg):
        h = self.lin(x)
        score = F.leaky_relu((h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst], 0.2)
        smax = torch.full((x.shape[0],), -1e9, device=x.device).scatter_reduce(
            0, dst, score, reduce="amax", include_self=False
        )
        w = torch.exp(score - smax[dst])
        denom = torch.zeros(x.shape[0], device=x.device).index_add_(0, dst, w)
        alpha = w / (denom[dst] + 1e-16)
        return torch.zeros_like(h).index_add_(0, dst, h[src] * alpha[:, None])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(FEAT, HIDDEN)
        self.layers = nn.ModuleList([SAGE(HIDDEN, HIDDEN), GAT(HIDDEN, HIDDEN), SAGE(HIDDEN, HIDDEN)])
        self.norms = nn.ModuleList([nn.LayerNorm(HIDDEN) for _ in self.layers])
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x, src, dst, inv_deg):
        h = F.relu(self.inp(x))
        for layer, norm in zip(self.layers, self.norms, strict=True):
            h = h + F.dropout(F.relu(norm(layer(h, src, dst, inv_deg))), 0.3, self.training)
        return self.out(h)


x = torch.randn(N, FEAT, device=device)
src = torch.randint(0, N, (E,), device=device)
dst = torch.randint(0, N, (E,), device=device)
deg = torch.zeros(N, device=device).index_add_(0, dst, torch.ones(E, device=device))
inv_deg = 1.0 / deg.clamp(min=1)
y = torch.randint(0, CLASSES, (N,), device=device)
train_idx = torch.arange(0, N, 3, device=device)
model = Net().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
optimizer = torch.optim.NAdam(model.parameters(), lr=5e-3, weight_decay=5e-4)
if device == "cuda":
    print(f"graph + model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    logits = model(x, src, dst, inv_deg)
    loss = F.cross_entropy(logits[train_idx], y[train_idx])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    pred = model(x, src, dst, inv_deg).argmax(-1)
    acc = (pred == y).float().mean()
    print(f"accuracy {acc.item():.3f}")
if device == "cuda":
    print(f"inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
