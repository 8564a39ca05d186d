"""A Spikformer (Zhou et al. 2023) written by hand, time steps batched: every conv / BN runs on the T x B
flattened batch, multi-step LIF neurons (spikingjelly's LIF, tau 2, hard reset with the reset detached)
loop over T on a [T, B, ...] view and stack their spikes. The spike is a custom torch.autograd.Function:
Heaviside forward, arctan surrogate backward (alpha / 2 / (1 + (pi / 2 * alpha * v)^2)).

Spiking patch splitting: four Conv-BN-LIF stages (3 -> 48 -> 96 -> 192 -> 384) with max pooling after the
last three (128 x 128 images -> 16 x 16 = 256 tokens) and a convolutional relative position embedding.
Eight encoder blocks of width 384: spike-driven self-attention (Q, K, V = LIF(BN(Conv1d))) with
Q K^T V scaled by 0.125 and no softmax (12 heads), then LIF and a Conv1d-BN projection; an MLP of 1536;
residuals added. Classification by the spike rate over T and tokens. 1000 classes, random data.

Phases: 3 steps at T = 4, batch 32, bf16 autocast, fused AdamW; evaluation under no_grad at batch 128;
distillation from a frozen fp16 ANN ViT teacher written by hand (6 blocks of 384 on 8 x 8 patches,
F.scaled_dot_product_attention with a boolean key mask hiding the last 32 patches) under no_grad, the
student's blocks under non-reentrant torch.utils.checkpoint, KL + CE, foreach AdamW, 3 steps; then
inference_mode evaluation of the student at T = 8 and batch 128. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2162)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, RES, DIM, DEPTH = (2, 4, 64, 96, 2) if SMALL else (32, 128, 128, 384, 8)
HEADS, CLASSES = 12, 1000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ArctanSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v, alpha):
        ctx.save_for_backward(v)
        ctx.alpha = alpha
        return (v >= 0).to(v.dtype)

    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        a = ctx.alpha
        return grad * (a / 2) / (1 + (math.pi / 2 * a * v).square()), None


class MultiStepLIF(nn.Module):
    def __init__(self, tau=2.0, v_threshold=1.0, alpha=2.0):
        super().__init__()
        self.tau, self.v_threshold, self.alpha = tau, v_threshold, alpha

    def forward(self, x):  # x: [T * B, ...]
        x = x.view(T, -1, *x.shape[1:])
        v = torch.zeros_like(x[0])
        spikes = []
        for t in range(T):
            v = v + (x[t] - v) / self.tau
            s = ArctanSpike.apply(v - self.v_threshold, self.alpha)
            v = v * (1.0 - s.detach())
            spikes.append(s)
        return torch.stack(spikes).flatten(0, 1)


class ConvBN1d(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm1d(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


class SSA(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q, self.k, self.v = ConvBN1d(dim, dim), ConvBN1d(dim, dim), ConvBN1d(dim, dim)
        self.q_lif, self.k_lif, self.v_lif = MultiStepLIF(), MultiStepLIF(), MultiStepLIF()
        self.attn_lif = MultiStepLIF(v_threshold=0.5)
        self.proj = ConvBN1d(dim, dim)
        self.proj_lif = MultiStepLIF()

    def forward(self, x):  # [TB, C, N]
        tb, c, n = x.shape
        heads = lambda s: s.view(tb, HEADS, c // HEADS, n).transpose(-1, -2)  # noqa: E731
        q = heads(self.q_lif(self.q(x)))
        k = heads(self.k_lif(self.k(x)))
        v = heads(self.v_lif(self.v(x)))
        attn = q @ k.transpose(-2, -1) * 0.125
        out = (attn @ v).transpose(-1, -2).reshape(tb, c, n)
        return self.proj_lif(self.proj(self.attn_lif(out)))


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = SSA(dim)
        self.fc1, self.fc1_lif = ConvBN1d(dim, 4 * dim), MultiStepLIF()
        self.fc2, self.fc2_lif = ConvBN1d(4 * dim, dim), MultiStepLIF()

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.fc2_lif(self.fc2(self.fc1_lif(self.fc1(x))))


class Spikformer(nn.Module):
    def __init__(self, dim=DIM, depth=DEPTH):
        super().__init__()
        chans = [3, dim // 8, dim // 4, dim // 2, dim]
        self.sps = nn.ModuleList()
        for i in range(4):
            self.sps.append(
                nn.ModuleDict(
                    {
                        "conv": nn.Conv2d(chans[i], chans[i + 1], 3, padding=1, bias=False),
                        "bn": nn.BatchNorm2d(chans[i + 1]),
                        "lif": MultiStepLIF(),
                    }
                )
            )
        self.rpe = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1, bias=False), nn.BatchNorm2d(dim))
        self.rpe_lif = MultiStepLIF()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, img, use_checkpoint=False):
        x = img.unsqueeze(0).expand(T, *img.shape).flatten(0, 1)  # direct encoding
        for i, stage in enumerate(self.sps):
            x = stage["lif"](stage["bn"](stage["conv"](x)))
            if i > 0:
                x = F.max_pool2d(x, 2)
        x = x + self.rpe_lif(self.rpe(x))
        x = x.flatten(2)  # [TB, C, N]
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if use_checkpoint else blk(x)
        x = x.mean(2).view(T, -1, x.shape[1]).mean(0)
        return self.head(x)


class TeacherViT(nn.Module):
    def __init__(self, dim=DIM, depth=6, patch=8):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        n = (RES // patch) ** 2
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.norms1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(depth))
        self.proj = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.norms2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, img, keep):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        b, n, d = x.shape
        mask = keep[:, None, None, :]  # [B, 1, 1, N] boolean: True attends
        for n1, qkv, proj, n2, mlp in zip(self.norms1, self.qkv, self.proj, self.norms2, self.mlp):
            q, k, v = qkv(n1(x)).view(b, n, 3, 6, d // 6).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + proj(a.transpose(1, 2).reshape(b, n, d))
            x = x + mlp(n2(x))
        return self.head(self.norm(x[:, 0]))


def batch(n):
    return torch.randn(n, 3, RES, RES, device=device), torch.randint(0, CLASSES, (n,), device=device)


model = Spikformer().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.06, fused=device == "cuda")
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")

T = 4
for it in range(3):
    x, y = batch(BATCH)
    with torch.autocast(**amp):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"train loss {loss.item():.4f}")
report("train bf16 T=4")

model.eval()
with torch.no_grad(), torch.autocast(**amp):
    x, y = batch(EVAL_BATCH)
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"eval acc {acc:.4f}")
report("eval no_grad")

teacher = TeacherViT().to(device).half().eval().requires_grad_(False)
n_tokens = (RES // 8) ** 2 + 1
keep = torch.ones(BATCH, n_tokens, dtype=torch.bool, device=device)
keep[:, -32:] = False
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.06, foreach=True)
for it in range(3):
    x, y = batch(BATCH)
    with torch.no_grad():
        t_logits = teacher(x.half(), keep).float()
    with torch.autocast(**amp):
        s_logits = model(x, use_checkpoint=True)
    s_logits = s_logits.float()
    kd = F.kl_div(F.log_softmax(s_logits / 2, -1), F.log_softmax(t_logits / 2, -1), log_target=True, reduction="batchmean")
    loss = 0.5 * F.cross_entropy(s_logits, y) + 0.5 * 4 * kd
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"distill loss {loss.item():.4f}")
report("distill checkpointed")

model.eval()
T = 8
with torch.inference_mode(), torch.autocast(**amp):
    x, y = batch(EVAL_BATCH)
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"eval T=8 acc {acc:.4f}")
report("eval T=8")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
