"""A bag-of-words classifier over a 1,000,000-row nn.Embedding(sparse=True) (sparse gradients), mean
pooled, with a dense MLP head: torch.optim.SparseAdam for the embedding and Adam for the rest, fp32,
batch 2048 documents of 256 tokens, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1604)
ROWS, DIM, BATCH, TOKENS = (1000, 8, 4, 16) if SMALL else (1_000_000, 128, 2048, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(ROWS, DIM, sparse=True).to(device)
head = nn.Sequential(nn.Linear(DIM, 512), nn.ReLU(), nn.Linear(512, 20)).to(device)
opt_sparse = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-3)
opt_dense = torch.optim.Adam(head.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, ROWS, (BATCH, TOKENS), device=device)
    labels = torch.randint(0, 20, (BATCH,), device=device)
    loss = F.cross_entropy(head(emb(ids).mean(1)), labels)
    loss.backward()
    opt_sparse.step()
    opt_dense.step()
    opt_sparse.zero_grad(set_to_none=True)
    opt_dense.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
