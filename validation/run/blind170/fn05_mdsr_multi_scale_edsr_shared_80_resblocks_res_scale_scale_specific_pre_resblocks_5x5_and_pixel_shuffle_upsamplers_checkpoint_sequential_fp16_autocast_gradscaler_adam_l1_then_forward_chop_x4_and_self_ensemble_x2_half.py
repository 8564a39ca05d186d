"""MDSR (the multi-scale EDSR) as sanghyun-son/EDSR-PyTorch (src/model/mdsr.py, common.py, trainer.py,
model/__init__.py forward_chop and forward_x8) writes it: MeanShift by a fixed 1 x 1 conv (DIV2K RGB
mean, rgb_range 255), a 3 x 3 head conv to 64 features, scale-specific pre-processing (two ResBlocks
with 5 x 5 kernels per scale x2, x3, x4), a shared body of 80 ResBlocks (conv, ReLU, conv, the residual
scaled by 1.0 here as MDSR does) and a closing conv with the long skip, scale-specific Upsamplers
(x2 and x3: conv to 4c / 9c and PixelShuffle; x4: two x2 stages) and a shared tail conv, add_mean.
The body runs under torch.utils.checkpoint.checkpoint_sequential in 8 segments (use_reentrant=False).
fp16 autocast with GradScaler (init_scale 1,024), Adam (lr 1e-4, betas 0.9/0.999, eps 1e-8),
MultiStepLR, the L1 loss. Batch 32 of 192 x 192 HR patches, the scale cycling x2, x3, x4 a step
(LR patches 96, 64, 48).
Phases: the x2 step, the x3 and x4 steps, then the x4 test of a 510 x 339 DIV2K-valid-sized LR image
by forward_chop (the four overlapping quadrants with shave 10, split again while h * w is over
160,000 at n_GPUs 1) under no_grad in fp32, then the x2 self-ensemble (forward_x8: the eight
flips and transposes, each through the model, transformed back and averaged) of a 256 x 256 LR image
with the model in half under inference_mode (4 phases after the model's creation)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17005)
if SMALL:
    N_RES, N_FEATS, B, HR_PATCH, CHOP_IMG, ENS, MIN_SIZE = 8, 16, 2, 48, (40, 30), 24, 1000
else:
    N_RES, N_FEATS, B, HR_PATCH, CHOP_IMG, ENS, MIN_SIZE = 80, 64, 32, 192, (339, 510), 256, 160000
SCALES = (2, 3, 4)
RGB_RANGE = 255.0
device = "cuda" if torch.cuda.is_available() else "cpu"
dev_type = "cuda" if device == "cuda" else "cpu"


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
    def __init__(self, conv, n_feats, kernel_size, res_scale=1.0):
        super().__init__()
        self.body = nn.Sequential(
            conv(n_feats, n_feats, kernel_size), nn.ReLU(True), conv(n_feats, n_feats, kernel_size)
        )
        self.res_scale = res_scale

    def forward(self, x):
        res = self.body(x).mul(self.res_scale)
        res += x
        return res


class Upsampler(nn.Sequential):
    def __init__(self, conv, scale, n_feats):
        m = []
        if scale in (2, 4):
            for _ in range({2: 1, 4: 2}[scale]):
                m.append(conv(n_feats, 4 * n_feats, 3))
                m.append(nn.PixelShuffle(2))
        else:
            m.append(conv(n_feats, 9 * n_feats, 3))
            m.append(nn.PixelShuffle(3))
        super().__init__(*m)


class MDSR(nn.Module):
    def __init__(self, conv=default_conv):
        super().__init__()
        self.scale_idx = 0
        self.sub_mean = MeanShift(RGB_RANGE)
        self.add_mean = MeanShift(RGB_RANGE, sign=1)
        self.head = nn.Sequential(conv(3, N_FEATS, 3))
        self.pre_process = nn.ModuleList(
            nn.Sequential(ResBlock(conv, N_FEATS, 5), ResBlock(conv, N_FEATS, 5)) for _ in SCALES
        )
        self.body = nn.Sequential(*[ResBlock(conv, N_FEATS, 3) for _ in range(N_RES)])
        self.body_tail = conv(N_FEATS, N_FEATS, 3)
        self.upsample = nn.ModuleList(Upsampler(conv, s, N_FEATS) for s in SCALES)
        self.tail = nn.Sequential(conv(N_FEATS, 3, 3))
        self.use_checkpoint = False

    def set_scale(self, scale_idx):
        self.scale_idx = scale_idx

    def forward(self, x):
        x = self.sub_mean(x)
        x = self.head(x)
        x = self.pre_process[self.scale_idx](x)
        if self.use_checkpoint and torch.is_grad_enabled():
            res = checkpoint_sequential(self.body, 8, x, use_reentrant=False)
        else:
            res = self.body(x)
        res = self.body_tail(res)
        res += x
        x = self.upsample[self.scale_idx](res)
        x = self.tail(x)
        return self.add_mean(x)


model = MDSR().to(device)
model.use_checkpoint = True
optimizer = torch.optim.Adam(
    [p for p in model.parameters() if p.requires_grad], lr=1e-4, betas=(0.9, 0.999), eps=1e-8
)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[200], gamma=0.5)
scaler = torch.amp.GradScaler(dev_type, init_scale=2.0**10)
gen = torch.Generator().manual_seed(17005)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def hr_lr(n, hr, scale):
    base = torch.rand(n, 3, hr // 12, hr // 12, generator=gen) * RGB_RANGE
    hr_img = F.interpolate(base, size=(hr, hr), mode="bicubic", align_corners=False).clamp_(0, RGB_RANGE)
    hr_img = hr_img.to(device)
    lr_img = F.interpolate(
        hr_img, scale_factor=1 / scale, mode="bicubic", antialias=True, align_corners=False
    )
    return lr_img.round().clamp_(0, RGB_RANGE), hr_img.round()


def train_step(idx_scale):
    scale = SCALES[idx_scale]
    lr, hr = hr_lr(B, HR_PATCH, scale)
    model.set_scale(idx_scale)
    optimizer.zero_grad()
    with torch.autocast(dev_type, dtype=torch.float16):
        sr = model(lr)
        loss = F.l1_loss(sr, hr)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    return loss.item()


model.train()
print(f"x2 step l1 {train_step(0):.3f}")
if device == "cuda":
    print(f"x2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
print(f"x3 step l1 {train_step(1):.3f}")
print(f"x4 step l1 {train_step(2):.3f}")
if device == "cuda":
    print(f"x3x4 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def forward_chop(x, scale, shave=10, min_size=MIN_SIZE):
    n_gpus = 1
    b, c, h, w = x.size()
    h_half, w_half = h // 2, w // 2
    h_size, w_size = h_half + shave, w_half + shave
    lr_list = [
        x[:, :, 0:h_size, 0:w_size],
        x[:, :, 0:h_size, (w - w_size) : w],
        x[:, :, (h - h_size) : h, 0:w_size],
        x[:, :, (h - h_size) : h, (w - w_size) : w],
    ]
    if w_size * h_size < min_size:
        sr_list = []
        for i in range(0, 4, n_gpus):
            lr_batch = torch.cat(lr_list[i : (i + n_gpus)], dim=0)
            sr_batch = model(lr_batch)
            sr_list.extend(sr_batch.chunk(n_gpus, dim=0))
    else:
        sr_list = [forward_chop(patch, scale, shave=shave, min_size=min_size) for patch in lr_list]
    h, w = scale * h, scale * w
    h_half, w_half = scale * h_half, scale * w_half
    h_size, w_size = scale * h_size, scale * w_size
    shave *= scale
    output = x.new(b, c, h, w)
    output[:, :, 0:h_half, 0:w_half] = sr_list[0][:, :, 0:h_half, 0:w_half]
    output[:, :, 0:h_half, w_half:w] = sr_list[1][:, :, 0:h_half, (w_size - w + w_half) : w_size]
    output[:, :, h_half:h, 0:w_half] = sr_list[2][:, :, (h_size - h + h_half) : h_size, 0:w_half]
    output[:, :, h_half:h, w_half:w] = sr_list[3][
        :, :, (h_size - h + h_half) : h_size, (w_size - w + w_half) : w_size
    ]
    return output


model.eval()
with torch.no_grad():
    model.set_scale(2)
    lr_img = (torch.rand(1, 3, *CHOP_IMG, generator=gen) * RGB_RANGE).round().to(device)
    sr = forward_chop(lr_img, 4)
    sr = sr.clamp(0, RGB_RANGE).round()
    print(f"chop x4 {tuple(sr.shape)} mean {sr.mean().item():.2f}")
    del sr, lr_img
if device == "cuda":
    print(f"chop peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def forward_x8(x, forward_function):
    def _transform(v, op):
        if op == "v":
            return v.flip(-1)
        if op == "h":
            return v.flip(-2)
        return v.transpose(-1, -2).contiguous()

    lr_list = [x]
    for tf in "v", "h", "t":
        lr_list.extend([_transform(t, tf) for t in lr_list])
    sr_list = [forward_function(aug) for aug in lr_list]
    for i in range(len(sr_list)):
        if i > 3:
            sr_list[i] = _transform(sr_list[i], "t")
        if i % 4 > 1:
            sr_list[i] = _transform(sr_list[i], "h")
        if (i % 4) % 2 == 1:
            sr_list[i] = _transform(sr_list[i], "v")
    output_cat = torch.cat(sr_list, dim=0)
    return output_cat.mean(dim=0, keepdim=True)


model.half()
with torch.inference_mode():
    model.set_scale(0)
    lr_img = (torch.rand(1, 3, ENS, ENS, generator=gen) * RGB_RANGE).round().to(device).half()
    sr = forward_x8(lr_img, model)
    sr_u8 = sr.float().clamp(0, RGB_RANGE).round().to(torch.uint8)
print(f"x8 ensemble {tuple(sr_u8.shape)}")
if device == "cuda":
    print(
        f"x8 allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
