"""Change detection on Sentinel-2 image pairs (OSCD-like): FC-Siam-diff and FC-Siam-conc (Daudt et al.
2018) written by hand.

Data: pairs of 13-band Sentinel-2 tiles (before, after) of 256 x 256 px as uint16 reflectances made on the
host, pinned, copied non_blocking and scaled by 1/10000 on the device; a binary change mask with about 5%
positive pixels. FC-Siam-diff: a shared encoder of four stages (two 3x3 conv + BatchNorm + ReLU + dropout
0.2 per stage, 16/32/64/128 channels, max-pooling between stages) runs on both dates; the skips are the
absolute differences of the two dates' features; the decoder upsamples by ConvTranspose2d, concatenates the
difference skip, and ends in a 1x1 conv to one change logit. Loss: BCEWithLogits with pos_weight 10 plus
a soft Dice loss on the sigmoid. Batch 24, fp16 autocast with torch.amp.GradScaler, Adam (lr 1e-3, weight
decay 1e-4), gradient clipping after unscale_.

Phases: the first training step; 4 more steps; validation under torch.no_grad on 48 pairs in batches of
16 with the confusion counts (TP, FP, FN) summed on the device; then FC-Siam-conc (the skips are the two
dates' features concatenated) in channels_last, fp32, SGD momentum 0.9, 3 steps at batch 16. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19302)
if SMALL:
    B, STEPS, TILE, VAL_N, VAL_B, CONC_B = 2, 1, 64, 4, 2, 2
else:
    B, STEPS, TILE, VAL_N, VAL_B, CONC_B = 24, 4, 256, 48, 16, 16
BANDS = 13
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def conv_bn(cin, cout):
    return [
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Dropout2d(0.2),
    ]


class Encoder(nn.Module):
    def __init__(self, cin, widths=(16, 32, 64, 128)):
        super().__init__()
        self.stages = nn.ModuleList()
        for i, w in enumerate(widths):
            c = cin if i == 0 else widths[i - 1]
            layers = conv_bn(c, w) + conv_bn(w, w)
            if i >= 2:
                layers += conv_bn(w, w)
            self.stages.append(nn.Sequential(*layers))

    def forward(self, x):
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
            x = F.max_pool2d(x, 2)
        return x, feats


class Up(nn.Module):
    def __init__(self, cin, cskip, cout, last=False):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin, 3, stride=2, padding=1, output_padding=1)
        layers = conv_bn(cin + cskip, cin) + conv_bn(cin, cout)
        if last:
            layers = [*layers[:-4], nn.Conv2d(cin, cout, 3, padding=1)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x, skip):
        x = self.up(x)
        return self.conv(torch.cat([x, skip], 1))


class FCSiam(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.enc = Encoder(BANDS)
        k = 2 if mode == "conc" else 1
        self.up4 = Up(128, k * 128, 64)
        self.up3 = Up(64, k * 64, 32)
        self.up2 = Up(32, k * 32, 16)
        self.up1 = Up(16, k * 16, 1, last=True)

    def forward(self, a, b):
        _, fa = self.enc(a)
        xb, fb = self.enc(b)
        if self.mode == "diff":
            skips = [torch.abs(p - q) for p, q in zip(fa, fb, strict=True)]
        else:
            skips = [torch.cat([p, q], 1) for p, q in zip(fa, fb, strict=True)]
        x = xb
        x = self.up4(x, skips[3])
        x = self.up3(x, skips[2])
        x = self.up2(x, skips[1])
        return self.up1(x, skips[0])


def pairs(n):
    a = torch.randint(0, 10000, (n, BANDS, TILE, TILE), dtype=torch.int16)
    b = (a + torch.randint(-300, 300, a.shape, dtype=torch.int16)).clamp_(0, 10000)
    y = (torch.rand(n, 1, TILE, TILE) < 0.05).float()
    if device == "cuda":
        a, b, y = a.pin_memory(), b.pin_memory(), y.pin_memory()
    a, b, y = (t.to(device, non_blocking=True) for t in (a, b, y))
    return a.float() / 10000, b.float() / 10000, y


def dice_loss(logits, y, eps=1.0):
    p = torch.sigmoid(logits.float())
    inter = (p * y).sum((1, 2, 3))
    return 1 - ((2 * inter + eps) / (p.sum((1, 2, 3)) + y.sum((1, 2, 3)) + eps)).mean()


model = FCSiam("diff").to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
pos_weight = torch.tensor([10.0], device=device)
print(f"FC-Siam-diff params {sum(p.numel() for p in model.parameters())}")


def step():
    a, b, y = pairs(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = model(a, b)
        loss = F.binary_cross_entropy_with_logits(logits, y, pos_weight=pos_weight) + dice_loss(logits, y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    return loss.item()


model.train()
print(f"step 0 loss {step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = step()
print(f"step {STEPS} loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
tp = torch.zeros((), device=device)
fp = torch.zeros((), device=device)
fn = torch.zeros((), device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for _ in range(0, VAL_N, VAL_B):
        a, b, y = pairs(VAL_B)
        pred = (model(a, b) > 0).float()
        tp += (pred * y).sum()
        fp += (pred * (1 - y)).sum()
        fn += ((1 - pred) * y).sum()
f1 = 2 * tp / (2 * tp + fp + fn)
print(f"val F1 {f1.item():.4f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

conc = FCSiam("conc").to(device, memory_format=torch.channels_last)
conc_opt = torch.optim.SGD(conc.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
conc.train()
for s in range(3):
    a, b, y = pairs(CONC_B)
    a = a.contiguous(memory_format=torch.channels_last)
    b = b.contiguous(memory_format=torch.channels_last)
    logits = conc(a, b)
    loss = F.binary_cross_entropy_with_logits(logits, y, pos_weight=pos_weight) + dice_loss(logits, y)
    conc_opt.zero_grad()
    loss.backward()
    conc_opt.step()
    print(f"FC-Siam-conc step {s} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"conc allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
