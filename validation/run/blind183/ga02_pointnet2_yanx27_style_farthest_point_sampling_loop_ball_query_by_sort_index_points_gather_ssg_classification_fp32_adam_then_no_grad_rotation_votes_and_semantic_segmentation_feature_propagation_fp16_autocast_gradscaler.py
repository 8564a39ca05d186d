"""PointNet++ after Qi et al. 2017 ("PointNet++: Deep Hierarchical Feature Learning on Point Sets in a
Metric Space"), written by hand without CUDA extensions as in the yanx27/Pointnet_Pointnet2_pytorch
repository: farthest point sampling as a Python loop over the centroids (squared distances to the latest
centroid, the running minimum updated through a boolean mask, argmax), ball query by the full squared
distance matrix (-2 a b^T + |a|^2 + |b|^2), indices beyond the radius set to N, sorted and cut to nsample
with the first index filling the misses, and index_points gathering by advanced indexing. Classification
(pointnet2_cls_ssg on ModelNet40-shaped clouds of 1,024 points with normals, 6 channels): SA(512, 0.2,
32, [64, 64, 128]), SA(128, 0.4, 64, [128, 128, 256]), SA(group all, [256, 512, 1,024]) with Conv2d 1 x 1
+ BatchNorm2d + ReLU and max over the neighbourhood, then 1,024 -> 512 -> 256 -> 40 with dropout 0.4;
fp32, Adam (lr 1e-3, weight decay 1e-4) with StepLR(20, 0.7), batch 48, the first step its own phase,
then 3 steps. Evaluation under no_grad at batch 96 with 3 votes (the cloud rotated about the up axis,
the softmax scores summed). Then semantic segmentation (pointnet2_sem_seg on S3DIS-shaped blocks of
4,096 points with 9 channels, 13 classes): four SA levels (1,024 / 256 / 64 / 16 centroids, radii 0.1 to
0.8, 32 neighbours) and four feature-propagation levels (three nearest neighbours by sorted distances,
inverse-distance weights, Conv1d + BatchNorm1d), trained under fp16 autocast with torch.amp.GradScaler
and AdamW (lr 1e-3) at batch 16 for 2 steps with class-weighted nll_loss. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18302)
if SMALL:
    B, NPTS, STEPS, EVAL_B, VOTES, SEG_B, SEG_NPTS, SEG_STEPS = 4, 256, 2, 4, 2, 2, 512, 2
else:
    B, NPTS, STEPS, EVAL_B, VOTES, SEG_B, SEG_NPTS, SEG_STEPS = 48, 1024, 4, 96, 3, 16, 4096, 2
NCLS, NSEG = 40, 13
device = "cuda" if torch.cuda.is_available() else "cpu"


def square_distance(src, dst):
    B, N, _ = src.shape
    _, M, _ = dst.shape
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src**2, -1).view(B, N, 1)
    dist += torch.sum(dst**2, -1).view(B, 1, M)
    return dist


def index_points(points, idx):
    device = points.device
    B = points.shape[0]
    view_shape = list(idx.shape)
    view_shape[1:] = [1] * (len(view_shape) - 1)
    repeat_shape = list(idx.shape)
    repeat_shape[0] = 1
    batch_indices = torch.arange(B, dtype=torch.long).to(device).view(view_shape).repeat(repeat_shape)
    return points[batch_indices, idx, :]


def farthest_point_sample(xyz, npoint):
    device = xyz.device
    B, N, _C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long).to(device)
    distance = torch.ones(B, N).to(device) * 1e10
    farthest = torch.randint(0, N, (B,), dtype=torch.long).to(device)
    batch_indices = torch.arange(B, dtype=torch.long).to(device)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius, nsample, xyz, new_xyz):
    device = xyz.device
    B, N, _C = xyz.shape
    _, S, _ = new_xyz.shape
    group_idx = torch.arange(N, dtype=torch.long).to(device).view(1, 1, N).repeat([B, S, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx[sqrdists > radius**2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]
    return group_idx


def sample_and_group(npoint, radius, nsample, xyz, points):
    B, _N, C = xyz.shape
    S = npoint
    fps_idx = farthest_point_sample(xyz, npoint)
    new_xyz = index_points(xyz, fps_idx)
    idx = query_ball_point(radius, nsample, xyz, new_xyz)
    grouped_xyz = index_points(xyz, idx)
    grouped_xyz_norm = grouped_xyz - new_xyz.view(B, S, 1, C)
    if points is not None:
        grouped_points = index_points(points, idx)
        new_points = torch.cat([grouped_xyz_norm, grouped_points], dim=-1)
    else:
        new_points = grouped_xyz_norm
    return new_xyz, new_points


def sample_and_group_all(xyz, points):
    device = xyz.device
    B, N, C = xyz.shape
    new_xyz = torch.zeros(B, 1, C).to(device)
    grouped_xyz = xyz.view(B, 1, N, C)
    if points is not None:
        new_points = torch.cat([grouped_xyz, points.view(B, 1, N, -1)], dim=-1)
    else:
        new_points = grouped_xyz
    return new_xyz, new_points


class PointNetSetAbstraction(nn.Module):
    def __init__(self, npoint, radius, nsample, in_channel, mlp, group_all):
        super().__init__()
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        self.mlp_convs = nn.ModuleList()
        self.mlp_bns = nn.ModuleList()
        last_channel = in_channel
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv2d(last_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out_channel))
            last_channel = out_channel
        self.group_all = group_all

    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        if points is not None:
            points = points.permute(0, 2, 1)
        if self.group_all:
            new_xyz, new_points = sample_and_group_all(xyz, points)
        else:
            new_xyz, new_points = sample_and_group(self.npoint, self.radius, self.nsample, xyz, points)
        new_points = new_points.permute(0, 3, 2, 1)  # [B, C+D, nsample, npoint]
        for conv, bn in zip(self.mlp_convs, self.mlp_bns, strict=True):
            new_points = F.relu(bn(conv(new_points)))
        new_points = torch.max(new_points, 2)[0]
        new_xyz = new_xyz.permute(0, 2, 1)
        return new_xyz, new_points


class PointNetFeaturePropagation(nn.Module):
    def __init__(self, in_channel, mlp):
        super().__init__()
        self.mlp_convs = nn.ModuleList()
        self.mlp_bns = nn.ModuleList()
        last_channel = in_channel
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv1d(last_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm1d(out_channel))
            last_channel = out_channel

    def forward(self, xyz1, xyz2, points1, points2):
        xyz1 = xyz1.permute(0, 2, 1)
        xyz2 = xyz2.permute(0, 2, 1)
        points2 = points2.permute(0, 2, 1)
        B, N, _C = xyz1.shape
        _, S, _ = xyz2.shape
        if S == 1:
            interpolated_points = points2.repeat(1, N, 1)
        else:
            dists = square_distance(xyz1, xyz2)
            dists, idx = dists.sort(dim=-1)
            dists, idx = dists[:, :, :3], idx[:, :, :3]
            dist_recip = 1.0 / (dists + 1e-8)
            norm = torch.sum(dist_recip, dim=2, keepdim=True)
            weight = dist_recip / norm
            interpolated_points = torch.sum(index_points(points2, idx) * weight.view(B, N, 3, 1), dim=2)
        if points1 is not None:
            points1 = points1.permute(0, 2, 1)
            new_points = torch.cat([points1, interpolated_points], dim=-1)
        else:
            new_points = interpolated_points
        new_points = new_points.permute(0, 2, 1)
        for conv, bn in zip(self.mlp_convs, self.mlp_bns, strict=True):
            new_points = F.relu(bn(conv(new_points)))
        return new_points


class PointNet2ClsSSG(nn.Module):
    def __init__(self, num_class, normal_channel=True):
        super().__init__()
        in_channel = 6 if normal_channel else 3
        self.normal_channel = normal_channel
        self.sa1 = PointNetSetAbstraction(512, 0.2, 32, in_channel, [64, 64, 128], False)
        self.sa2 = PointNetSetAbstraction(128, 0.4, 64, 128 + 3, [128, 128, 256], False)
        self.sa3 = PointNetSetAbstraction(None, None, None, 256 + 3, [256, 512, 1024], True)
        self.fc1 = nn.Linear(1024, 512)
        self.bn1 = nn.BatchNorm1d(512)
        self.drop1 = nn.Dropout(0.4)
        self.fc2 = nn.Linear(512, 256)
        self.bn2 = nn.BatchNorm1d(256)
        self.drop2 = nn.Dropout(0.4)
        self.fc3 = nn.Linear(256, num_class)

    def forward(self, xyz):
        B, _, _ = xyz.shape
        if self.normal_channel:
            norm = xyz[:, 3:, :]
            xyz = xyz[:, :3, :]
        else:
            norm = None
        l1_xyz, l1_points = self.sa1(xyz, norm)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        _l3_xyz, l3_points = self.sa3(l2_xyz, l2_points)
        x = l3_points.view(B, 1024)
        x = self.drop1(F.relu(self.bn1(self.fc1(x))))
        x = self.drop2(F.relu(self.bn2(self.fc2(x))))
        x = F.log_softmax(self.fc3(x), -1)
        return x, l3_points


class PointNet2SemSeg(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.sa1 = PointNetSetAbstraction(1024, 0.1, 32, 9 + 3, [32, 32, 64], False)
        self.sa2 = PointNetSetAbstraction(256, 0.2, 32, 64 + 3, [64, 64, 128], False)
        self.sa3 = PointNetSetAbstraction(64, 0.4, 32, 128 + 3, [128, 128, 256], False)
        self.sa4 = PointNetSetAbstraction(16, 0.8, 32, 256 + 3, [256, 256, 512], False)
        self.fp4 = PointNetFeaturePropagation(768, [256, 256])
        self.fp3 = PointNetFeaturePropagation(384, [256, 256])
        self.fp2 = PointNetFeaturePropagation(320, [256, 128])
        self.fp1 = PointNetFeaturePropagation(128, [128, 128, 128])
        self.conv1 = nn.Conv1d(128, 128, 1)
        self.bn1 = nn.BatchNorm1d(128)
        self.drop1 = nn.Dropout(0.5)
        self.conv2 = nn.Conv1d(128, num_classes, 1)

    def forward(self, xyz):
        l0_points = xyz
        l0_xyz = xyz[:, :3, :]
        l1_xyz, l1_points = self.sa1(l0_xyz, l0_points)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        l3_xyz, l3_points = self.sa3(l2_xyz, l2_points)
        l4_xyz, l4_points = self.sa4(l3_xyz, l3_points)
        l3_points = self.fp4(l3_xyz, l4_xyz, l3_points, l4_points)
        l2_points = self.fp3(l2_xyz, l3_xyz, l2_points, l3_points)
        l1_points = self.fp2(l1_xyz, l2_xyz, l1_points, l2_points)
        l0_points = self.fp1(l0_xyz, l1_xyz, None, l1_points)
        x = self.drop1(F.relu(self.bn1(self.conv1(l0_points))))
        x = self.conv2(x)
        x = F.log_softmax(x, dim=1)
        return x.permute(0, 2, 1), l4_points


def modelnet_batch(b, n):
    xyz = torch.rand(b, n, 3, device=device) * 2 - 1
    normals = F.normalize(torch.randn(b, n, 3, device=device), dim=-1)
    return torch.cat([xyz, normals], -1).transpose(2, 1)


def rotate_up(points, angle):
    c, s = torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))
    rot = torch.tensor([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]], device=points.device)
    xyz = torch.matmul(rot, points[:, :3, :])
    nrm = torch.matmul(rot, points[:, 3:, :])
    return torch.cat([xyz, nrm], 1)


classifier = PointNet2ClsSSG(NCLS).to(device)
optimizer = torch.optim.Adam(
    classifier.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4
)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.7)
print(f"params {sum(p.numel() for p in classifier.parameters())}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

classifier.train()
for step in range(STEPS):
    points = modelnet_batch(B, NPTS)
    target = torch.randint(0, NCLS, (B,)).to(device)
    optimizer.zero_grad()
    pred, _ = classifier(points)
    loss = F.nll_loss(pred, target.long())
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
scheduler.step()
del points, target, pred, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

classifier.eval()
with torch.no_grad():
    points = modelnet_batch(EVAL_B, NPTS)
    target = torch.randint(0, NCLS, (EVAL_B,)).to(device)
    vote_pool = torch.zeros(EVAL_B, NCLS, device=device)
    for v in range(VOTES):
        pred, _ = classifier(rotate_up(points, 2 * torch.pi * v / VOTES))
        vote_pool += pred
    pred_choice = (vote_pool / VOTES).data.max(1)[1]
    acc = pred_choice.eq(target.long().data).cpu().sum().item() / EVAL_B
print(f"vote acc {acc:.3f}")
del points, target, vote_pool, pred, pred_choice
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

seg = PointNet2SemSeg(NSEG).to(device)
seg_opt = torch.optim.AdamW(seg.parameters(), lr=1e-3, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
class_weights = torch.rand(NSEG, device=device) + 0.5
seg.train()
for step in range(SEG_STEPS):
    xyz = torch.rand(SEG_B, SEG_NPTS, 3, device=device)
    rgb = torch.rand(SEG_B, SEG_NPTS, 3, device=device)
    blocks = torch.cat([xyz, rgb, xyz / xyz.amax(dim=1, keepdim=True)], -1).transpose(2, 1)
    labels = torch.randint(0, NSEG, (SEG_B, SEG_NPTS), device=device)
    seg_opt.zero_grad()
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.float16, enabled=device == "cuda"):
        seg_pred, _ = seg(blocks)
    loss = F.nll_loss(seg_pred.float().contiguous().view(-1, NSEG), labels.view(-1), weight=class_weights)
    scaler.scale(loss).backward()
    scaler.step(seg_opt)
    scaler.update()
    print(f"seg step {step} loss {loss.item():.4f} scale {scaler.get_scale() if device == 'cuda' else 1.0}")
if device == "cuda":
    print(f"seg peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
