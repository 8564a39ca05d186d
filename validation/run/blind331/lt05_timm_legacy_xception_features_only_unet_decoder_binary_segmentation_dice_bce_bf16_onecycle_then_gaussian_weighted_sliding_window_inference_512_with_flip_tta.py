"""A Kaggle-style binary segmentation notebook (satellite / medical masks) with a hand-written U-Net
decoder on a timm encoder: `legacy_xception` with `features_only=True` (five levels: 64, 128, 256, 728,
2048 channels at strides 2..32, odd sizes from its unpadded stem, so each decoder block upsamples to its
skip's exact size with `F.interpolate(size=...)`), decoder blocks of conv-BN-ReLU x2 with
`nn.UpsamplingBilinear2d`-free interpolation, a 1x1 head, trained at 256 px with Dice + BCE-with-logits,
bf16 autocast, AdamW and OneCycleLR over 4 steps of 16. Then sliding-window inference on 512 px
images: 256 px windows with stride 128 (9 per image), each logit map weighted by a Gaussian importance
map and accumulated into a full-size buffer with a weight buffer, plus horizontal-flip TTA, under
inference_mode in bf16; then per-image Dice against random masks and the predicted area fraction.

Phases: 0 data; 1 training; 2 sliding-window inference; 3 metrics."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3315)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    BS, STEPS, IMG, N_TEST, BIG, WIN, STRIDE = 2, 1, 128, 1, 192, 128, 64
else:
    BS, STEPS, IMG, N_TEST, BIG, WIN, STRIDE = 16, 4, 256, 4, 512, 256, 128


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class DecoderBlock(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.conv1 = conv_bn_relu(cin + cskip, cout)
        self.conv2 = conv_bn_relu(cout, cout)

    def forward(self, x, skip=None, size=None):
        x = F.interpolate(x, size=skip.shape[-2:] if skip is not None else size, mode="nearest")
        if skip is not None:
            x = torch.cat([x, skip], dim=1)
        return self.conv2(self.conv1(x))


class XceptionUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = timm.create_model("legacy_xception", pretrained=False, features_only=True)
        ch = self.encoder.feature_info.channels()  # [64, 128, 256, 728, 2048]
        dec = [256, 128, 64, 32, 16]
        self.blocks = nn.ModuleList(
            [
                DecoderBlock(ch[4], ch[3], dec[0]),
                DecoderBlock(dec[0], ch[2], dec[1]),
                DecoderBlock(dec[1], ch[1], dec[2]),
                DecoderBlock(dec[2], ch[0], dec[3]),
                DecoderBlock(dec[3], 0, dec[4]),
            ]
        )
        self.head = nn.Conv2d(dec[4], 1, 1)

    def forward(self, x):
        f = self.encoder(x)
        y = f[4]
        for blk, skip in zip(self.blocks[:4], [f[3], f[2], f[1], f[0]]):
            y = blk(y, skip)
        y = self.blocks[4](y, size=x.shape[-2:])
        return self.head(y)


def dice_bce(logits, target):
    p = logits.sigmoid().flatten(1)
    t = target.flatten(1)
    dice = 1 - (2 * (p * t).sum(1) + 1) / (p.sum(1) + t.sum(1) + 1)
    return dice.mean() + F.binary_cross_entropy_with_logits(logits, target)


images = torch.randn(BS * STEPS, 3, IMG, IMG)
masks = (torch.rand(BS * STEPS, 1, IMG // 8, IMG // 8) > 0.7).float()
masks = F.interpolate(masks, size=(IMG, IMG), mode="nearest")
big = torch.randn(N_TEST, 3, BIG, BIG)
big_masks = (torch.rand(N_TEST, 1, BIG, BIG) > 0.5).float()
report("data")

model = XceptionUNet().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=STEPS)
model.train()
for step in range(STEPS):
    x = images[step * BS : (step + 1) * BS].to(device)
    m = masks[step * BS : (step + 1) * BS].to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(x)
    loss = dice_bce(logits.float(), m)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    sched.step()
report("train")

coords = torch.arange(WIN, dtype=torch.float32, device=device) - (WIN - 1) / 2
g1 = torch.exp(-(coords**2) / (2 * (WIN / 8) ** 2))
gauss = (g1[:, None] * g1[None, :]).clamp_min(1e-3)
starts = list(range(0, BIG - WIN + 1, STRIDE))
model.eval()
preds = []
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for n in range(N_TEST):
        img = big[n : n + 1].to(device)
        acc = torch.zeros(1, 1, BIG, BIG, device=device)
        wsum = torch.zeros(1, 1, BIG, BIG, device=device)
        windows, where = [], []
        for y0 in starts:
            for x0 in starts:
                windows.append(img[:, :, y0 : y0 + WIN, x0 : x0 + WIN])
                where.append((y0, x0))
        batch = torch.cat(windows)
        out = (model(batch).float() + model(batch.flip(3)).float().flip(3)) / 2
        for k, (y0, x0) in enumerate(where):
            acc[:, :, y0 : y0 + WIN, x0 : x0 + WIN] += out[k : k + 1] * gauss
            wsum[:, :, y0 : y0 + WIN, x0 : x0 + WIN] += gauss
        preds.append((acc / wsum).sigmoid())
preds = torch.cat(preds)
report("sliding_window")

bm = big_masks.to(device)
hard = (preds > 0.5).float()
dice = (2 * (hard * bm).sum((1, 2, 3)) + 1) / (hard.sum((1, 2, 3)) + bm.sum((1, 2, 3)) + 1)
print(f"loss {loss.item():.3f} dice {[round(v, 3) for v in dice.tolist()]} area {hard.mean().item():.3f}")
report("metrics")
