"""Batch-size finder: start from a batch that does not fit an 80 GB card, catch
torch.OutOfMemoryError, halve and retry, then train a few steps at the batch that fit."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

START, D, H = (64, 32, 64) if os.environ.get("SMOKE") else (2**21, 4096, 8192)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, H), nn.GELU(), nn.Linear(H, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()


def train_step(bs):
    x = torch.randn(bs, D, device=device)
    y = torch.randint(0, 10, (bs,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


batch_size = START
while batch_size >= 1:
    try:
        train_step(batch_size)
        print(f"batch size {batch_size} fits")
        break
    except torch.OutOfMemoryError:
        print(f"batch size {batch_size}: out of memory, halving")
        model.zero_grad(set_to_none=True)
        batch_size //= 2
        if device == "cuda":
            torch.cuda.empty_cache()
if device == "cuda":
    stats = torch.cuda.memory_stats()
    print(f"finder: ooms {stats['num_ooms']} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    loss = train_step(batch_size)
    if device == "cuda":
        print(f"step {step} loss {loss:.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
