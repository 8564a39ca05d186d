"""A Point Transformer (Zhao et al.) for part segmentation written by hand: k-nearest neighbours by
`torch.cdist` + `topk(largest=False)`, neighbour features and positions gathered by batched index
(`torch.gather` over an expanded index), vector self-attention (relative position MLP, the
subtraction relation, a softmax over the 16 neighbours per channel), transition-down by farthest
point sampling (a Python loop of argmax over running min distances) and max-pooling over kNN
groups, transition-up by three-nearest-neighbour inverse-distance interpolation and skip
connections; 8 x 4096 points, 50 part classes, label-smoothed cross-entropy, bf16 autocast,
AdamW with cosine annealing, 3 steps; then per-point predictions on 2 x 16,384 points under
no_grad in fp32; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13103)
B, N, EB, EN, K = (2, 512, 1, 1024, 8) if SMALL else (8, 4096, 2, 16384, 16)
DIMS = (32, 64, 128, 256)
NC = 50
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def knn(q, p, k):
    d = torch.cdist(q.float(), p.float())
    return d.topk(k, dim=-1, largest=False)  # (dist, idx) each B x M x k


def gather(x, idx):
    """x: B x N x C, idx: B x M x k -> B x M x k x C."""
    b, m, k = idx.shape
    flat = idx.reshape(b, m * k, 1).expand(-1, -1, x.shape[-1])
    return torch.gather(x, 1, flat).reshape(b, m, k, x.shape[-1])


def fps(p, m):
    b, n, _ = p.shape
    out = torch.zeros(b, m, dtype=torch.long, device=p.device)
    dist = torch.full((b, n), float("inf"), device=p.device)
    far = torch.zeros(b, dtype=torch.long, device=p.device)
    ar = torch.arange(b, device=p.device)
    for i in range(m):
        out[:, i] = far
        c = p[ar, far][:, None]
        dist = torch.minimum(dist, ((p - c) ** 2).sum(-1))
        far = dist.argmax(-1)
    return out


class PTLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.pos = nn.Sequential(nn.Linear(3, d), nn.ReLU(), nn.Linear(d, d))
        self.attn = nn.Sequential(nn.Linear(d, d // 4), nn.ReLU(), nn.Linear(d // 4, d))
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, p, x, idx):
        q, k, v = self.qkv(x).chunk(3, -1)
        rel = p[:, :, None] - gather(p, idx)
        delta = self.pos(rel)
        w = self.attn(q[:, :, None] - gather(k, idx) + delta).softmax(2)
        y = (w * (gather(v, idx) + delta)).sum(2)
        return self.norm(x + self.out(y))


class TransitionDown(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(cin + 3, cout), nn.LayerNorm(cout), nn.ReLU())

    def forward(self, p, x):
        m = p.shape[1] // 4
        sel = fps(p, m)
        pc = torch.gather(p, 1, sel[..., None].expand(-1, -1, 3))
        _, idx = knn(pc, p, K)
        feats = torch.cat([gather(p, idx) - pc[:, :, None], gather(x, idx)], -1)
        return pc, self.mlp(feats).max(2).values


class TransitionUp(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout)
        self.skip = nn.Linear(cout, cout)

    def forward(self, pc, xc, pf, xf):
        d, idx = knn(pf, pc, 3)
        w = 1.0 / (d + 1e-8)
        w = w / w.sum(-1, keepdim=True)
        up = (gather(self.lin(xc), idx) * w[..., None].to(xc.dtype)).sum(2)
        return up + self.skip(xf)


class PointTransformerSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(6, DIMS[0]), nn.ReLU())
        self.enc = nn.ModuleList([PTLayer(DIMS[0])] + [PTLayer(d) for d in DIMS[1:]])
        self.down = nn.ModuleList([TransitionDown(DIMS[i], DIMS[i + 1]) for i in range(len(DIMS) - 1)])
        self.up = nn.ModuleList([TransitionUp(DIMS[i + 1], DIMS[i]) for i in range(len(DIMS) - 1)])
        self.dec = nn.ModuleList([PTLayer(d) for d in DIMS[:-1]])
        self.head = nn.Sequential(nn.Linear(DIMS[0], DIMS[0]), nn.ReLU(), nn.Linear(DIMS[0], NC))

    def forward(self, p, feat):
        x = self.stem(torch.cat([p, feat], -1))
        _, idx = knn(p, p, K)
        x = self.enc[0](p, x, idx)
        levels = [(p, x)]
        for down, layer in zip(self.down, self.enc[1:], strict=True):
            p, x = down(p, x)
            _, idx = knn(p, p, K)
            x = layer(p, x, idx)
            levels.append((p, x))
        for i in range(len(DIMS) - 2, -1, -1):
            pf, xf = levels[i]
            x = self.up[i](p, x, pf, xf)
            p = pf
            _, idx = knn(p, p, K)
            x = self.dec[i](p, x, idx)
        return self.head(x)


model = PointTransformerSeg().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    pts = torch.randn(B, N, 3, device=device)
    nrm = F.normalize(torch.randn(B, N, 3, device=device), dim=-1)
    lab = torch.randint(0, NC, (B, N), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(pts, nrm)
        loss = F.cross_entropy(logits.reshape(-1, NC), lab.reshape(-1), label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss

model.eval()
pts = torch.randn(EB, EN, 3, device=device)
nrm = F.normalize(torch.randn(EB, EN, 3, device=device), dim=-1)
with torch.no_grad():
    pred = model(pts, nrm).argmax(-1)
    acc = (pred == torch.randint(0, NC, pred.shape, device=device)).float().mean()
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
