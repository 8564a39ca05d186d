"""A two-tower recommender that deduplicates its ID batches before the embedding lookups, as large-vocabulary
recsys code does: torch.unique(ids, return_inverse=True) over user and item IDs (made on the CPU with a
seeded generator, so their values are known), nn.Embedding over the unique IDs, the rows gathered back by
the inverse, an MLP per tower and in-batch softmax; fp32, Adam, batch 4096, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
USERS, ITEMS, DIM, BATCH = (100, 200, 8, 16) if SMALL else (200_000, 500_000, 128, 4096)
torch.manual_seed(1401)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Tower(nn.Module):
    def __init__(self, rows):
        super().__init__()
        self.emb = nn.Embedding(rows, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, DIM))

    def forward(self, ids):
        uniq, inverse = torch.unique(ids, return_inverse=True)
        return F.normalize(self.mlp(self.emb(uniq)[inverse]), dim=-1)


users, items = Tower(USERS).to(device), Tower(ITEMS).to(device)
optimizer = torch.optim.Adam([*users.parameters(), *items.parameters()], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
g = torch.Generator().manual_seed(14)
for step in range(3):
    # skewed IDs: many repeats, as real traffic has
    u = (torch.rand(BATCH, generator=g) ** 3 * USERS).long().to(device)
    i = (torch.rand(BATCH, generator=g) ** 2 * ITEMS).long().to(device)
    logits = users(u) @ items(i).T / 0.05
    loss = F.cross_entropy(logits, torch.arange(BATCH, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
