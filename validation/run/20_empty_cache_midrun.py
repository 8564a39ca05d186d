"""Train a large MLP, delete it and its optimizer, torch.cuda.empty_cache() mid-run, then train a
smaller model: reserved memory before and after the cache is emptied."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

D, BIG, SMALL, B = (16, 64, 32, 8) if os.environ.get("SMOKE") else (1024, 8192, 2048, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def make(h):
    return nn.Sequential(nn.Linear(D, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, 10)).to(device)


def train(model, steps):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randn(B, D, device=device)
        y = torch.randint(0, 10, (B,), device=device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return opt


big = make(BIG)
opt = train(big, 2)
if device == "cuda":
    print(f"big model: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del big, opt
gc.collect()
if device == "cuda":
    print(f"after del: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.empty_cache()
    print(f"after empty_cache: reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

small = make(SMALL)
opt = train(small, 2)
if device == "cuda":
    print(f"small model: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
