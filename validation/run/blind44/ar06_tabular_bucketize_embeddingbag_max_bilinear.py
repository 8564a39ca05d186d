"""A tabular click model: 13 dense features bucketized (torch.bucketize against per-feature
boundaries) and embedded, 26 sparse multi-hot fields through nn.EmbeddingBag(mode="max") with
offsets, an nn.Bilinear interaction of the two summaries and an MLP, BCE with logits, Adagrad
(foreach), batch 8192, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4406)
B, ROWS, D, HOT = (16, 100, 8, 3) if SMALL else (8192, 200000, 64, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bounds", torch.linspace(-3, 3, 63))
        self.dense_emb = nn.Embedding(13 * 64, D)
        self.bags = nn.ModuleList([nn.EmbeddingBag(ROWS, D, mode="max") for _ in range(26)])
        self.inter = nn.Bilinear(13 * D, 26 * D, 256)
        self.mlp = nn.Sequential(nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, sparse, offsets):
        idx = torch.bucketize(dense, self.bounds) + torch.arange(13, device=dense.device) * 64
        d = self.dense_emb(idx).flatten(1)
        s = torch.cat([bag(sparse[i], offsets) for i, bag in enumerate(self.bags)], dim=1)
        return self.mlp(self.inter(d, s)).squeeze(1)


model = Model().to(device)
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    dense = torch.randn(B, 13, device=device)
    sparse = torch.randint(0, ROWS, (26, B * HOT), device=device)
    offsets = torch.arange(0, B * HOT, HOT, device=device)
    y = torch.randint(0, 2, (B,), device=device).float()
    loss = F.binary_cross_entropy_with_logits(model(dense, sparse, offsets), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del dense, sparse, offsets, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
