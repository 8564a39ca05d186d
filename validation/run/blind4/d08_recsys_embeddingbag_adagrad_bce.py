"""Click-through model: nn.Embedding user/item ids (4M and 1M rows), nn.EmbeddingBag over 2-D fixed-length
histories (mode="sum" with per_sample_weights and padding_idx, and mode="max"), dense feature MLP, concat +
MLP tower, BCEWithLogitsLoss, Adagrad (dense grads), 3 steps; then scoring under no_grad."""

import os

import torch
import torch.nn as nn

USERS, ITEMS, DIM, HIST, DENSE, B = (
    (1000, 500, 8, 5, 4, 16) if os.environ.get("SMOKE") else (4_000_000, 1_000_000, 64, 50, 32, 8192)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(48)


class CTRModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(USERS, DIM)
        self.item = nn.Embedding(ITEMS, DIM)
        self.hist_sum = nn.EmbeddingBag(ITEMS, DIM, mode="sum", padding_idx=0)
        self.hist_max = nn.EmbeddingBag(ITEMS, DIM, mode="max")
        self.dense = nn.Sequential(nn.Linear(DENSE, DIM), nn.ReLU())
        self.tower = nn.Sequential(
            nn.Linear(5 * DIM, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1)
        )

    def forward(self, user, item, hist, hist_w, feats):
        parts = [
            self.user(user),
            self.item(item),
            self.hist_sum(hist, per_sample_weights=hist_w),
            self.hist_max(hist),
            self.dense(feats),
        ]
        return self.tower(torch.cat(parts, dim=1)).squeeze(1)


def batch():
    user = torch.randint(0, USERS, (B,), device=device)
    item = torch.randint(0, ITEMS, (B,), device=device)
    hist = torch.randint(0, ITEMS, (B, HIST), device=device)
    hist_w = torch.rand(B, HIST, device=device)
    feats = torch.randn(B, DENSE, device=device)
    return user, item, hist, hist_w, feats


model = CTRModel().to(device)
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01, initial_accumulator_value=0.1)
criterion = nn.BCEWithLogitsLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    inputs = batch()
    labels = torch.randint(0, 2, (B,), device=device).float()
    loss = criterion(model(*inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    scores = torch.sigmoid(model(*batch())).cpu()
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(scores.shape, scores.mean().item())
