"""Embedding + masked mean-pooling text classifier with an MLP head (no torch.compile), Adagrad; a try/except
torch.OutOfMemoryError on an oversized eval batch, then empty_cache and more training."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, SEQ, B, CLASSES, HUGE = (
    (500, 16, 12, 4, 3, 8) if os.environ.get("SMOKE") else (200000, 384, 256, 1024, 20, 2**20)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(9)


class MeanPoolClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.mlp = nn.Sequential(
            nn.Linear(DIM, 1024),
            nn.GELU(),
            nn.Dropout(0.1),
            nn.Linear(1024, 512),
            nn.GELU(),
            nn.Linear(512, CLASSES),
        )

    def forward(self, tokens):
        mask = (tokens != 0).unsqueeze(-1).float()
        summed = (self.embed(tokens) * mask).sum(dim=1)
        pooled = summed / mask.sum(dim=1).clamp(min=1.0)
        return self.mlp(pooled)


def make_batch(n):
    tokens = torch.randint(1, VOCAB, (n, SEQ), device=device)
    lengths = torch.randint(8, SEQ + 1, (n,), device=device)
    tokens = tokens.masked_fill(torch.arange(SEQ, device=device)[None, :] >= lengths[:, None], 0)
    return tokens, torch.randint(0, CLASSES, (n,), device=device)


model = MeanPoolClassifier().to(device)
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05)
if device == "cuda":
    print(f"model + adagrad state {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def train(steps):
    model.train()
    for _ in range(steps):
        tokens, labels = make_batch(B)
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


print(f"loss {train(3):.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
try:
    with torch.no_grad():
        tokens, _ = make_batch(HUGE)
        preds = model(tokens).argmax(dim=-1)
    print(f"huge eval batch {HUGE} fit: {preds.shape}")
except torch.OutOfMemoryError:
    print(f"eval batch {HUGE} does not fit")
tokens = preds = None
if device == "cuda":
    print(f"after OOM try peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.empty_cache()
    print(f"after empty_cache reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

print(f"loss {train(2):.4f}")
if device == "cuda":
    print(f"second train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
