"""DINO (Caron et al. 2021) self-distillation with no labels, after facebookresearch/dino's main_dino.py,
on random images, with a ViT-S/16 written by hand.

Backbone: ViT-Small/16 (384 wide, 12 blocks, 6 heads, pre-norm, attention through
F.scaled_dot_product_attention, GELU MLP of 1,536, drop path 0.1 in the student), class token, position
embeddings for 224 px bicubically interpolated for other crop sizes. DINO head: MLP 384 -> 2,048 -> 2,048
-> 256 with GELU, L2 normalization, a weight-normalized (torch.nn.utils.parametrizations.weight_norm,
magnitude frozen at 1) last layer to 65,536 prototypes. Student and an EMA teacher (a deepcopy, no
gradients, no drop path). Multi-crop: per image 2 global crops of 224 and 6 local crops of 96, the crops
of one resolution concatenated and run through the backbone at once (MultiCropWrapper), the head over all
outputs; the teacher sees the 2 global crops. Loss: cross-entropy between the teacher's centered,
sharpened softmax (temperature 0.04) and the student's softmax at 0.1 over every pair of different
views; the center is an EMA (0.9) of the teacher's batch mean. Batch 64 images, fp16 autocast with
torch.amp.GradScaler (unscale_, per-parameter-group clip at 3.0), AdamW with regularized / unregularized
groups (foreach default), the last layer's gradients set to None during the first "epoch" (all steps
here), teacher momentum 0.996 by torch._foreach_mul_ / _foreach_add_.

Phases: the first step; 3 more steps; k-NN evaluation: the teacher backbone's normalized class tokens for
a bank of 4,096 images and 1,024 queries (batches of 256, torch.inference_mode, fp16 autocast), cosine
similarities by one matmul, top-20 neighbours voting with exp(sim / 0.07) weights over 1,000 classes;
then a linear probe (DINO's eval_linear: class tokens of the last 4 blocks concatenated, 1,536 -> 1,000)
trained 3 steps over the frozen teacher backbone under torch.no_grad at batch 256, SGD momentum. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19705)
if SMALL:
    B, STEPS, BANK, QUERIES, EVAL_B, DEPTH, OUT_DIM, PROBE_B = 2, 1, 16, 8, 8, 2, 512, 4
else:
    B, STEPS, BANK, QUERIES, EVAL_B, DEPTH, OUT_DIM, PROBE_B = 64, 3, 4096, 1024, 256, 12, 65536, 256
DIM, HEADS, N_LOCAL = 384, 6, 6
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty(x.shape[0], 1, 1).bernoulli_(1 - self.p)
        return x * keep / (1 - self.p)


class Block(nn.Module):
    def __init__(self, dim, heads, dp):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.drop_path = DropPath(dp)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.drop_path(self.proj(a.transpose(1, 2).reshape(b, n, c)))
        return x + self.drop_path(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class ViT(nn.Module):
    def __init__(self, depth=DEPTH, dim=DIM, heads=HEADS, drop_path=0.1):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 1 + 14 * 14, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, drop_path * i / (depth - 1)) for i in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def pos_for(self, h, w):
        if h == 14 and w == 14:
            return self.pos
        grid = self.pos[:, 1:].reshape(1, 14, 14, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False)
        return torch.cat([self.pos[:, :1], grid.flatten(2).transpose(1, 2)], 1)

    def tokens(self, x):
        x = self.patch(x)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        return x + self.pos_for(h, w)

    def forward(self, x):
        x = self.tokens(x)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)[:, 0]

    def last_cls(self, x, n):
        x = self.tokens(x)
        out = []
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if len(self.blocks) - i <= n:
                out.append(self.norm(x)[:, 0])
        return torch.cat(out, -1)


class DINOHead(nn.Module):
    def __init__(self, dim, out_dim, hidden=2048, bottleneck=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, bottleneck),
        )
        self.last_layer = nn.utils.parametrizations.weight_norm(nn.Linear(bottleneck, out_dim, bias=False))
        self.last_layer.parametrizations.weight.original0.data.fill_(1)
        self.last_layer.parametrizations.weight.original0.requires_grad = False

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, crops):
        sizes = torch.tensor([c.shape[-1] for c in crops])
        idx = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
        start, out = 0, []
        for end in idx.tolist():
            out.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        return self.head(torch.cat(out))


student = MultiCropWrapper(ViT(), DINOHead(DIM, OUT_DIM)).to(device)
teacher = MultiCropWrapper(ViT(drop_path=0.0), DINOHead(DIM, OUT_DIM)).to(device)
teacher.load_state_dict(student.state_dict())
for p in teacher.parameters():
    p.requires_grad = False
center = torch.zeros(1, OUT_DIM, device=device)
print(f"student params {sum(p.numel() for p in student.parameters())}")

regularized, not_regularized = [], []
for name, p in student.named_parameters():
    if not p.requires_grad:
        continue
    (not_regularized if name.endswith(".bias") or p.ndim == 1 else regularized).append(p)
opt = torch.optim.AdamW(
    [{"params": regularized}, {"params": not_regularized, "weight_decay": 0.0}],
    lr=5e-4 * B / 256,
    weight_decay=0.04,
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
s_params = [p for p in student.parameters()]
t_params = [p for p in teacher.parameters()]


def dino_loss(s_out, t_out, step):
    global center
    s_out = (s_out / 0.1).chunk(2 + N_LOCAL)
    t_sm = F.softmax((t_out - center) / 0.04, dim=-1).detach().chunk(2)
    total, n = 0.0, 0
    for iq, q in enumerate(t_sm):
        for v in range(len(s_out)):
            if v == iq:
                continue
            total = total + torch.sum(-q * F.log_softmax(s_out[v], dim=-1), dim=-1).mean()
            n += 1
    with torch.no_grad():
        center = center * 0.9 + t_out.mean(0, keepdim=True) * 0.1
    return total / n


def crops(n):
    g = [torch.randn(n, 3, 224, 224, device=device) for _ in range(2)]
    loc = [torch.randn(n, 3, 96, 96, device=device) for _ in range(N_LOCAL)]
    return g + loc


def dino_step(step):
    views = crops(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        t_out = teacher(views[:2])
        s_out = student(views)
        loss = dino_loss(s_out.float(), t_out.float(), step)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    for p in s_params:
        if p.grad is not None:
            norm = p.grad.data.norm(2)
            clip = 3.0 / (norm + 1e-6)
            if clip < 1:
                p.grad.data.mul_(clip)
    for p in student.head.last_layer.parameters():
        p.grad = None
    scaler.step(opt)
    scaler.update()
    m = 1 - (1 - 0.996) * (math.cos(math.pi * step / 100) + 1) / 2
    with torch.no_grad():
        torch._foreach_mul_(t_params, m)
        torch._foreach_add_(t_params, s_params, alpha=1 - m)
    return loss.item()


student.train()
print(f"step 0 dino loss {dino_step(0):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for s in range(STEPS):
    loss = dino_step(s + 1)
print(f"step {STEPS} dino loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

backbone = teacher.backbone.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    bank = torch.cat(
        [
            F.normalize(backbone(torch.randn(EVAL_B, 3, 224, 224, device=device)).float(), dim=1)
            for _ in range(BANK // EVAL_B)
        ]
    )
    bank_labels = torch.randint(0, 1000, (BANK,), device=device)
    correct = 0
    for _ in range(QUERIES // EVAL_B):
        q = F.normalize(backbone(torch.randn(EVAL_B, 3, 224, 224, device=device)).float(), dim=1)
        y = torch.randint(0, 1000, (EVAL_B,), device=device)
        sim, idx = (q @ bank.T).topk(min(20, BANK), dim=1)
        votes = torch.zeros(EVAL_B, 1000, device=device).scatter_add_(1, bank_labels[idx], (sim / 0.07).exp())
        correct += (votes.argmax(1) == y).sum().item()
print(f"knn top-1 {correct / QUERIES:.4f}")
if device == "cuda":
    print(f"knn peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

opt = None
del bank
linear = nn.Linear(min(4, DEPTH) * DIM, 1000).to(device)
nn.init.normal_(linear.weight, std=0.01)
nn.init.zeros_(linear.bias)
l_opt = torch.optim.SGD(linear.parameters(), lr=0.001 * PROBE_B / 256, momentum=0.9, weight_decay=0.0)
for i in range(3):
    x = torch.randn(PROBE_B, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (PROBE_B,), device=device)
    with torch.no_grad():
        feats = backbone.last_cls(x, min(4, DEPTH))
    loss = F.cross_entropy(linear(feats), y)
    l_opt.zero_grad()
    loss.backward()
    l_opt.step()
    print(f"linear probe step {i} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"probe allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
