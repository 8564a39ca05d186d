"""A retrieval / graph-style model: 2M-row item table (64 wide), per step 262,144 item ids deduplicated
with `torch.unique(return_inverse=True)`, the unique rows gathered, per-user max-pooling with
`scatter_reduce(reduce="amax", include_self=False)` into 8,192 users, an in-batch softmax over
8,192 x 8,192 scores, `argsort` of every user's scores (8,192 rows) for a recall metric; Adagrad, 3 steps."""

import os

import torch
from torch.nn import functional as F

SMALL = bool(os.environ.get("SMOKE"))
ROWS, DIM, IDS, USERS = (1000, 8, 512, 16) if SMALL else (2_000_000, 64, 262_144, 8192)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(906)
table = torch.nn.Parameter(torch.randn(ROWS, DIM, device=device) * 0.01)
user_tower = torch.nn.Sequential(torch.nn.Linear(DIM, 256), torch.nn.ReLU(), torch.nn.Linear(256, DIM)).to(device)
optimizer = torch.optim.Adagrad([table, *user_tower.parameters()], lr=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    items = torch.randint(0, ROWS, (IDS,), device=device)
    owner = torch.randint(0, USERS, (IDS,), device=device)
    unique, inverse = torch.unique(items, return_inverse=True)
    rows = table[unique][inverse]
    pooled = torch.zeros(USERS, DIM, device=device).scatter_reduce(0, owner[:, None].expand(-1, DIM), rows, reduce="amax", include_self=False)
    users = user_tower(pooled)
    positives = table[torch.randint(0, ROWS, (USERS,), device=device)]
    scores = users @ positives.T
    loss = F.cross_entropy(scores, torch.arange(USERS, device=device))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        rank = scores.argsort(dim=-1, descending=True)
        recall = (rank[:, :10] == torch.arange(USERS, device=device)[:, None]).any(-1).float().mean()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
