"""Barlow Twins self-supervised pretraining: a torchvision RegNetY-800MF backbone with a 3-layer
4,096-wide BN projector, two noisy/flipped views, the 4,096 x 4,096 cross-correlation of the
batch-normalised embeddings (affine-free BatchNorm1d), on-diagonal (1 - c)^2 plus 0.005 x off-diagonal
c^2, fp32, SGD with momentum (no LARS), batch 128 at 128x128, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
from torchvision.models import regnet_y_800mf

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8704)
B, R, P = (4, 64, 32) if SMALL else (128, 128, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"
backbone = regnet_y_800mf()
feat = backbone.fc.in_features
backbone.fc = nn.Identity()
projector = nn.Sequential(
    nn.Linear(feat, P, bias=False),
    nn.BatchNorm1d(P),
    nn.ReLU(inplace=True),
    nn.Linear(P, P, bias=False),
    nn.BatchNorm1d(P),
    nn.ReLU(inplace=True),
    nn.Linear(P, P, bias=False),
)
model = nn.Sequential(backbone, projector).to(device)
bn = nn.BatchNorm1d(P, affine=False).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1.5e-6)


def off_diagonal(c):
    n = c.shape[0]
    return c.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    img = torch.randn(B, 3, R, R, device=device)
    y1 = img + 0.1 * torch.randn_like(img)
    y2 = img.flip(3) + 0.1 * torch.randn_like(img)
    z1, z2 = model(y1), model(y2)
    c = bn(z1).T @ bn(z2) / B
    on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
    off_diag = off_diagonal(c).pow_(2).sum()
    loss = on_diag + 0.005 * off_diag
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del img, y1, y2, z1, z2, c, on_diag, off_diag, loss
