"""A point-cloud semantic segmentation network with dynamic voxelisation (PointPillars/VoxelNet-style
scatter pooling, written by hand): 8 scenes of 131,072 points each; voxel ids from the quantised
coordinates collapsed by torch.unique(return_inverse=True) per scene; a point MLP of 128, features
pooled to voxels with scatter_reduce (reduce "amax" and "mean", include_self=False) and gathered
back, a second stage pooling with index_reduce (reduce "mean" and "amax") onto the voxels, all with
backward; per-point 20-class logits, voxel-balanced cross-entropy weights from bincount; fp32,
AdamW, 4 steps; then an eval pass collecting the occupied voxels with nonzero over a count grid;
6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11806)
SC, P, C, NCLS, STEPS, VOX = (2, 2048, 16, 5, 2, 0.5) if SMALL else (8, 131072, 128, 20, 4, 0.2)
device = "cuda" if torch.cuda.is_available() else "cpu"


class VoxelSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.pt = nn.Sequential(nn.Linear(4, C), nn.LayerNorm(C), nn.ReLU(), nn.Linear(C, C))
        self.mix = nn.Sequential(nn.Linear(3 * C, 2 * C), nn.ReLU(), nn.Linear(2 * C, C))
        self.stage2 = nn.Linear(C, C)
        self.head = nn.Sequential(nn.Linear(3 * C, C), nn.ReLU(), nn.Linear(C, NCLS))

    def forward(self, pts, inv, nvox):
        f = self.pt(pts)
        idx = inv.unsqueeze(1).expand(-1, C)
        vmax = torch.zeros(nvox, C, device=f.device).scatter_reduce(0, idx, f, "amax", include_self=False)
        vmean = torch.zeros(nvox, C, device=f.device).scatter_reduce(0, idx, f, "mean", include_self=False)
        g = self.mix(torch.cat([f, vmax[inv], vmean[inv]], 1))
        h = self.stage2(g)
        v2mean = torch.zeros(nvox, C, device=f.device).index_reduce(0, inv, h, "mean", include_self=False)
        v2max = torch.zeros(nvox, C, device=f.device).index_reduce(0, inv, h, "amax", include_self=False)
        return self.head(torch.cat([g, v2mean[inv], v2max[inv]], 1))


def scenes():
    xyz = torch.rand(SC, P, 3, device=device) * torch.tensor([40.0, 40.0, 4.0], device=device)
    inten = torch.rand(SC, P, 1, device=device)
    labels = (xyz[..., 0] / 40 * NCLS).long().clamp_max(NCLS - 1)
    q = (xyz / VOX).long()
    key = (
        torch.arange(SC, device=device)[:, None] * 1_000_000_000
        + q[..., 0] * 1_000_000
        + q[..., 1] * 100
        + q[..., 2]
    )
    uniq, inv = torch.unique(key.flatten(), return_inverse=True)
    return torch.cat([xyz, inten], -1).flatten(0, 1), labels.flatten(), inv, uniq.numel()


model = VoxelSeg().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    pts, labels, inv, nvox = scenes()
    freq = torch.bincount(labels, minlength=NCLS).float()
    weight = freq.sum() / (NCLS * freq.clamp_min(1))
    loss = F.cross_entropy(model(pts, inv, nvox), labels, weight=weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} voxels {nvox} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pts, labels, inv, freq, weight, loss

model.eval()
with torch.no_grad():
    pts, labels, inv, nvox = scenes()
    pred = model(pts, inv, nvox).argmax(-1)
    grid = torch.zeros(SC, int(40 / VOX) + 1, int(40 / VOX) + 1, device=device)
    cell = (pts[:, :2] / VOX).long()
    scene = torch.arange(SC, device=device).repeat_interleave(P)
    grid.index_put_((scene, cell[:, 0], cell[:, 1]), torch.ones(SC * P, device=device), accumulate=True)
    occupied = grid.nonzero()
    acc = (pred == labels).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} occupied {occupied.size(0)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
