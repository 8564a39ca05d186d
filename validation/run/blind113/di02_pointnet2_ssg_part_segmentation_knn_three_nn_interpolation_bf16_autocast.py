"""PointNet++ (single-scale grouping) for part segmentation, hand-written after Qi et al. 2017 and
the common PyTorch port: three set-abstraction levels (farthest point sampling as a Python loop
of argmax over running minimum distances, 512 / 128 / 32 centroids; k-nearest neighbours by
torch.cdist + topk; neighbourhoods gathered by advanced indexing, recentred and passed through
1x1 Conv2d + BatchNorm2d + ReLU, max over the neighbours), three feature-propagation levels
(three nearest known points by cdist + topk, inverse-distance weights, a gathered weighted sum,
the skip features concatenated, 1x1 Conv1d + BatchNorm1d), a 50-class per-point head with a
one-hot shape category; 16 clouds of 4,096 points, bf16 autocast, AdamW, 3 steps, then 64 clouds
under inference_mode in chunks of 16; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11302)
B, N, STEPS, NEVAL = (2, 256, 2, 4) if SMALL else (16, 4096, 3, 64)
NCAT, NPART = 16, 50
LEVELS = [(64, 8, 3 + 3, (32, 32, 64)), (16, 8, 64 + 3, (64, 64, 128)), (4, 8, 128 + 3, (128, 128, 256))]
if not SMALL:
    LEVELS = [
        (512, 32, 3 + 3, (64, 64, 128)),
        (128, 64, 128 + 3, (128, 128, 256)),
        (32, 32, 256 + 3, (256, 512, 1024)),
    ]
device = "cuda" if torch.cuda.is_available() else "cpu"


def farthest_point_sample(xyz, npoint):
    b, n, _ = xyz.shape
    centroids = torch.zeros(b, npoint, dtype=torch.long, device=xyz.device)
    distance = torch.full((b, n), 1e10, device=xyz.device)
    farthest = torch.randint(0, n, (b,), device=xyz.device)
    batch_idx = torch.arange(b, device=xyz.device)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_idx, farthest].unsqueeze(1)
        distance = torch.minimum(distance, ((xyz - centroid) ** 2).sum(-1))
        farthest = distance.argmax(-1)
    return centroids


def index_points(points, idx):
    b = points.size(0)
    batch_idx = torch.arange(b, device=points.device).view(b, *([1] * (idx.dim() - 1)))
    return points[batch_idx, idx]


class SetAbstraction(nn.Module):
    def __init__(self, npoint, k, cin, mlp):
        super().__init__()
        self.npoint, self.k = npoint, k
        layers = []
        for cout in mlp:
            layers += [nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout), nn.ReLU()]
            cin = cout
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, feats):
        with torch.no_grad():
            fps = farthest_point_sample(xyz, self.npoint)
        new_xyz = index_points(xyz, fps)
        knn = torch.cdist(new_xyz, xyz).topk(self.k, dim=-1, largest=False).indices
        grouped = index_points(xyz, knn) - new_xyz.unsqueeze(2)
        grouped = torch.cat([grouped, index_points(feats, knn)], -1)
        out = self.mlp(grouped.permute(0, 3, 2, 1))
        return new_xyz, out.max(2).values.transpose(1, 2)


class FeaturePropagation(nn.Module):
    def __init__(self, cin, mlp):
        super().__init__()
        layers = []
        for cout in mlp:
            layers += [nn.Conv1d(cin, cout, 1), nn.BatchNorm1d(cout), nn.ReLU()]
            cin = cout
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz1, xyz2, feats1, feats2):
        dist, idx = torch.cdist(xyz1, xyz2).topk(3, dim=-1, largest=False)
        w = 1.0 / (dist + 1e-8)
        w = w / w.sum(-1, keepdim=True)
        interp = (index_points(feats2, idx) * w.unsqueeze(-1)).sum(2)
        x = torch.cat([feats1, interp], -1) if feats1 is not None else interp
        return self.mlp(x.transpose(1, 2)).transpose(1, 2)


class PointNet2PartSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa = nn.ModuleList(SetAbstraction(*lv) for lv in LEVELS)
        c = [3] + [lv[3][-1] for lv in LEVELS]
        self.fp3 = FeaturePropagation(c[3] + c[2], (256, 256))
        self.fp2 = FeaturePropagation(256 + c[1], (256, 128))
        self.fp1 = FeaturePropagation(128 + 3 + 3 + NCAT, (128, 128, 128))
        self.head = nn.Sequential(
            nn.Conv1d(128, 128, 1), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5), nn.Conv1d(128, NPART, 1)
        )

    def forward(self, xyz, cat):
        xyzs, feats = [xyz], [xyz]
        for sa in self.sa:
            x, f = sa(xyzs[-1], feats[-1])
            xyzs.append(x)
            feats.append(f)
        f = self.fp3(xyzs[2], xyzs[3], feats[2], feats[3])
        f = self.fp2(xyzs[1], xyzs[2], feats[1], f)
        onehot = F.one_hot(cat, NCAT).to(xyz.dtype).unsqueeze(1).expand(-1, xyz.size(1), -1)
        f = self.fp1(xyz, xyzs[1], torch.cat([onehot, xyz, xyz], -1), f)
        return self.head(f.transpose(1, 2))


model = PointNet2PartSeg().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)


def clouds(n):
    xyz = torch.randn(n, N, 3, device=device)
    xyz = xyz / xyz.norm(dim=-1, keepdim=True).amax(1, keepdim=True)
    cat = torch.randint(0, NCAT, (n,), device=device)
    seg = torch.randint(0, NPART, (n, N), device=device)
    return xyz, cat, seg


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    xyz, cat, seg = clouds(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(xyz, cat)
        loss = F.cross_entropy(logits.float(), seg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del xyz, cat, seg, logits, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    xyz, cat, seg = clouds(NEVAL)
    pred = torch.cat([model(p, c).argmax(1) for p, c in zip(xyz.split(16), cat.split(16), strict=True)])
    acc = (pred == seg).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
