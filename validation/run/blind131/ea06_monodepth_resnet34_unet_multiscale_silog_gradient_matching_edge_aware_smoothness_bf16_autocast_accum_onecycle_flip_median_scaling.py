"""Supervised monocular depth written as a KITTI-style recipe: a torchvision ResNet-34 encoder (random
weights, its five feature maps), a U-Net decoder of nearest-upsampling + 3x3 conv + ELU stages with
sigmoid disparity heads at four scales (each upsampled bilinearly to full size), disparity mapped
to depth in [0.1, 80]; losses: the scale-invariant log loss (Eigen et al., lambda 0.85, x10) on
sparse LiDAR-like targets (5% valid pixels, the log differences multiplied by the mask), a multi-scale
gradient-matching loss on the masked log-depth differences (4 scales by strided slicing) and an
edge-aware smoothness on the mean-normalised disparity; bf16 autocast, AdamW with OneCycleLR,
gradient accumulation over 2 micro-batches of 8 at 352x1216, 2 optimizer steps; then inference
under inference_mode on batch 4 with horizontal-flip averaging, per-image median scaling to dense targets and
the abs-rel / delta<1.25 metrics; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet34

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13106)
MB, ACCUM, H, W, EB = (1, 2, 64, 192, 1) if SMALL else (8, 2, 352, 1216, 4)
MIN_D, MAX_D = 0.1, 80.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        r = resnet34(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu)
        self.pool = r.maxpool
        self.layers = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])

    def forward(self, x):
        feats = [self.stem((x - 0.45) / 0.225)]
        x = self.pool(feats[0])
        for layer in self.layers:
            x = layer(x)
            feats.append(x)
        return feats  # 64@1/2, 64@1/4, 128@1/8, 256@1/16, 512@1/32


def conv(cin, cout):
    return nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(cin, cout, 3), nn.ELU(inplace=True))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        enc = [64, 64, 128, 256, 512]
        dec = [16, 32, 64, 128, 256]
        self.up0 = nn.ModuleList()
        self.up1 = nn.ModuleList()
        for i in range(4, -1, -1):
            cin = enc[4] if i == 4 else dec[i + 1]
            self.up0.append(conv(cin, dec[i]))
            self.up1.append(conv(dec[i] + (enc[i - 1] if i > 0 else 0), dec[i]))
        self.heads = nn.ModuleList(
            [nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(dec[s], 1, 3)) for s in range(4)]
        )

    def forward(self, feats):
        x = feats[-1]
        disps = {}
        for k, i in enumerate(range(4, -1, -1)):
            x = F.interpolate(self.up0[k](x), scale_factor=2, mode="nearest")
            if i > 0:
                x = torch.cat([x, feats[i - 1]], 1)
            x = self.up1[k](x)
            if i < 4:
                disps[i] = torch.sigmoid(self.heads[i](x))
        return [disps[s] for s in range(4)]


class DepthNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()

    def forward(self, x):
        return self.decoder(self.encoder(x))


def disp_to_depth(disp):
    scaled = 1 / MAX_D + (1 / MIN_D - 1 / MAX_D) * disp
    return 1 / scaled


def silog(pred, gt, mask, lam=0.85):
    m = mask.float()
    n = m.sum().clamp(min=1)
    d = (torch.log(pred) - torch.log(gt)) * m
    return 10 * torch.sqrt((d**2).sum() / n - lam * (d.sum() / n) ** 2)


def gradient_matching(pred, gt, mask, scales=4):
    total = 0
    diff = (torch.log(pred) - torch.log(gt.clamp(min=MIN_D))) * mask
    m = mask.float()
    for s in range(scales):
        st = 2**s
        r, mm = diff[..., ::st, ::st], m[..., ::st, ::st]
        gx = (r[..., :, 1:] - r[..., :, :-1]).abs() * mm[..., :, 1:] * mm[..., :, :-1]
        gy = (r[..., 1:, :] - r[..., :-1, :]).abs() * mm[..., 1:, :] * mm[..., :-1, :]
        total = total + (gx.sum() + gy.sum()) / mm.sum().clamp(min=1)
    return total


def smoothness(disp, img):
    disp = disp / (disp.mean((2, 3), keepdim=True) + 1e-7)
    gdx = (disp[..., :, :-1] - disp[..., :, 1:]).abs()
    gdy = (disp[..., :-1, :] - disp[..., 1:, :]).abs()
    gix = (img[..., :, :-1] - img[..., :, 1:]).abs().mean(1, keepdim=True)
    giy = (img[..., :-1, :] - img[..., 1:, :]).abs().mean(1, keepdim=True)
    return (gdx * torch.exp(-gix)).mean() + (gdy * torch.exp(-giy)).mean()


model = DepthNet().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-2)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-4, total_steps=100)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    opt.zero_grad(set_to_none=True)
    for _micro in range(ACCUM):
        img = torch.rand(MB, 3, H, W, device=device)
        gt = torch.rand(MB, 1, H, W, device=device) * (MAX_D - 1) + 1
        mask = torch.rand(MB, 1, H, W, device=device) < 0.05
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            disps = model(img)
        loss = 0
        for s, disp in enumerate(disps):
            disp = F.interpolate(disp.float(), size=(H, W), mode="bilinear", align_corners=False)
            depth = disp_to_depth(disp)
            loss = loss + silog(depth, gt, mask) + 0.5 * gradient_matching(depth, gt, mask)
            loss = loss + 1e-3 / 2**s * smoothness(disp, img)
        (loss / (4 * ACCUM)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del disps, disp, depth, loss, img, gt, mask

model.eval()
img = torch.rand(EB, 3, H, W, device=device)
gt = torch.rand(EB, 1, H, W, device=device) * (MAX_D - 1) + 1
with torch.inference_mode():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        d0 = model(img)[0].float()
        d1 = model(img.flip(-1))[0].float().flip(-1)
    depth = disp_to_depth((d0 + d1) / 2)
    p, g = depth.flatten(1), gt.flatten(1)
    p = p * (g.median(1, keepdim=True).values / p.median(1, keepdim=True).values)
    p = p.clamp(MIN_D, MAX_D)
    abs_rel = ((p - g).abs() / g).mean()
    delta1 = (torch.maximum(p / g, g / p) < 1.25).float().mean()
if device == "cuda":
    print(
        f"eval abs_rel {abs_rel.item():.3f} d1 {delta1.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
