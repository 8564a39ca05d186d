"""Point Transformer after Zhao et al. 2021 ("Point Transformer"), written by hand in pure PyTorch as in
the qq456cvb/Point-Transformers repository's Hengshuang model: each TransformerBlock finds the k = 16
nearest neighbours by the full squared-distance matrix and argsort, gathers keys, values and neighbour
coordinates by advanced indexing (index_points), and applies vector attention: the position encoding
delta = MLP(p_i - p_j) (3 -> 512 -> 512), the attention weights gamma(q_i - k_j + delta) (512 -> 512 ->
512), softmax over the neighbours (scaled by sqrt(512)), the values plus delta summed by einsum, then
fc2 back to the block's width plus the residual. The classification backbone: a 6 -> 32 -> 32 point
embedding and a block at 32, then four transition-down stages (farthest point sampling as a Python loop
keeping the running minimum with torch.min, kNN grouping of 16, Conv2d 1 x 1 + BatchNorm2d + ReLU and a
max over the group) to N/4, N/16, N/64, N/256 points and 64, 128, 256, 512 channels, each followed by a
block, mean pooling and a 512 -> 256 -> 64 -> 40 head. ModelNet40-shaped clouds of 1,024 points with
normals, bf16 autocast, AdamW (fused, lr 1e-3, weight decay 1e-4) with cosine warm restarts, batch 16:
the first step its own phase, then 3 steps; then the same model trained with every TransformerBlock
under torch.utils.checkpoint (use_reentrant=False) at batch 32 for 2 steps; then evaluation under
inference_mode and bf16 autocast at batch 64 (3 batches), the attention maps of the last block kept on
the host. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18304)
if SMALL:
    B, NPTS, STEPS, CK_B, CK_STEPS, EVAL_B, EVAL_N, D_MODEL = 2, 256, 2, 2, 1, 2, 1, 64
else:
    B, NPTS, STEPS, CK_B, CK_STEPS, EVAL_B, EVAL_N, D_MODEL = 16, 1024, 4, 32, 2, 64, 3, 512
NCLS, NNEIGHBOR, NBLOCKS = 40, 16, 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def square_distance(src, dst):
    return torch.sum((src[:, :, None] - dst[:, None]) ** 2, dim=-1)


def index_points(points, idx):
    raw_size = idx.size()
    idx = idx.reshape(raw_size[0], -1)
    res = torch.gather(points, 1, idx[..., None].expand(-1, -1, points.size(-1)))
    return res.reshape(*raw_size, -1)


def farthest_point_sample(xyz, npoint):
    B, N, _C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long, device=xyz.device)
    distance = torch.full((B, N), 1e10, device=xyz.device)
    farthest = torch.randint(0, N, (B,), dtype=torch.long, device=xyz.device)
    batch_indices = torch.arange(B, dtype=torch.long, device=xyz.device)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        distance = torch.min(distance, dist)
        farthest = torch.max(distance, -1)[1]
    return centroids


class TransformerBlock(nn.Module):
    def __init__(self, d_points, d_model, k):
        super().__init__()
        self.fc1 = nn.Linear(d_points, d_model)
        self.fc2 = nn.Linear(d_model, d_points)
        self.fc_delta = nn.Sequential(nn.Linear(3, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.fc_gamma = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.w_qs = nn.Linear(d_model, d_model, bias=False)
        self.w_ks = nn.Linear(d_model, d_model, bias=False)
        self.w_vs = nn.Linear(d_model, d_model, bias=False)
        self.k = k

    def forward(self, xyz, features):
        dists = square_distance(xyz, xyz)
        knn_idx = dists.argsort()[:, :, : self.k]  # b x n x k
        knn_xyz = index_points(xyz, knn_idx)
        pre = features
        x = self.fc1(features)
        q, k, v = self.w_qs(x), index_points(self.w_ks(x), knn_idx), index_points(self.w_vs(x), knn_idx)
        pos_enc = self.fc_delta(xyz[:, :, None] - knn_xyz)  # b x n x k x f
        attn = self.fc_gamma(q[:, :, None] - k + pos_enc)
        attn = F.softmax(attn / math.sqrt(k.size(-1)), dim=-2)  # b x n x k x f
        res = torch.einsum("bmnf,bmnf->bmf", attn, v + pos_enc)
        res = self.fc2(res) + pre
        return res, attn


class TransitionDown(nn.Module):
    def __init__(self, npoint, nneighbor, in_channel, mlp):
        super().__init__()
        self.npoint, self.nneighbor = npoint, nneighbor
        self.mlp_convs = nn.ModuleList()
        self.mlp_bns = nn.ModuleList()
        last = in_channel
        for out in mlp:
            self.mlp_convs.append(nn.Conv2d(last, out, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out))
            last = out

    def forward(self, xyz, points):
        B, _N, C = xyz.shape
        fps_idx = farthest_point_sample(xyz, self.npoint)
        new_xyz = index_points(xyz, fps_idx)
        dists = square_distance(new_xyz, xyz)
        idx = dists.argsort()[:, :, : self.nneighbor]
        grouped_xyz = index_points(xyz, idx)
        grouped_xyz_norm = grouped_xyz - new_xyz.view(B, self.npoint, 1, C)
        new_points = torch.cat([grouped_xyz_norm, index_points(points, idx)], dim=-1)
        new_points = new_points.permute(0, 3, 2, 1)  # [B, C+D, nsample, npoint]
        for conv, bn in zip(self.mlp_convs, self.mlp_bns, strict=True):
            new_points = F.relu(bn(conv(new_points)))
        new_points = torch.max(new_points, 2)[0].transpose(1, 2)
        return new_xyz, new_points


class PointTransformerCls(nn.Module):
    def __init__(self, npoints, d_points=6, d_model=512, nneighbor=16, nblocks=4, n_c=40):
        super().__init__()
        self.fc1 = nn.Sequential(nn.Linear(d_points, 32), nn.ReLU(), nn.Linear(32, 32))
        self.transformer1 = TransformerBlock(32, d_model, nneighbor)
        self.transition_downs = nn.ModuleList()
        self.transformers = nn.ModuleList()
        for i in range(nblocks):
            channel = 32 * 2 ** (i + 1)
            self.transition_downs.append(
                TransitionDown(npoints // 4 ** (i + 1), nneighbor, channel // 2 + 3, [channel, channel])
            )
            self.transformers.append(TransformerBlock(channel, d_model, nneighbor))
        self.fc2 = nn.Sequential(
            nn.Linear(32 * 2**nblocks, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, n_c)
        )
        self.nblocks = nblocks
        self.use_checkpoint = False

    def block(self, blk, xyz, points):
        if self.use_checkpoint and self.training:
            return checkpoint(blk, xyz, points, use_reentrant=False)
        return blk(xyz, points)

    def forward(self, x):
        xyz = x[..., :3]
        points = self.block(self.transformer1, xyz, self.fc1(x))[0]
        for i in range(self.nblocks):
            xyz, points = self.transition_downs[i](xyz, points)
            points, attn = self.block(self.transformers[i], xyz, points)
        return self.fc2(points.mean(1)), attn


def modelnet_batch(b, n):
    xyz = torch.rand(b, n, 3, device=device) * 2 - 1
    normals = F.normalize(torch.randn(b, n, 3, device=device), dim=-1)
    return torch.cat([xyz, normals], -1)


amp_device = "cuda" if device == "cuda" else "cpu"
model = PointTransformerCls(NPTS, d_model=D_MODEL, nneighbor=NNEIGHBOR, nblocks=NBLOCKS, n_c=NCLS).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, fused=device == "cuda")
scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=10)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(b):
    points = modelnet_batch(b, NPTS)
    target = torch.randint(0, NCLS, (b,), device=device)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        pred, _ = model(points)
        loss = F.cross_entropy(pred.float(), target)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


model.train()
for step in range(STEPS):
    loss = train_step(B)
    print(f"step {step} loss {loss:.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.use_checkpoint = True
for step in range(CK_STEPS):
    loss = train_step(CK_B)
    print(f"checkpointed step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"checkpointed peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
attn_maps, correct = [], 0
with torch.inference_mode(), torch.autocast(amp_device, dtype=torch.bfloat16):
    for _ in range(EVAL_N):
        points = modelnet_batch(EVAL_B, NPTS)
        target = torch.randint(0, NCLS, (EVAL_B,), device=device)
        pred, attn = model(points)
        correct += (pred.argmax(-1) == target).sum().item()
        attn_maps.append(attn.float().cpu())
print(f"eval acc {correct / (EVAL_N * EVAL_B):.3f} attn {tuple(attn_maps[0].shape)}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
