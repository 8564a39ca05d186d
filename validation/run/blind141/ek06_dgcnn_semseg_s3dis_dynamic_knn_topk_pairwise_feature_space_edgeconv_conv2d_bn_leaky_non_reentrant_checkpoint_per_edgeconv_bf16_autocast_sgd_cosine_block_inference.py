"""DGCNN for semantic segmentation (Wang et al. 2019, S3DIS setting, written after the authors'
PyTorch code): blocks of 4,096 points with 9 features (xyz, rgb, normalised room coordinates), 13
classes; the dynamic graph recomputed in every EdgeConv's input space (k = 20 nearest neighbours
by `topk` over -||xi - xj||^2 from a matmul and squared norms), the edge features gathered by the
code's `idx + idx_base` flattening of a (B * N, C) view, cat(x_j - x_i, x_i) permuted to
(B, 2C, N, k), Conv2d 1 x 1 + BatchNorm2d + LeakyReLU(0.2), max over the neighbours; three
EdgeConv stages (two 2-layer, one 1-layer) each wrapped in non-reentrant `checkpoint`, a
1,024-wide Conv1d global feature max-pooled and repeated over the points, the 3-layer Conv1d
segmentation head with dropout 0.5; bf16 autocast, SGD with momentum 0.9 and lr 0.1 (the
paper's), CosineAnnealingLR, cross-entropy with label smoothing 0.2, batch 12, 4 steps; then the
inference of a room of 10 blocks in two batches of 5 under no_grad, per-class intersection and
union by `index_add_`; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14106)
B, NPTS, K, N_CLS, EMB = (2, 512, 8, 13, 64) if SMALL else (12, 4096, 20, 13, 1024)
STEPS, ROOM_BLOCKS, INF_B = (2, 4, 2) if SMALL else (4, 10, 5)
device = "cuda" if torch.cuda.is_available() else "cpu"


def knn(x, k):
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x**2, dim=1, keepdim=True)
    pairwise_distance = -xx - inner - xx.transpose(2, 1)
    return pairwise_distance.topk(k=k, dim=-1)[1]


def get_graph_feature(x, k, dim9=False):
    b, c, n = x.shape
    idx = knn(x[:, 6:] if dim9 else x, k)
    idx_base = torch.arange(0, b, device=x.device).view(-1, 1, 1) * n
    idx = (idx + idx_base).view(-1)
    x = x.transpose(2, 1).contiguous()
    feature = x.view(b * n, -1)[idx, :].view(b, n, k, c)
    x = x.view(b, n, 1, c).repeat(1, 1, k, 1)
    return torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()


def conv_bn(cin, cout, dims=2):
    conv = nn.Conv2d(cin, cout, 1, bias=False) if dims == 2 else nn.Conv1d(cin, cout, 1, bias=False)
    bn = nn.BatchNorm2d(cout) if dims == 2 else nn.BatchNorm1d(cout)
    return nn.Sequential(conv, bn, nn.LeakyReLU(0.2))


class EdgeConv(nn.Module):
    def __init__(self, cin, couts, dim9=False):
        super().__init__()
        layers, last = [], 2 * cin
        for c in couts:
            layers.append(conv_bn(last, c))
            last = c
        self.mlp = nn.Sequential(*layers)
        self.dim9 = dim9

    def forward(self, x):
        return self.mlp(get_graph_feature(x, K, self.dim9)).max(dim=-1, keepdim=False)[0]


class DGCNNSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.ec1 = EdgeConv(9, [64, 64], dim9=True)
        self.ec2 = EdgeConv(64, [64, 64])
        self.ec3 = EdgeConv(64, [64])
        self.conv6 = conv_bn(192, EMB, dims=1)
        self.head = nn.Sequential(
            conv_bn(EMB + 192, 512, dims=1),
            conv_bn(512, 256, dims=1),
            nn.Dropout(0.5),
            nn.Conv1d(256, N_CLS, 1, bias=False),
        )

    def forward(self, x):
        n = x.shape[2]
        x1 = checkpoint(self.ec1, x, use_reentrant=False)
        x2 = checkpoint(self.ec2, x1, use_reentrant=False)
        x3 = checkpoint(self.ec3, x2, use_reentrant=False)
        x = torch.cat((x1, x2, x3), dim=1)
        g = self.conv6(x).max(dim=-1, keepdim=True)[0].repeat(1, 1, n)
        return self.head(torch.cat((g, x1, x2, x3), dim=1))


def make_blocks(b):
    xyz = torch.rand(b, 3, NPTS, device=device)
    rgb = torch.rand(b, 3, NPTS, device=device)
    norm_xyz = xyz * torch.rand(b, 3, 1, device=device)
    return torch.cat([xyz, rgb, norm_xyz], 1), torch.randint(0, N_CLS, (b, NPTS), device=device)


model = DGCNNSeg().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 100, eta_min=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    data, seg = make_blocks(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(data)
        loss = F.cross_entropy(logits.float(), seg, label_smoothing=0.2)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del data, seg, logits, loss

model.eval()
inter = torch.zeros(N_CLS, device=device)
union = torch.zeros(N_CLS, device=device)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(ROOM_BLOCKS // INF_B):
        data, seg = make_blocks(INF_B)
        pred = model(data).argmax(1)
        hit = pred == seg
        ones = torch.ones(seg.numel(), device=device)
        inter.index_add_(0, seg.flatten(), hit.flatten().float())
        union.index_add_(0, pred.flatten(), ones).index_add_(0, seg.flatten(), ones)
union -= inter
if device == "cuda":
    print(
        f"room miou {(inter / union.clamp(min=1)).mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
