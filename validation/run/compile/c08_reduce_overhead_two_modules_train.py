"""Two modules compiled separately with mode="reduce-overhead" and trained together (a tree of CUDA
graphs: the second's forward runs while the first's backward is pending, so its recording follows
the first's in one tree): an encoder (2 GELU layers of 2048) and a head (2048 -> 1000), fp32,
cross-entropy, SGD with momentum, batch 1024, 4 steps; 5 phases (the model, each step)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3108)
D, B, C = (32, 8, 10) if SMALL else (2048, 1024, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
encoder = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU()).to(device)
head = nn.Linear(D, C).to(device)
params = [*encoder.parameters(), *head.parameters()]
encoder = torch.compile(encoder, mode="reduce-overhead")
head = torch.compile(head, mode="reduce-overhead")
optimizer = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
x = torch.randn(B, D, device=device)
y = torch.randint(0, C, (B,), device=device)
for step in range(4):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(head(encoder(x)), y)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
