"""V-Net-style residual 3-D U-Net for volumetric segmentation: 3x3x3 Conv3d residual stages with
PReLU, stride-2 3x3x3 Conv3d downsampling and ConvTranspose3d(2, stride 2) upsampling with skip
concatenations, a 1x1x1 head for 4 classes; soft Dice + cross-entropy on 80 x 96 x 112 CT-like
patches, bf16 autocast, Adam, batch 2, 3 steps; then sliding-window inference (two overlapping
80 x 96 x 112 windows of a 80 x 96 x 168 volume, logits summed) under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10208)
B, D, H, W, STEPS, BASE = (1, 16, 16, 16, 2, 4) if SMALL else (2, 80, 96, 112, 3, 24)
NCLS = 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class Stage(nn.Module):
    def __init__(self, ch, n):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv3d(ch, ch, 3, padding=1) for _ in range(n))
        self.acts = nn.ModuleList(nn.PReLU(ch) for _ in range(n))

    def forward(self, x):
        h = x
        for c, a in zip(self.convs, self.acts, strict=True):
            h = a(c(h))
        return h + x


class VNet(nn.Module):
    def __init__(self):
        super().__init__()
        c = BASE
        self.inp = nn.Conv3d(1, c, 3, padding=1)
        self.s1 = Stage(c, 1)
        self.d1 = nn.Conv3d(c, 2 * c, 3, 2, 1)
        self.s2 = Stage(2 * c, 2)
        self.d2 = nn.Conv3d(2 * c, 4 * c, 3, 2, 1)
        self.s3 = Stage(4 * c, 3)
        self.d3 = nn.Conv3d(4 * c, 8 * c, 3, 2, 1)
        self.s4 = Stage(8 * c, 3)
        self.u3 = nn.ConvTranspose3d(8 * c, 4 * c, 2, 2)
        self.m3 = nn.Conv3d(8 * c, 4 * c, 3, padding=1)
        self.u2 = nn.ConvTranspose3d(4 * c, 2 * c, 2, 2)
        self.m2 = nn.Conv3d(4 * c, 2 * c, 3, padding=1)
        self.u1 = nn.ConvTranspose3d(2 * c, c, 2, 2)
        self.m1 = nn.Conv3d(2 * c, c, 3, padding=1)
        self.head = nn.Conv3d(c, NCLS, 1)

    def forward(self, x):
        x1 = self.s1(self.inp(x))
        x2 = self.s2(self.d1(x1))
        x3 = self.s3(self.d2(x2))
        x4 = self.s4(self.d3(x3))
        y = F.relu(self.m3(torch.cat([self.u3(x4), x3], 1)))
        y = F.relu(self.m2(torch.cat([self.u2(y), x2], 1)))
        y = F.relu(self.m1(torch.cat([self.u1(y), x1], 1)))
        return self.head(y)


def dice_ce(logits, target):
    ce = F.cross_entropy(logits, target)
    prob = logits.softmax(1)
    onehot = F.one_hot(target, NCLS).permute(0, 4, 1, 2, 3).to(prob.dtype)
    inter = (prob * onehot).sum((2, 3, 4))
    denom = prob.sum((2, 3, 4)) + onehot.sum((2, 3, 4))
    return ce + (1 - (2 * inter + 1) / (denom + 1)).mean()


model = VNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    vol = torch.randn(B, 1, D, H, W, device=device)
    seg = ((vol > 0.5).long() + (vol > 1.2).long() + (vol > 2.0).long()).squeeze(1)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(vol)
    loss = dice_ce(logits.float(), seg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del vol, seg, logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    big = torch.randn(1, 1, D, H, W + W // 2, device=device)
    acc = torch.zeros(1, NCLS, D, H, W + W // 2, device=device)
    for off in (0, W // 2):
        acc[..., off : off + W] += model(big[..., off : off + W]).float()
    mask = acc.argmax(1)
if device == "cuda":
    print(
        f"eval {mask.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
