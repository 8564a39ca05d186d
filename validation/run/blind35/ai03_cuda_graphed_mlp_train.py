"""Training with CUDA graphs as the PyTorch docs show it: torch.cuda.make_graphed_callables over a
4-layer MLP (4096 wide, GELU, fp32) with a sample batch of 512, so the forward and the backward are
captured into graphs whose memory lives in a private pool, then 3 steps of SGD on new batches copied
into the graphed module's inputs; on a machine without CUDA the module runs eagerly; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3503)
B, D = (8, 32) if SMALL else (512, 4096)
cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
model = nn.Sequential(
    nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, 10)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if cuda:
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
    sample = torch.randn(B, D, device=device)
    model = torch.cuda.make_graphed_callables(model, (sample,))
    print(f"capture peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if cuda:
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
