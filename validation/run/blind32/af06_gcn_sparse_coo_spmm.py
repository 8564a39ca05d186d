"""A two-layer graph convolutional network on a sparse normalized adjacency (torch.sparse_coo_tensor,
coalesced, 100k nodes, 1.6M edges) with torch.sparse.mm for the propagation, 128-d input features,
256 hidden units, 40 classes, dropout, fp32, full-batch training, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3206)
N, E, Fin, Hd, C = (200, 1000, 8, 16, 4) if SMALL else (100_000, 1_600_000, 128, 256, 40)
device = "cuda" if torch.cuda.is_available() else "cpu"
src = torch.randint(0, N, (E,), device=device)
dst = torch.randint(0, N, (E,), device=device)
idx = torch.cat([torch.stack([src, dst]), torch.arange(N, device=device).expand(2, N)], dim=1)
deg = torch.zeros(N, device=device).index_add_(0, idx[0], torch.ones(idx.shape[1], device=device))
val = deg[idx[0]].rsqrt() * deg[idx[1]].rsqrt()
adj = torch.sparse_coo_tensor(idx, val, (N, N)).coalesce()
del src, dst, idx, deg, val
x = torch.randn(N, Fin, device=device)
y = torch.randint(0, C, (N,), device=device)
lin1, lin2 = nn.Linear(Fin, Hd).to(device), nn.Linear(Hd, C).to(device)
optimizer = torch.optim.Adam([*lin1.parameters(), *lin2.parameters()], lr=0.01, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    h = F.dropout(F.relu(torch.sparse.mm(adj, lin1(x))), p=0.5)
    loss = F.cross_entropy(torch.sparse.mm(adj, lin2(h)), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del h, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
