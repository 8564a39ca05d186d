"""Metric learning on a torchvision ResNet-34 embedder (128-d, L2-normalised) at batch 96 of
224x224 under fp16 autocast with GradScaler: a pdist-based spread regulariser, a margin ranking
loss on anchor-positive vs anchor-negative distances, and a triplet loss with a cosine distance
function; SGD with Nesterov momentum, 2 steps, then embedding a gallery of 512 under no_grad and
its full cdist matrix; 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5704)
B, HW, G = (6, 64, 8) if SMALL else (96, 224, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.resnet34(num_classes=128).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")


def cosine_distance(a, b):
    return 1.0 - F.cosine_similarity(a, b)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    anchor = torch.randn(B, 3, HW, HW, device=device)
    positive = anchor + 0.1 * torch.randn_like(anchor)
    negative = torch.randn(B, 3, HW, HW, device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        emb = F.normalize(model(torch.cat([anchor, positive, negative])).float(), dim=-1)
        a, p, n = emb.chunk(3)
        spread = torch.pdist(a).clamp(max=1.0).mean()
        d_ap = (a - p).norm(dim=-1)
        d_an = (a - n).norm(dim=-1)
        rank = F.margin_ranking_loss(d_an, d_ap, torch.ones_like(d_ap), margin=0.2)
        trip = F.triplet_margin_with_distance_loss(a, p, n, distance_function=cosine_distance, margin=0.3)
        loss = rank + trip - 0.1 * spread
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del anchor, positive, negative, emb, a, p, n, spread, d_ap, d_an, rank, trip, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    gallery = torch.cat([model(torch.randn(G // 4, 3, HW, HW, device=device)) for _ in range(4)])
    gallery = F.normalize(gallery.float(), dim=-1)
    dist = torch.cdist(gallery, gallery)
if device == "cuda":
    print(f"gallery {tuple(dist.shape)} peak {torch.cuda.max_memory_allocated()}")
