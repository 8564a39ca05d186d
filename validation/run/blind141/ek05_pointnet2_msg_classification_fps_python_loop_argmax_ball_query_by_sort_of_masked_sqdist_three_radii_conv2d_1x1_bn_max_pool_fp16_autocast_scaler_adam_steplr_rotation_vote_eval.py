"""PointNet++ with multi-scale grouping for ModelNet40 classification (Qi et al. 2017, written
after the widely used Pointnet_Pointnet2_pytorch port): farthest point sampling as a Python loop
of `torch.max` over running minimum distances, the ball query of that port (square distances by
matmul, indices of points beyond the radius set to N by `masked_fill_`, `sort` along the last
dimension, the first nsample kept and the overflow replaced by the first index with `where`),
grouping by advanced indexing on a batch index, relative coordinates concatenated with features,
shared MLPs as Conv2d 1 x 1 with BatchNorm2d and ReLU, max pooling over each neighbourhood; two
MSG levels (512 centroids at radii 0.1 / 0.2 / 0.4 with 16 / 32 / 128 samples, 128 centroids at
0.2 / 0.4 / 0.8 with 32 / 64 / 128), a group-all level (the 2-D MLP over all 128 centroids), the
FC head with BatchNorm1d and dropout 0.4; 1,024 points with normals, batch 24, fp16 autocast with
GradScaler, Adam with StepLR, 3 steps; then test-time voting over 3 rotations about the up axis
(bmm of the coordinates and normals by rotation matrices) for 2 batches under no_grad; 5
phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14105)
B, NPTS, N_CLS = (4, 256, 10) if SMALL else (24, 1024, 40)
S1, S2 = (128, 16) if SMALL else (512, 128)
STEPS, VOTES, EVAL_BATCHES = (2, 2, 1) if SMALL else (3, 3, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"


def square_distance(src, dst):
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src**2, -1).view(src.shape[0], -1, 1)
    dist += torch.sum(dst**2, -1).view(src.shape[0], 1, -1)
    return dist


def index_points(points, idx):
    b = points.shape[0]
    view_shape = [b] + [1] * (idx.dim() - 1)
    batch = torch.arange(b, device=points.device).view(view_shape).expand_as(idx)
    return points[batch, idx, :]


def farthest_point_sample(xyz, npoint):
    b, n, _ = xyz.shape
    centroids = torch.zeros(b, npoint, dtype=torch.long, device=xyz.device)
    distance = torch.ones(b, n, device=xyz.device) * 1e10
    farthest = torch.randint(0, n, (b,), dtype=torch.long, device=xyz.device)
    batch_indices = torch.arange(b, dtype=torch.long, device=xyz.device)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(b, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        distance = torch.min(distance, dist)
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius, nsample, xyz, new_xyz):
    b, n, _ = xyz.shape
    s = new_xyz.shape[1]
    group_idx = torch.arange(n, dtype=torch.long, device=xyz.device).view(1, 1, n).repeat([b, s, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx.masked_fill_(sqrdists > radius**2, n)
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(b, s, 1).repeat([1, 1, nsample])
    group_idx = torch.where(group_idx == n, group_first, group_idx)
    return group_idx


class SetAbstractionMsg(nn.Module):
    def __init__(self, npoint, radii, nsamples, in_ch, mlps):
        super().__init__()
        self.npoint, self.radii, self.nsamples = npoint, radii, nsamples
        self.blocks = nn.ModuleList()
        for mlp in mlps:
            layers, last = [], in_ch + 3
            for out_ch in mlp:
                layers += [nn.Conv2d(last, out_ch, 1), nn.BatchNorm2d(out_ch), nn.ReLU()]
                last = out_ch
            self.blocks.append(nn.Sequential(*layers))

    def forward(self, xyz, points):
        xyz_t = xyz.permute(0, 2, 1)
        pts_t = points.permute(0, 2, 1)
        b = xyz_t.shape[0]
        new_xyz = index_points(xyz_t, farthest_point_sample(xyz_t, self.npoint))
        outs = []
        for radius, k, block in zip(self.radii, self.nsamples, self.blocks, strict=True):
            idx = query_ball_point(radius, k, xyz_t, new_xyz)
            grouped_xyz = index_points(xyz_t, idx) - new_xyz.view(b, self.npoint, 1, 3)
            grouped = torch.cat([index_points(pts_t, idx), grouped_xyz], dim=-1)
            grouped = block(grouped.permute(0, 3, 2, 1))
            outs.append(torch.max(grouped, 2)[0])
        return new_xyz.permute(0, 2, 1), torch.cat(outs, dim=1)


class GroupAll(nn.Module):
    def __init__(self, in_ch, mlp):
        super().__init__()
        layers, last = [], in_ch + 3
        for out_ch in mlp:
            layers += [nn.Conv2d(last, out_ch, 1), nn.BatchNorm2d(out_ch), nn.ReLU()]
            last = out_ch
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, points):
        grouped = torch.cat([xyz, points], dim=1).unsqueeze(2)
        return torch.max(self.mlp(grouped), 3)[0].squeeze(-1)


class PointNet2Msg(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa1 = SetAbstractionMsg(
            S1, [0.1, 0.2, 0.4], [16, 32, 128], 3, [[32, 32, 64], [64, 64, 128], [64, 96, 128]]
        )
        self.sa2 = SetAbstractionMsg(
            S2, [0.2, 0.4, 0.8], [32, 64, 128], 320, [[64, 64, 128], [128, 128, 256], [128, 128, 256]]
        )
        self.sa3 = GroupAll(640, [256, 512, 1024])
        self.head = nn.Sequential(
            nn.Linear(1024, 512),
            nn.BatchNorm1d(512),
            nn.ReLU(),
            nn.Dropout(0.4),
            nn.Linear(512, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.4),
            nn.Linear(256, N_CLS),
        )

    def forward(self, pc):
        xyz, norm = pc[:, :3, :], pc[:, 3:, :]
        l1_xyz, l1 = self.sa1(xyz, norm)
        l2_xyz, l2 = self.sa2(l1_xyz, l1)
        return F.log_softmax(self.head(self.sa3(l2_xyz, l2)), -1)


def make_clouds(b):
    xyz = torch.rand(b, NPTS, 3, device=device) * 2 - 1
    xyz = xyz / xyz.norm(dim=-1, keepdim=True).amax(dim=1, keepdim=True)
    normals = F.normalize(torch.randn(b, NPTS, 3, device=device), dim=-1)
    return torch.cat([xyz, normals], -1).transpose(1, 2).contiguous(), torch.randint(
        0, N_CLS, (b,), device=device
    )


model = PointNet2Msg().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.7)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    pc, label = make_clouds(B)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        logp = model(pc)
        loss = F.nll_loss(logp.float(), label)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del pc, logp, loss

model.eval()
correct = 0
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(EVAL_BATCHES):
        pc, label = make_clouds(B)
        votes = torch.zeros(B, N_CLS, device=device)
        for v in range(VOTES):
            theta = 2 * math.pi * v / VOTES
            c, s = math.cos(theta), math.sin(theta)
            rot = torch.tensor([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]], device=device).expand(B, 3, 3)
            xyz = torch.bmm(rot, pc[:, :3, :])
            nrm = torch.bmm(rot, pc[:, 3:, :])
            votes += model(torch.cat([xyz, nrm], 1)).float().exp()
        correct += (votes.argmax(-1) == label).sum().item()
if device == "cuda":
    print(
        f"vote acc {correct / (B * EVAL_BATCHES):.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
