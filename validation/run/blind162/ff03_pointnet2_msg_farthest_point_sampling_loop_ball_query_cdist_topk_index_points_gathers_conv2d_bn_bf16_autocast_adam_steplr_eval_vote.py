"""PointNet++ classification after yanx27's Pointnet_Pointnet2_pytorch (models/pointnet2_utils.py,
pointnet2_cls_msg.py), with the ball query written by torch.cdist and topk as pure-PyTorch ports
do: farthest point sampling as a Python loop over npoint iterations (a running distance kept by
torch.minimum, the next centroid by torch.max over points), index_points by advanced indexing with a
batch index built from arange, the ball query of each centroid's nsample nearest points by
cdist + topk(largest=False) with those outside the radius replaced by the nearest one, grouped
coordinates normalised to the centroid and concatenated to the point features, shared MLPs of
1 x 1 Conv2d + BatchNorm2d + ReLU and a max over the neighbours. Multi-scale grouping: SA1 512
centroids at radii 0.1/0.2/0.4 with 16/32/128 neighbours ([32,32,64], [64,64,128], [64,96,128]),
SA2 128 centroids at 0.2/0.4/0.8 with 32/64/128 ([64,64,128], [128,128,256], [128,128,256]), SA3
group-all [256,512,1024], then FC 1024-512-256-40 with BatchNorm1d and dropout 0.4; normals as
extra features (6 input channels). bf16 autocast, Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8,
weight decay 1e-4), StepLR, batch 24 of 1,024 points each with random scaling and shifting,
NLL loss over log_softmax, 3 steps (each its own phase), then evaluation under no_grad at batch 48
with 3 votes (random rotations about the up axis, the summed log-probabilities); 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16203)
if SMALL:
    B, N_POINTS, EVAL_B, VOTES, STEPS, SCALE = 2, 256, 2, 2, 3, 8
else:
    B, N_POINTS, EVAL_B, VOTES, STEPS, SCALE = 24, 1024, 48, 3, 3, 1
NUM_CLASS = 40
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def index_points(points, idx):
    """points: [B, N, C], idx: [B, S] or [B, S, K] -> [B, S, C] or [B, S, K, C]"""
    device = points.device
    B = points.shape[0]
    view_shape = list(idx.shape)
    view_shape[1:] = [1] * (len(view_shape) - 1)
    repeat_shape = list(idx.shape)
    repeat_shape[0] = 1
    batch_indices = torch.arange(B, dtype=torch.long).to(device).view(view_shape).repeat(repeat_shape)
    new_points = points[batch_indices, idx, :]
    return new_points


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
        distance = torch.minimum(distance, dist)
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius, nsample, xyz, new_xyz):
    """nsample nearest points of each centroid within radius (the nearest one where fewer are)."""
    dists = torch.cdist(new_xyz, xyz)  # [B, S, N]
    knn_dist, group_idx = dists.topk(nsample, dim=-1, largest=False)
    group_first = group_idx[:, :, 0:1].expand_as(group_idx)
    group_idx = torch.where(knn_dist > radius, group_first, group_idx)
    return group_idx


class PointNetSetAbstractionMsg(nn.Module):
    def __init__(self, npoint, radius_list, nsample_list, in_channel, mlp_list):
        super().__init__()
        self.npoint = npoint
        self.radius_list = radius_list
        self.nsample_list = nsample_list
        self.conv_blocks = nn.ModuleList()
        self.bn_blocks = nn.ModuleList()
        for i in range(len(mlp_list)):
            convs = nn.ModuleList()
            bns = nn.ModuleList()
            last_channel = in_channel + 3
            for out_channel in mlp_list[i]:
                convs.append(nn.Conv2d(last_channel, out_channel, 1))
                bns.append(nn.BatchNorm2d(out_channel))
                last_channel = out_channel
            self.conv_blocks.append(convs)
            self.bn_blocks.append(bns)

    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        if points is not None:
            points = points.permute(0, 2, 1)
        B, _N, C = xyz.shape
        S = self.npoint
        new_xyz = index_points(xyz, farthest_point_sample(xyz, S))
        new_points_list = []
        for i, radius in enumerate(self.radius_list):
            K = self.nsample_list[i]
            group_idx = query_ball_point(radius, K, xyz, new_xyz)
            grouped_xyz = index_points(xyz, group_idx)
            grouped_xyz -= new_xyz.view(B, S, 1, C)
            if points is not None:
                grouped_points = index_points(points, group_idx)
                grouped_points = torch.cat([grouped_points, grouped_xyz], dim=-1)
            else:
                grouped_points = grouped_xyz
            grouped_points = grouped_points.permute(0, 3, 2, 1)  # [B, D, K, S]
            for j in range(len(self.conv_blocks[i])):
                conv = self.conv_blocks[i][j]
                bn = self.bn_blocks[i][j]
                grouped_points = F.relu(bn(conv(grouped_points)))
            new_points = torch.max(grouped_points, 2)[0]  # [B, D', S]
            new_points_list.append(new_points)
        new_xyz = new_xyz.permute(0, 2, 1)
        new_points_concat = torch.cat(new_points_list, dim=1)
        return new_xyz, new_points_concat


class PointNetSetAbstraction(nn.Module):
    """The group-all abstraction."""

    def __init__(self, in_channel, mlp):
        super().__init__()
        self.mlp_convs = nn.ModuleList()
        self.mlp_bns = nn.ModuleList()
        last_channel = in_channel
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv2d(last_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out_channel))
            last_channel = out_channel

    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        points = points.permute(0, 2, 1)
        B, N, C = xyz.shape
        new_xyz = torch.zeros(B, 1, C).to(xyz.device)
        grouped_xyz = xyz.view(B, 1, N, C)
        new_points = torch.cat([grouped_xyz, points.view(B, 1, N, -1)], dim=-1)
        new_points = new_points.permute(0, 3, 2, 1)  # [B, C+D, N, 1]
        for i, conv in enumerate(self.mlp_convs):
            bn = self.mlp_bns[i]
            new_points = F.relu(bn(conv(new_points)))
        new_points = torch.max(new_points, 2)[0]
        new_xyz = new_xyz.permute(0, 2, 1)
        return new_xyz, new_points


class get_model(nn.Module):
    def __init__(self, num_class, normal_channel=True):
        super().__init__()
        in_channel = 3 if normal_channel else 0
        self.normal_channel = normal_channel
        c = lambda xs: [max(x // SCALE, 4) for x in xs]  # noqa: E731
        self.sa1 = PointNetSetAbstractionMsg(
            512 // SCALE,
            [0.1, 0.2, 0.4],
            [n // SCALE for n in (16, 32, 128)],
            in_channel,
            [c([32, 32, 64]), c([64, 64, 128]), c([64, 96, 128])],
        )
        sa1_out = sum(c([64, 128, 128]))
        self.sa2 = PointNetSetAbstractionMsg(
            128 // SCALE,
            [0.2, 0.4, 0.8],
            [n // SCALE for n in (32, 64, 128)],
            sa1_out,
            [c([64, 64, 128]), c([128, 128, 256]), c([128, 128, 256])],
        )
        sa2_out = sum(c([128, 256, 256]))
        self.sa3 = PointNetSetAbstraction(sa2_out + 3, c([256, 512, 1024]))
        self.fc1 = nn.Linear(c([1024])[0], 512)
        self.bn1 = nn.BatchNorm1d(512)
        self.drop1 = nn.Dropout(0.4)
        self.fc2 = nn.Linear(512, 256)
        self.bn2 = nn.BatchNorm1d(256)
        self.drop2 = nn.Dropout(0.5)
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
        x = l3_points.view(B, -1)
        x = self.drop1(F.relu(self.bn1(self.fc1(x))))
        x = self.drop2(F.relu(self.bn2(self.fc2(x))))
        x = self.fc3(x)
        x = F.log_softmax(x, -1)
        return x, l3_points


class get_loss(nn.Module):
    def forward(self, pred, target, trans_feat):
        return F.nll_loss(pred, target)


def random_scale_point_cloud(points, scale_low=0.8, scale_high=1.25):
    scales = torch.empty(points.shape[0], 1, 1, device=points.device).uniform_(scale_low, scale_high)
    points[:, :, 0:3] *= scales
    return points


def shift_point_cloud(points, shift_range=0.1):
    shifts = torch.empty(points.shape[0], 1, 3, device=points.device).uniform_(-shift_range, shift_range)
    points[:, :, 0:3] += shifts
    return points


def make_batch(n):
    xyz = torch.randn(n, N_POINTS, 3, device=device)
    xyz = xyz / xyz.norm(dim=-1, keepdim=True).amax(dim=1, keepdim=True)
    normals = F.normalize(torch.randn(n, N_POINTS, 3, device=device), dim=-1)
    return torch.cat([xyz, normals], -1), torch.randint(0, NUM_CLASS, (n,), device=device)


classifier = get_model(NUM_CLASS, normal_channel=True).to(device)
criterion = get_loss()
optimizer = torch.optim.Adam(
    classifier.parameters(), lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-4
)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.7)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

classifier = classifier.train()
for step in range(STEPS):
    points, target = make_batch(B)
    points = random_scale_point_cloud(points)
    points = shift_point_cloud(points)
    points = points.transpose(2, 1)
    optimizer.zero_grad()
    with torch.autocast(**amp):
        pred, trans_feat = classifier(points)
        loss = criterion(pred.float(), target.long(), trans_feat)
    pred_choice = pred.data.max(1)[1]
    correct = pred_choice.eq(target.long().data).cpu().sum()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} acc {correct.item() / B:.3f}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
scheduler.step()

del pred, loss, trans_feat, points
classifier = classifier.eval()
with torch.no_grad():
    points, target = make_batch(EVAL_B)
    vote_pool = torch.zeros(target.size()[0], NUM_CLASS, device=device)
    for v in range(VOTES):
        theta = 2 * math.pi * v / VOTES
        rot = torch.tensor(
            [[math.cos(theta), 0, math.sin(theta)], [0, 1, 0], [-math.sin(theta), 0, math.cos(theta)]],
            device=device,
        )
        rotated = torch.cat([points[:, :, :3] @ rot, points[:, :, 3:] @ rot], -1).transpose(2, 1)
        with torch.autocast(**amp):
            pred, _ = classifier(rotated)
        vote_pool += pred.float()
    pred = vote_pool / VOTES
    pred_choice = pred.data.max(1)[1]
    acc = pred_choice.eq(target.long().data).float().mean()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"eval acc {acc.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
