"""Exact k-nearest-neighbour retrieval on the GPU: a database of 200k 256-d fp32 embeddings,
queries in chunks of 4096: torch.cdist, topk(k=10, largest=False), gather of the neighbours'
labels, a majority vote with torch.mode; under inference_mode; 2 phases (load, search)."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3106)
N, D, Q, C = (512, 16, 64, 32) if SMALL else (200_000, 256, 16384, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"
db = torch.randn(N, D, device=device)
labels = torch.randint(0, 100, (N,), device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
preds = []
with torch.inference_mode():
    queries = torch.randn(Q, D, device=device)
    for start in range(0, Q, C):
        d = torch.cdist(queries[start : start + C], db)
        dist, idx = d.topk(10, dim=1, largest=False)
        preds.append(labels[idx].mode(dim=1).values)
        del d, dist, idx
    pred = torch.cat(preds)
print(tuple(pred.shape))
if device == "cuda":
    print(f"search peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
