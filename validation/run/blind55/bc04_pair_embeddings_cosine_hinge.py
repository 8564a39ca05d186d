"""Pairwise metric learning: a 4-layer MLP encoder (width 2048, 256-d embeddings) trained on pairs
with `cosine_embedding_loss` (margin 0.2) and on pair distances with `hinge_embedding_loss`, the
pairs' labels in {-1, 1}; batch 32,768 pairs of 512 features, fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5504)
B, FIN, W, E = (16, 32, 64, 16) if SMALL else (32768, 512, 2048, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
encoder = nn.Sequential(
    nn.Linear(FIN, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, E)
).to(device)
optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    a = torch.randn(B, FIN, device=device)
    b = torch.randn(B, FIN, device=device)
    target = torch.randint(0, 2, (B,), device=device).float() * 2 - 1
    ea, eb = encoder(a), encoder(b)
    loss = F.cosine_embedding_loss(ea, eb, target, margin=0.2)
    loss = loss + F.hinge_embedding_loss((ea - eb).norm(dim=-1), target, margin=1.0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del a, b, target, ea, eb, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
