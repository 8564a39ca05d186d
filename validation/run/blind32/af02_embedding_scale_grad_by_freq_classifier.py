"""A fastText-style text classifier: nn.Embedding(scale_grad_by_freq=True) over a 500k vocabulary
(300-d), mean over 400 tokens, two linear layers, 50 classes; fp32, batch 256, Adagrad, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3202)
V, D, S, B, C = (1000, 16, 20, 4, 5) if SMALL else (500_000, 300, 400, 256, 50)
device = "cuda" if torch.cuda.is_available() else "cpu"


class FastText(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D, scale_grad_by_freq=True)
        self.fc1, self.fc2 = nn.Linear(D, 256), nn.Linear(256, C)

    def forward(self, ids):
        return self.fc2(F.relu(self.fc1(self.emb(ids).mean(dim=1))))


model = FastText().to(device)
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S), device=device)
    y = torch.randint(0, C, (B,), device=device)
    loss = F.cross_entropy(model(ids), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
