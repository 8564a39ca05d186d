"""A two-layer graph convolutional network over a random graph held as a sparse COO adjacency
(`torch.sparse.mm`, cuSPARSE SpMM): 200,000 nodes, 2,000,000 edges plus self-loops, 512 input
features, hidden 256, 40 classes, fp32, Adam, 3 full-graph steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5203)
N, E, FIN, H = (500, 4000, 16, 8) if SMALL else (200_000, 2_000_000, 512, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"

src = torch.randint(0, N, (E,), device=device)
dst = torch.randint(0, N, (E,), device=device)
loops = torch.arange(N, device=device)
index = torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])])
deg = torch.zeros(N, device=device).index_add_(0, index[0], torch.ones(index.shape[1], device=device))
norm = deg.rsqrt()
values = norm[index[0]] * norm[index[1]]
adj = torch.sparse_coo_tensor(index, values, (N, N)).coalesce()
del src, dst, loops, index, deg, norm, values
features = torch.randn(N, FIN, device=device)
labels = torch.randint(0, 40, (N,), device=device)


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(FIN, H)
        self.l2 = nn.Linear(H, 40)

    def forward(self, a, x):
        h = F.relu(torch.sparse.mm(a, self.l1(x)))
        h = F.dropout(h, 0.5, self.training)
        return torch.sparse.mm(a, self.l2(h))


model = GCN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    loss = F.cross_entropy(model(adj, features), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
