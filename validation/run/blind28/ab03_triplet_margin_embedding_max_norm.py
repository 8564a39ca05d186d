"""Metric learning over item ids: an nn.Embedding of 500k x 128 with max_norm=1.0 (renormed in place
at each lookup), a two-layer tower, TripletMarginLoss(margin=0.2) over anchors, positives and
negatives of 8192 ids each, Adam, fp32, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2803)
N, D, B = (100, 8, 16) if SMALL else (500_000, 128, 8192)
device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(N, D, max_norm=1.0).to(device)
tower = nn.Sequential(nn.Linear(D, 256), nn.GELU(), nn.Linear(256, 64)).to(device)
loss_fn = nn.TripletMarginLoss(margin=0.2)
optimizer = torch.optim.Adam([*emb.parameters(), *tower.parameters()], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    a, p, n = (torch.randint(0, N, (B,), device=device) for _ in range(3))
    loss = loss_fn(tower(emb(a)), tower(emb(p)), tower(emb(n)))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del a, p, n, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
