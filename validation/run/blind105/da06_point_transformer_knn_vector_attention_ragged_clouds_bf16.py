"""Point-cloud semantic segmentation with a Point Transformer (vector self-attention over 16
nearest neighbours: cdist + topk kNN with padded points masked out, relative-position MLP,
softmax over neighbours) on ragged batches: 6 clouds of 3,000 to 6,144 points whose sizes are drawn
on the host, padded on the GPU, valid points picked by an arange < lengths mask, per-point labels
packed on the host, and a cloud-level head pooled with scatter_reduce over repeat_interleave'd
cloud ids; 4 blocks of width 96, AdamW under bf16 autocast for 3 steps, then an inference_mode
pass over 6 new clouds; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10506)
B, NMAX, NMIN, K, C, BLOCKS, STEPS = (2, 128, 64, 8, 16, 2, 2) if SMALL else (6, 6144, 3000, 16, 96, 4, 3)
CLASSES, SHAPES = 13, 8
device = "cuda" if torch.cuda.is_available() else "cpu"


class PointTransformerBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.pos = nn.Sequential(nn.Linear(3, c), nn.ReLU(inplace=True), nn.Linear(c, c))
        self.gamma = nn.Sequential(nn.Linear(c, c), nn.ReLU(inplace=True), nn.Linear(c, c))
        self.out = nn.Linear(c, c)

    def forward(self, x, xyz, flat_idx):
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        k_j = k.reshape(b * n, c)[flat_idx]
        v_j = v.reshape(b * n, c)[flat_idx]
        rel = xyz.unsqueeze(2) - xyz.reshape(b * n, 3)[flat_idx]
        delta = self.pos(rel)
        w = self.gamma(q.unsqueeze(2) - k_j + delta).softmax(dim=2)
        y = (w * (v_j + delta)).sum(dim=2)
        return x + self.out(y)


class PointTransformerSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(6, C), nn.ReLU(inplace=True), nn.Linear(C, C))
        self.blocks = nn.ModuleList(PointTransformerBlock(C) for _ in range(BLOCKS))
        self.seg = nn.Sequential(nn.LayerNorm(C), nn.Linear(C, CLASSES))
        self.cls = nn.Linear(C, SHAPES)

    def forward(self, xyz, rgb, valid, cloud_ids):
        b, n, _ = xyz.shape
        with torch.no_grad():
            d = torch.cdist(xyz.float(), xyz.float())
            d = d.masked_fill(~valid[:, None, :], float("inf"))
            idx = d.topk(K, dim=-1, largest=False).indices
            flat_idx = idx + (torch.arange(b, device=xyz.device) * n).view(b, 1, 1)
            del d, idx
        x = self.embed(torch.cat([xyz, rgb], dim=-1))
        for blk in self.blocks:
            x = blk(x, xyz, flat_idx)
        feats = x[valid]
        pooled = torch.zeros(b, C, device=x.device, dtype=feats.dtype).scatter_reduce(
            0, cloud_ids[:, None].expand(-1, C), feats, reduce="amax", include_self=False
        )
        return self.seg(feats), self.cls(pooled)


def make_batch():
    lengths = torch.randint(NMIN, NMAX + 1, (B,))
    lengths[0] = NMAX
    labels = torch.cat([torch.randint(0, CLASSES, (int(n),)) for n in lengths])
    cloud_ids = torch.repeat_interleave(torch.arange(B), lengths)
    shape_labels = torch.randint(0, SHAPES, (B,))
    xyz = torch.rand(B, NMAX, 3, device=device) * 4
    rgb = torch.rand(B, NMAX, 3, device=device)
    lengths_d = lengths.to(device)
    valid = torch.arange(NMAX, device=device)[None, :] < lengths_d[:, None]
    xyz = xyz.masked_fill(~valid[..., None], 1e4)
    return xyz, rgb, valid, labels.to(device), cloud_ids.to(device), shape_labels.to(device)


model = PointTransformerSeg().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    xyz, rgb, valid, labels, cloud_ids, shape_labels = make_batch()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        seg, cls = model(xyz, rgb, valid, cloud_ids)
        loss = F.cross_entropy(seg.float(), labels) + 0.5 * F.cross_entropy(cls.float(), shape_labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} points {labels.numel()} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del xyz, rgb, valid, labels, cloud_ids, shape_labels, seg, cls, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    xyz, rgb, valid, labels, cloud_ids, shape_labels = make_batch()
    seg, cls = model(xyz, rgb, valid, cloud_ids)
    acc = (seg.argmax(-1) == labels).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
