"""torch.compile(model, mode="reduce-overhead") of a GELU MLP (4 layers of 2048, fp32) trained with
cross-entropy (eager, outside the compiled module) and AdamW (foreach), batch 1024, 4 steps: the
compiled forward and backward are warmed up, recorded, then replayed (each step's gradients are the
backward graph's outputs, in its pool); 5 phases (the model, then each step)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3106)
D, L, B, C = (32, 2, 8, 10) if SMALL else (2048, 4, 1024, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(L) for m in (nn.Linear(D, D), nn.GELU())], nn.Linear(D, C)).to(
    device
)
model = torch.compile(model, mode="reduce-overhead")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
x = torch.randn(B, D, device=device)
y = torch.randint(0, C, (B,), device=device)
for step in range(4):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
