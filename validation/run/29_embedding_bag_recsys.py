"""DLRM-style recommender: nn.EmbeddingBag (mode="sum", offsets) for multi-hot features, nn.Embedding for
single ids, a dense MLP, pairwise dot interaction, BCE-with-logits loss, Adam."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, ROWS, DIM, BAG = (4, 100, 8, 3) if os.environ.get("SMOKE") else (4096, 1_000_000, 64, 20)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Recommender(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(ROWS, DIM)
        self.item = nn.Embedding(ROWS // 2, DIM)
        self.history = nn.EmbeddingBag(ROWS // 2, DIM, mode="sum")
        self.tags = nn.EmbeddingBag(10_000, DIM, mode="mean")
        self.dense = nn.Sequential(nn.Linear(13, 256), nn.ReLU(), nn.Linear(256, DIM), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(DIM + 10, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, user, item, hist, hist_offsets, tags, tag_offsets):
        feats = torch.stack(
            [
                self.dense(dense),
                self.user(user),
                self.item(item),
                self.history(hist, hist_offsets),
                self.tags(tags, tag_offsets),
            ],
            dim=1,
        )
        inter = torch.bmm(feats, feats.transpose(1, 2))
        i, j = torch.triu_indices(5, 5, offset=1, device=feats.device)
        z = torch.cat([feats[:, 0], inter[:, i, j]], dim=1)
        return self.top(z).squeeze(1)


model = Recommender().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"tables {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    dense = torch.randn(B, 13, device=device)
    user = torch.randint(0, ROWS, (B,), device=device)
    item = torch.randint(0, ROWS // 2, (B,), device=device)
    hist = torch.randint(0, ROWS // 2, (B * BAG,), device=device)
    hist_offsets = torch.arange(0, B * BAG, BAG, device=device)
    tag_lens = torch.randint(1, 6, (B,), device=device)
    tag_offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=device), tag_lens.cumsum(0)[:-1]])
    tags = torch.randint(0, 10_000, (int(tag_lens.sum()),), device=device)
    clicks = torch.randint(0, 2, (B,), device=device).float()
    logits = model(dense, user, item, hist, hist_offsets, tags, tag_offsets)
    loss = F.binary_cross_entropy_with_logits(logits, clicks)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
