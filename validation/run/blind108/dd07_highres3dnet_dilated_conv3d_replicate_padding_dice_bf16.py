"""HighRes3DNet brain parcellation, hand-written after Li et al. 2017: a 3x3x3 stem of 16
channels, three groups of three pre-activation residual blocks (BatchNorm3d, ReLU, 3x3x3 conv)
at dilation 1 / 16 channels, dilation 2 / 32 channels and dilation 4 / 64 channels, the dilated
convolutions padded with padding_mode='replicate' (F.pad then an unpadded convolution), zero-padded
channel growth on the residual path, a 1x1x1 conv to 80 and a 1x1x1 classifier over 12
labels; batch 2 of 88^3 patches, soft Dice plus cross entropy, bf16 autocast, Adam, 3 steps; then
a 128^3 volume segmented under inference_mode by sliding 88^3 windows in batches of 4 with
Gaussian-weighted blending; 5 phases."""

import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10807)
B, P, VOL, STEPS = (1, 24, 32, 2) if SMALL else (2, 88, 128, 3)
NCLS = 12
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, cin, cout, dil):
        super().__init__()
        mode = "zeros" if dil == 1 else "replicate"
        self.bn1 = nn.BatchNorm3d(cin)
        self.c1 = nn.Conv3d(cin, cout, 3, padding=dil, dilation=dil, padding_mode=mode)
        self.bn2 = nn.BatchNorm3d(cout)
        self.c2 = nn.Conv3d(cout, cout, 3, padding=dil, dilation=dil, padding_mode=mode)
        self.extra = cout - cin

    def forward(self, x):
        h = self.c1(F.relu(self.bn1(x)))
        h = self.c2(F.relu(self.bn2(h)))
        if self.extra:
            x = F.pad(x, (0, 0, 0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))
        return x + h


class HighRes3DNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.BatchNorm3d(16), nn.ReLU(True))
        blocks, cin = [], 16
        for cout, dil in ((16, 1), (32, 2), (64, 4)):
            for _ in range(3):
                blocks.append(ResBlock(cin, cout, dil))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.BatchNorm3d(64),
            nn.ReLU(True),
            nn.Conv3d(64, 80, 1),
            nn.BatchNorm3d(80),
            nn.ReLU(True),
            nn.Conv3d(80, NCLS, 1),
        )

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def dice_ce(logits, lab):
    ce = F.cross_entropy(logits, lab)
    prob = logits.softmax(1)
    onehot = F.one_hot(lab, NCLS).permute(0, 4, 1, 2, 3).to(prob.dtype)
    inter = (prob * onehot).sum((2, 3, 4))
    denom = prob.sum((2, 3, 4)) + onehot.sum((2, 3, 4))
    return ce + 1 - ((2 * inter + 1e-5) / (denom + 1e-5)).mean()


model = HighRes3DNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
gen = torch.Generator(device=device).manual_seed(7)

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x = torch.randn(B, 1, P, P, P, device=device, generator=gen)
    lab = torch.randint(0, NCLS, (B, P, P, P), device=device, generator=gen)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(x)
    loss = dice_ce(logits.float(), lab)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, lab, logits, loss
model.eval()
with torch.inference_mode():
    vol = torch.randn(1, 1, VOL, VOL, VOL, device=device, generator=gen)
    g = torch.exp(-((torch.arange(P, device=device) - (P - 1) / 2) ** 2) / (2 * (P / 8) ** 2))
    wgt = g[:, None, None] * g[None, :, None] * g[None, None, :]
    acc = torch.zeros(NCLS, VOL, VOL, VOL, device=device)
    norm = torch.zeros(VOL, VOL, VOL, device=device)
    starts = [0, VOL - P]
    corners = list(itertools.product(starts, starts, starts))
    for i in range(0, len(corners), 4):
        part = corners[i : i + 4]
        patches = torch.cat([vol[..., a : a + P, b : b + P, c : c + P] for a, b, c in part])
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            prob = model(patches).float().softmax(1)
        for (a, b, c), p in zip(part, prob, strict=True):
            acc[:, a : a + P, b : b + P, c : c + P] += p * wgt
            norm[a : a + P, b : b + P, c : c + P] += wgt
    seg = (acc / norm).argmax(0)
if device == "cuda":
    print(
        f"eval {tuple(seg.shape)} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
