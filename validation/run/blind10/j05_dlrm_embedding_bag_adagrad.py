"""A DLRM-style recommender: 8 nn.EmbeddingBag tables (mode="sum", 200k rows x 64, offsets input) and a
bottom MLP over 13 dense features, pairwise dot interactions (bmm, triu indices), a top MLP and
BCEWithLogits, Adagrad, batch 4096, 3 steps."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
ROWS, DIM, TABLES = (1000, 8, 2) if SMALL else (200_000, 64, 8)
BATCH, BAG = (8, 3) if SMALL else (4096, 20)
torch.manual_seed(1005)
device = "cuda" if torch.cuda.is_available() else "cpu"


class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(ROWS, DIM, mode="sum") for _ in range(TABLES))
        self.bottom = nn.Sequential(nn.Linear(13, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, DIM), nn.ReLU())
        pairs = (TABLES + 1) * TABLES // 2
        self.top = nn.Sequential(nn.Linear(DIM + pairs, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1))
        self.register_buffer("li", torch.triu_indices(TABLES + 1, TABLES + 1, offset=1)[0], persistent=False)
        self.register_buffer("lj", torch.triu_indices(TABLES + 1, TABLES + 1, offset=1)[1], persistent=False)

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        feats = [x] + [t(indices[i], offsets) for i, t in enumerate(self.tables)]
        t = torch.stack(feats, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


model = DLRM().to(device)
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
loss_fn = nn.BCEWithLogitsLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    dense = torch.randn(BATCH, 13, device=device)
    indices = torch.randint(0, ROWS, (TABLES, BATCH * BAG), device=device)
    offsets = torch.arange(0, BATCH * BAG, BAG, device=device)
    target = torch.randint(0, 2, (BATCH,), device=device).float()
    loss = loss_fn(model(dense, indices, offsets), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
