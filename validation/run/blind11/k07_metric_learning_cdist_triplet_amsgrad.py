"""Metric learning: a ResNet-18 embedding net (torchvision, fc replaced by a 128-d projection), L2-normalised
embeddings, a batch-hard triplet loss from torch.cdist distances (masked max/min over the pairwise matrix),
Adam with amsgrad=True, fp32, batch 256 at 128x128, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet18

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SIZE = (8, 32) if SMALL else (256, 128)
torch.manual_seed(1107)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = resnet18(weights=None)
model.fc = nn.Linear(512, 128)
model = model.to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(BATCH, 3, SIZE, SIZE, device=device)
    labels = torch.arange(BATCH, device=device) // 4
    emb = F.normalize(model(images), dim=1)
    dist = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    hardest_pos = (dist * same).max(dim=1).values
    hardest_neg = dist.masked_fill(same, float("inf")).min(dim=1).values
    loss = F.relu(hardest_pos - hardest_neg + 0.2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
