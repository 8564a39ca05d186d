"""A DLRM click-through model trained with CUDA graphs where the shapes are static: the bottom MLP
(13 dense features to 512-256-128) and the top MLP (the 27 x 27 pairwise dot interaction to
1024-1024-512-256-1) are captured with torch.cuda.make_graphed_callables, while the 26 EmbeddingBags
(sum pooling, 1 to 3 ids per bag, cardinalities up to 400,000) run eagerly between them; fp32,
batch 8192, BCE with logits, Adagrad for the tables and SGD for the MLPs, 4 steps; then an eval
batch through the graphed modules under no_grad; 5 phases."""

import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11406)
B, D, NDENSE = (256, 16, 13) if SMALL else (8192, 128, 13)
CARDS = [(1000 + 97 * i * i * i) % (4000 if SMALL else 400000) + 10 for i in range(26)]
device = "cuda" if torch.cuda.is_available() else "cpu"


def mlp(sizes, last_act=True):
    layers = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if last_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


bottom = mlp([NDENSE, 512, 256, D]).to(device)
ni = len(CARDS) + 1
tri = torch.tril_indices(ni, ni, offset=-1, device=device)
top = mlp([D + ni * (ni - 1) // 2, 1024, 1024, 512, 256, 1], last_act=False).to(device)
tables = nn.ModuleList(nn.EmbeddingBag(c, D, mode="sum") for c in CARDS).to(device)

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
    sample_dense = torch.randn(B, NDENSE, device=device)
    sample_top = torch.randn(B, D + ni * (ni - 1) // 2, device=device, requires_grad=True)
    bottom, top = torch.cuda.make_graphed_callables((bottom, top), ((sample_dense,), (sample_top,)))
    del sample_dense, sample_top
    print(f"graphs captured peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

opt_dense = torch.optim.SGD([*bottom.parameters(), *top.parameters()], lr=0.1)
opt_sparse = torch.optim.Adagrad(tables.parameters(), lr=0.05)


def forward(dense, ids, offsets):
    x = bottom(dense)
    embs = [t(i, o) for t, i, o in zip(tables, ids, offsets, strict=True)]
    feats = torch.stack([x, *embs], dim=1)
    inter = torch.bmm(feats, feats.transpose(1, 2))[:, tri[0], tri[1]]
    return top(torch.cat([x, inter], dim=1)).squeeze(1)


def batch():
    dense = torch.randn(B, NDENSE, device=device).abs().log1p()
    ids, offsets = [], []
    for c in CARDS:
        per_bag = torch.randint(1, 4, (B,), device=device)
        offsets.append(torch.cumsum(per_bag, 0) - per_bag)
        ids.append(torch.randint(0, c, (int(per_bag.sum()),), device=device))
    y = torch.randint(0, 2, (B,), device=device).float()
    return dense, ids, offsets, y


for step in range(4):
    dense, ids, offsets, y = batch()
    loss = F.binary_cross_entropy_with_logits(forward(dense, ids, offsets), y)
    loss.backward()
    opt_dense.step()
    opt_sparse.step()
    opt_dense.zero_grad(set_to_none=True)
    opt_sparse.zero_grad(set_to_none=True)
    if device == "cuda" and step % 2 == 1:
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del dense, ids, offsets, y, loss
with torch.no_grad():
    dense, ids, offsets, y = batch()
    auc_proxy = (forward(dense, ids, offsets) > 0).float().eq(y).float().mean()
if device == "cuda":
    print(
        f"eval acc {auc_proxy.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
