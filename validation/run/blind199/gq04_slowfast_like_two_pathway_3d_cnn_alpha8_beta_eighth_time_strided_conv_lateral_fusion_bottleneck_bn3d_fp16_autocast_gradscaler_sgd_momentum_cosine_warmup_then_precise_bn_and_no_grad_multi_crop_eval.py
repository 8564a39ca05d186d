"""SlowFast-like action recogniser (Feichtenhofer et al.), a two-pathway 3-D CNN written by hand.

Input: 32 frames at 160 x 160 per clip. The fast pathway sees all 32 frames, the slow pathway every 8th
(alpha = 8, 4 frames, taken with index_select on the time axis); the fast pathway has 1/8 of the slow
pathway's channels (beta = 1/8). Stems: slow Conv3d 1x7x7 (64), fast Conv3d 5x7x7 (8), both stride (1, 2, 2),
BatchNorm3d, ReLU, MaxPool3d (1, 3, 3) stride (1, 2, 2). After the stem and after each of the first three
stages a lateral connection: a time-strided Conv3d 5x1x1 stride (8, 1, 1) from the fast features (2 x beta
channels) concatenated onto the slow features. Four stages of 3-D bottleneck blocks (two per stage; slow
pathway temporal kernels 1 in res2/res3 and 3 in res4/res5, fast pathway 3 throughout; widths 64/128/256/512
inner x 4 out for slow, 1/8 of that for fast; spatial stride 2 from res3 on). Global average pooling of
both pathways, concatenation, dropout 0.5, a 400-class Linear.

Training: batch 8, fp16 autocast with torch.amp.GradScaler, SGD (momentum 0.9, wd 1e-4, lr 0.1) with a
linear warmup then half-cosine written as a LambdaLR. Then "precise BN": the BatchNorm running statistics
reset and recomputed over 4 batches in train mode under no_grad (momentum None, cumulative average). Then
evaluation under no_grad of 4 videos x 3 spatial crops (12 clips at once) with fp16 autocast.

Phases: set-up; first step; 3 more steps; precise-BN; multi-crop evaluation. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19904)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    T_FAST, S, B, STEPS, BN_BATCHES, N_VID = 16, 64, 2, 1, 1, 1
else:
    T_FAST, S, B, STEPS, BN_BATCHES, N_VID = 32, 160, 8, 3, 4, 4
ALPHA, BETA_INV, N_CLASSES, CROPS = 8, 8, 400, 3


def report(tag):
    if device == "cuda":
        print(f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.3f} GiB")
        torch.cuda.reset_peak_memory_stats()


def conv_bn(cin, cout, k, stride=1):
    pad = tuple(x // 2 for x in k)
    return nn.Sequential(
        nn.Conv3d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm3d(cout), nn.ReLU(inplace=True)
    )


class Bottleneck(nn.Module):
    def __init__(self, cin, inner, cout, t_kernel, spatial_stride):
        super().__init__()
        s = (1, spatial_stride, spatial_stride)
        self.a = nn.Conv3d(cin, inner, (t_kernel, 1, 1), padding=(t_kernel // 2, 0, 0), bias=False)
        self.a_bn = nn.BatchNorm3d(inner)
        self.b = nn.Conv3d(inner, inner, (1, 3, 3), stride=s, padding=(0, 1, 1), bias=False)
        self.b_bn = nn.BatchNorm3d(inner)
        self.c = nn.Conv3d(inner, cout, 1, bias=False)
        self.c_bn = nn.BatchNorm3d(cout)
        self.shortcut = None
        if cin != cout or spatial_stride != 1:
            self.shortcut = nn.Sequential(nn.Conv3d(cin, cout, 1, stride=s, bias=False), nn.BatchNorm3d(cout))

    def forward(self, x):
        out = F.relu(self.a_bn(self.a(x)), inplace=True)
        out = F.relu(self.b_bn(self.b(out)), inplace=True)
        out = self.c_bn(self.c(out))
        sc = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + sc, inplace=True)


class Lateral(nn.Module):
    def __init__(self, c_fast):
        super().__init__()
        self.conv = nn.Conv3d(
            c_fast, 2 * c_fast, (5, 1, 1), stride=(ALPHA, 1, 1), padding=(2, 0, 0), bias=False
        )
        self.bn = nn.BatchNorm3d(2 * c_fast)

    def forward(self, slow, fast):
        return torch.cat([slow, F.relu(self.bn(self.conv(fast)))], dim=1)


class SlowFast(nn.Module):
    def __init__(self):
        super().__init__()
        self.slow_stem = conv_bn(3, 64, (1, 7, 7), (1, 2, 2))
        self.fast_stem = conv_bn(3, 64 // BETA_INV, (5, 7, 7), (1, 2, 2))
        self.pool = nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1))
        self.laterals = nn.ModuleList()
        self.slow_stages = nn.ModuleList()
        self.fast_stages = nn.ModuleList()
        slow_c, fast_c = 64, 64 // BETA_INV
        for i, (inner, tk_slow) in enumerate([(64, 1), (128, 1), (256, 3), (512, 3)]):
            self.laterals.append(Lateral(fast_c))
            cin = slow_c + 2 * fast_c
            stride = 1 if i == 0 else 2
            self.slow_stages.append(
                nn.Sequential(
                    Bottleneck(cin, inner, inner * 4, tk_slow, stride),
                    Bottleneck(inner * 4, inner, inner * 4, tk_slow, 1),
                )
            )
            fi = inner // BETA_INV
            self.fast_stages.append(
                nn.Sequential(Bottleneck(fast_c, fi, fi * 4, 3, stride), Bottleneck(fi * 4, fi, fi * 4, 3, 1))
            )
            slow_c, fast_c = inner * 4, fi * 4
        self.dropout = nn.Dropout(0.5)
        self.head = nn.Linear(slow_c + fast_c, N_CLASSES)

    def forward(self, video):
        idx = torch.arange(0, video.shape[2], ALPHA, device=video.device)
        slow = self.pool(self.slow_stem(video.index_select(2, idx)))
        fast = self.pool(self.fast_stem(video))
        for lat, s_stage, f_stage in zip(self.laterals, self.slow_stages, self.fast_stages, strict=True):
            slow = lat(slow, fast)
            slow, fast = s_stage(slow), f_stage(fast)
        feat = torch.cat([slow.mean(dim=(2, 3, 4)), fast.mean(dim=(2, 3, 4))], dim=1)
        return self.head(self.dropout(feat))


model = SlowFast().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
WARMUP, TOTAL = 2, 100
sched = torch.optim.lr_scheduler.LambdaLR(
    opt,
    lambda s: (
        0.1 + 0.9 * s / WARMUP
        if s < WARMUP
        else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"SlowFast parameters {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M")
report("setup")


def train_step():
    model.train()
    video = torch.randn(B, 3, T_FAST, S, S, device=device)
    labels = torch.randint(0, N_CLASSES, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(model(video), labels)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss.item()


print(f"step 0 loss {train_step():.4f}")
report("first step")
for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f} scale {scaler.get_scale()}")
report("train")

# precise BN: recompute the population statistics with the final weights
bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm3d)]
for bn in bns:
    bn.reset_running_stats()
    bn.momentum = None
model.train()
with torch.no_grad():
    for _ in range(BN_BATCHES):
        video = torch.randn(B, 3, T_FAST, S, S, device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            model(video)
print(f"precise BN over {BN_BATCHES} batches, first running_var mean {bns[0].running_var.mean().item():.4f}")
report("precise bn")

model.eval()
with torch.no_grad():
    crops = torch.randn(N_VID * CROPS, 3, T_FAST, S, S, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = model(crops)
    probs = logits.float().softmax(-1).view(N_VID, CROPS, -1).mean(1)
    pred = probs.argmax(-1)
print(f"predictions {pred.tolist()}")
if device == "cuda":
    print(f"eval max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.3f} GiB")
