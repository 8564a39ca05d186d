"""Single-image super-resolution as the EDSR and ESPCN reference code writes it: EDSR-baseline x4
(MeanShift with the DIV2K RGB mean, a 3 x 3 head to 64 features, 16 residual blocks of conv-ReLU-conv
with residual scale 1, a body conv and the global skip, an upsampler of two conv-to-256 +
nn.PixelShuffle(2) stages, a 3 x 3 tail, MeanShift back), trained on 192 x 192 HR crops whose LR
inputs are made on the GPU by F.interpolate(scale_factor=0.25, mode='bicubic', antialias=True),
L1 loss, Adam (0.9, 0.999, eps 1e-8) lr 1e-4 under bf16 autocast, batch 16, 2 steps (each its
own phase); then ESPCN x3 on the luminance channel (conv 5 x 5 to 64, 3 x 3 to 32, tanh, 3 x 3 to
9 and F.pixel_shuffle(3)) in fp16 autocast with GradScaler, Adam lr 1e-3, batch 64 of 17 x 17 LR
patches made by bilinear antialiased downsampling of 51 x 51 HR crops, 2 steps in one phase; then
evaluation under no_grad on two DIV2K-sized 2040 x 1356 images: their 510 x 339 LR versions through
EDSR in fp32 (whole image, no chopping), PSNR against the HR image next to the bicubic
(align_corners=False) and nearest-exact upsampling baselines, and ESPCN on the Y channel of
1020 x 678 versions; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16005)
if SMALL:
    FEATS, BLOCKS, B, HR, ESP_B, EVAL_H, EVAL_W, STEPS = 16, 2, 2, 48, 4, 96, 64, 2
else:
    FEATS, BLOCKS, B, HR, ESP_B, EVAL_H, EVAL_W, STEPS = 64, 16, 16, 192, 64, 1356, 2040, 2
SCALE = 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def default_conv(in_channels, out_channels, kernel_size, bias=True):
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=(kernel_size // 2), bias=bias)


class MeanShift(nn.Conv2d):
    def __init__(self, rgb_range, rgb_mean=(0.4488, 0.4371, 0.4040), rgb_std=(1.0, 1.0, 1.0), sign=-1):
        super().__init__(3, 3, kernel_size=1)
        std = torch.Tensor(rgb_std)
        self.weight.data = torch.eye(3).view(3, 3, 1, 1) / std.view(3, 1, 1, 1)
        self.bias.data = sign * rgb_range * torch.Tensor(rgb_mean) / std
        for p in self.parameters():
            p.requires_grad = False


class ResBlock(nn.Module):
    def __init__(self, conv, n_feats, kernel_size, res_scale=1):
        super().__init__()
        self.body = nn.Sequential(
            conv(n_feats, n_feats, kernel_size), nn.ReLU(True), conv(n_feats, n_feats, kernel_size)
        )
        self.res_scale = res_scale

    def forward(self, x):
        return self.body(x).mul(self.res_scale) + x


class Upsampler(nn.Sequential):
    def __init__(self, conv, scale, n_feats):
        m = []
        for _ in range(int(scale).bit_length() - 1):
            m.append(conv(n_feats, 4 * n_feats, 3))
            m.append(nn.PixelShuffle(2))
        super().__init__(*m)


class EDSR(nn.Module):
    def __init__(self, conv=default_conv):
        super().__init__()
        self.sub_mean = MeanShift(1.0)
        self.add_mean = MeanShift(1.0, sign=1)
        self.head = nn.Sequential(conv(3, FEATS, 3))
        self.body = nn.Sequential(*[ResBlock(conv, FEATS, 3) for _ in range(BLOCKS)], conv(FEATS, FEATS, 3))
        self.tail = nn.Sequential(Upsampler(conv, SCALE, FEATS), conv(FEATS, 3, 3))

    def forward(self, x):
        x = self.head(self.sub_mean(x))
        res = self.body(x)
        res += x
        return self.add_mean(self.tail(res))


class ESPCN(nn.Module):
    def __init__(self, scale=3):
        super().__init__()
        self.first_part = nn.Sequential(
            nn.Conv2d(1, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1), nn.Tanh()
        )
        self.last_part = nn.Conv2d(32, scale**2, 3, padding=1)
        self.scale = scale

    def forward(self, x):
        return F.pixel_shuffle(self.last_part(self.first_part(x)), self.scale)


def psnr(a, b):
    return 10 * torch.log10(1.0 / F.mse_loss(a.clamp(0, 1), b))


def rgb_to_y(img):
    return (16.0 + 65.481 * img[:, 0:1] + 128.553 * img[:, 1:2] + 24.966 * img[:, 2:3]) / 255.0


edsr = EDSR().to(device)
espcn = ESPCN().to(device)
opt = torch.optim.Adam(
    [p for p in edsr.parameters() if p.requires_grad], lr=1e-4, betas=(0.9, 0.999), eps=1e-8
)
esp_opt = torch.optim.Adam(espcn.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

edsr.train()
for step in range(STEPS):
    hr = torch.rand(B, 3, HR, HR, device=device)
    lr = F.interpolate(hr, scale_factor=1 / SCALE, mode="bicubic", antialias=True, align_corners=False).clamp(
        0, 1
    )
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        sr = edsr(lr)
        loss = F.l1_loss(sr.float(), hr)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"edsr step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del sr, loss, hr, lr
espcn.train()
for _ in range(2):
    hr_y = rgb_to_y(torch.rand(ESP_B, 3, 51, 51, device=device))
    lr_y = F.interpolate(hr_y, size=(17, 17), mode="bilinear", antialias=True, align_corners=False)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.mse_loss(espcn(lr_y).float(), hr_y)
    esp_opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(esp_opt)
    scaler.update()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"espcn loss {loss.item():.6f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

edsr.eval()
espcn.eval()
with torch.no_grad():
    hr = torch.rand(2, 3, EVAL_H, EVAL_W, device=device)
    lr = F.interpolate(hr, scale_factor=1 / SCALE, mode="bicubic", antialias=True, align_corners=False).clamp(
        0, 1
    )
    sr = edsr(lr)
    out_size = hr.shape[-2:]
    if sr.shape[-2:] != out_size:
        sr = sr[..., : out_size[0], : out_size[1]]
    scores = {
        "edsr": psnr(sr, hr).item(),
        "bicubic": psnr(F.interpolate(lr, size=out_size, mode="bicubic", align_corners=False), hr).item(),
        "nearest-exact": psnr(F.interpolate(lr, size=out_size, mode="nearest-exact"), hr).item(),
    }
    del sr
    half_y = rgb_to_y(
        F.interpolate(hr, scale_factor=0.5, mode="bilinear", antialias=True, align_corners=False)
    )
    lr_y = F.interpolate(half_y, scale_factor=1 / 3, mode="bicubic", antialias=True, align_corners=False)
    sr_y = espcn(lr_y)
    scores["espcn"] = psnr(sr_y, half_y[..., : sr_y.shape[-2], : sr_y.shape[-1]]).item()
if device == "cuda":
    print(
        f"eval {', '.join(f'{k} {v:.2f}' for k, v in scores.items())}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
