"""TransE knowledge-graph embeddings: 1M entities and 1k relations of 200 dimensions, L1 distances of
head + relation - tail for 16384 triples and as many corrupted ones, MarginRankingLoss(margin=1),
entity rows renormalised in place under no_grad after each step, Adam, fp32, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2904)
E, R, D, B = (100, 10, 8, 16) if SMALL else (1_000_000, 1000, 200, 16384)
device = "cuda" if torch.cuda.is_available() else "cpu"
ent = nn.Embedding(E, D).to(device)
rel = nn.Embedding(R, D).to(device)
loss_fn = nn.MarginRankingLoss(margin=1.0)
optimizer = torch.optim.Adam([*ent.parameters(), *rel.parameters()], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    h, t = torch.randint(0, E, (B,), device=device), torch.randint(0, E, (B,), device=device)
    r = torch.randint(0, R, (B,), device=device)
    t_bad = torch.randint(0, E, (B,), device=device)
    pos = (ent(h) + rel(r) - ent(t)).abs().sum(-1)
    neg = (ent(h) + rel(r) - ent(t_bad)).abs().sum(-1)
    loss = loss_fn(neg, pos, torch.ones(B, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        ent.weight.div_(ent.weight.norm(dim=1, keepdim=True).clamp_min(1.0))
    del h, t, r, t_bad, pos, neg, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
