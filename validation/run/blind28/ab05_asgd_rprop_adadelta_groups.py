"""Three less common optimizers with their CUDA defaults (foreach): ASGD on an embedding-bag text
classifier's embeddings, Rprop on its 2048-wide hidden layers, Adadelta on its head, fp32, batches of
4096 bags of 32 ids, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2805)
V, D, H, B, L = (100, 8, 16, 4, 3) if SMALL else (200_000, 256, 2048, 4096, 32)
device = "cuda" if torch.cuda.is_available() else "cpu"
bag = nn.EmbeddingBag(V, D, mode="mean").to(device)
hidden = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU()).to(device)
head = nn.Linear(H, 50).to(device)
opts = [
    torch.optim.ASGD(bag.parameters(), lr=0.01),
    torch.optim.Rprop(hidden.parameters(), lr=0.001),
    torch.optim.Adadelta(head.parameters()),
]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, L), device=device)
    labels = torch.randint(0, 50, (B,), device=device)
    loss = F.cross_entropy(head(hidden(bag(ids))), labels)
    loss.backward()
    for opt in opts:
        opt.step()
        opt.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
