"""PointNet++ set abstraction written by hand: farthest-point sampling as a loop of argmax over
running distances, ball grouping by `torch.cdist` and `topk` of the nearest 32 neighbours, gathered
relative coordinates through shared MLPs (1x1 Conv2d, BatchNorm2d, ReLU) and max-pooling, two levels
then a global one, 40-way classification; 8,192 points per cloud, batch 16, fp32, Adam, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5002)
B, N, K = (2, 256, 8) if SMALL else (16, 8192, 32)
CENTRES = (64, 16) if SMALL else (1024, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


def fps(xyz, m):
    b, n, _ = xyz.shape
    idx = torch.zeros(b, m, dtype=torch.long, device=xyz.device)
    dist = torch.full((b, n), 1e10, device=xyz.device)
    far = torch.zeros(b, dtype=torch.long, device=xyz.device)
    for i in range(m):
        idx[:, i] = far
        centre = xyz[torch.arange(b, device=xyz.device), far][:, None]
        dist = torch.minimum(dist, (xyz - centre).pow(2).sum(-1))
        far = dist.argmax(-1)
    return idx


def gather(points, idx):
    b = points.shape[0]
    batch = torch.arange(b, device=points.device).view(b, *([1] * (idx.dim() - 1)))
    return points[batch, idx]


class SetAbstraction(nn.Module):
    def __init__(self, m, cin, widths):
        super().__init__()
        self.m = m
        layers, c = [], cin + 3
        for w in widths:
            layers += [nn.Conv2d(c, w, 1), nn.BatchNorm2d(w), nn.ReLU()]
            c = w
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, feats):
        with torch.no_grad():
            centres_idx = fps(xyz, self.m)
        centres = gather(xyz, centres_idx)
        nn_idx = torch.cdist(centres, xyz).topk(K, dim=-1, largest=False).indices
        grouped = gather(xyz, nn_idx) - centres[:, :, None]
        if feats is not None:
            grouped = torch.cat([grouped, gather(feats, nn_idx)], -1)
        out = self.mlp(grouped.permute(0, 3, 1, 2)).amax(-1)
        return centres, out.transpose(1, 2)


class PointNet2(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa1 = SetAbstraction(CENTRES[0], 0, (64, 64, 128))
        self.sa2 = SetAbstraction(CENTRES[1], 128, (128, 128, 256))
        self.glob = nn.Sequential(nn.Linear(256 + 3, 512), nn.ReLU(), nn.Linear(512, 1024))
        self.head = nn.Sequential(nn.Linear(1024, 256), nn.ReLU(), nn.Dropout(0.4), nn.Linear(256, 40))

    def forward(self, xyz):
        c1, f1 = self.sa1(xyz, None)
        c2, f2 = self.sa2(c1, f1)
        g = self.glob(torch.cat([c2, f2], -1)).amax(1)
        return self.head(g)


model = PointNet2().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    xyz = torch.randn(B, N, 3, device=device)
    y = torch.randint(0, 40, (B,), device=device)
    loss = F.cross_entropy(model(xyz), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del xyz, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
