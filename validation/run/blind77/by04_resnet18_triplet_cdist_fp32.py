"""Metric learning on a torchvision ResNet-18 trunk with a 128-d normalized embedding: batch-hard
triplet mining over `torch.cdist` pairwise distances (256 x 256), `TripletMarginWithDistanceLoss`
on the mined triplets plus a `CosineEmbeddingLoss` term, fp32, SGD with momentum, batch 256 at
128x128, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7704)
B, S, K = (8, 32, 4) if SMALL else (256, 128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
trunk = torchvision.models.resnet18(num_classes=128).to(device)
triplet = nn.TripletMarginWithDistanceLoss(distance_function=lambda a, b: (a - b).norm(dim=1), margin=0.2)
cosine = nn.CosineEmbeddingLoss(margin=0.1)
optimizer = torch.optim.SGD(trunk.parameters(), lr=0.05, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device)
    labels = torch.arange(B, device=device) % K
    emb = F.normalize(trunk(x), dim=1)
    dist = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    hardest_pos = dist.masked_fill(~same, -1.0).argmax(dim=1)
    hardest_neg = dist.masked_fill(same, float("inf")).argmin(dim=1)
    loss = triplet(emb, emb[hardest_pos], emb[hardest_neg])
    loss = loss + cosine(emb, emb[hardest_neg], -torch.ones(B, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, labels, emb, dist, same, hardest_pos, hardest_neg, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
