"""A two-tower recommender with sparse embedding gradients: nn.Embedding(sparse=True) tables of
1M users and 500k items (64 wide) trained with torch.optim.SparseAdam, the dense towers with Adam,
fp32, batch 8192, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3806)
U, NI, E, B = (100, 50, 8, 16) if SMALL else (1_000_000, 500_000, 64, 8192)


class Towers(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(U, E, sparse=True)
        self.items = nn.Embedding(NI, E, sparse=True)
        self.ut = nn.Sequential(nn.Linear(E, 256), nn.ReLU(), nn.Linear(256, 128))
        self.it = nn.Sequential(nn.Linear(E, 256), nn.ReLU(), nn.Linear(256, 128))

    def forward(self, u, i):
        return (self.ut(self.users(u)) * self.it(self.items(i))).sum(-1)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Towers().to(device)
sparse = torch.optim.SparseAdam(list(model.users.parameters()) + list(model.items.parameters()), lr=1e-3)
dense = torch.optim.Adam(list(model.ut.parameters()) + list(model.it.parameters()), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    u = torch.randint(0, U, (B,), device=device)
    i = torch.randint(0, NI, (B,), device=device)
    y = torch.rand(B, device=device)
    loss = F.binary_cross_entropy_with_logits(model(u, i), y)
    loss.backward()
    sparse.step()
    dense.step()
    sparse.zero_grad(set_to_none=True)
    dense.zero_grad(set_to_none=True)
    del u, i, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
