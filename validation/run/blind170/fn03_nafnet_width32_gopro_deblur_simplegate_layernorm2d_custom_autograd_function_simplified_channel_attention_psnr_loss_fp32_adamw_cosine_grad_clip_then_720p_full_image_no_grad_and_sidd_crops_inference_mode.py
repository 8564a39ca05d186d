"""NAFNet for image deblurring as megvii-research/NAFNet (basicsr/models/archs/NAFNet_arch.py,
arch_util.py LayerNorm2d, losses PSNRLoss, options/train/GoPro/NAFNet-width32.yml) writes it: the
intro 3 x 3 conv to 32 channels, encoders of [1, 1, 1, 28] NAFBlocks with 2 x 2 stride-2 downsampling
convs doubling the width, one middle block, decoders of one block each after a 1 x 1 conv to twice the
width and PixelShuffle(2), skip connections by addition, the ending conv and the global residual;
check_image_size pads to a multiple of 16 with F.pad. Each NAFBlock: LayerNorm2d as NAFNet's own
torch.autograd.Function (mean and variance over channels, y, var and weight saved, the hand-written
backward), 1 x 1 conv to 2c, 3 x 3 depthwise conv, SimpleGate (chunk and multiply), simplified channel
attention (AdaptiveAvgPool2d(1) and a 1 x 1 conv, multiplied), 1 x 1 conv, beta-scaled residual; then
LayerNorm2d, 1 x 1 conv to 2c, SimpleGate, 1 x 1 conv, gamma-scaled residual. fp32, AdamW (lr 1e-3,
weight decay 0, betas 0.9/0.9), CosineAnnealingLR, clip_grad_norm_ 0.01, the PSNR loss
(10 / ln 10 * log(mse + 1e-8) per image, averaged). Batch 8 of 256 x 256 crops (the blur made by a
seeded 9 x 9 box filter). Phases: the first step, two more steps, then a full 720 x 1,280 GoPro frame
under no_grad (PSNR), then 32 SIDD-style 256 x 256 noisy crops in batches of 8 under inference_mode
(4 phases after the model's creation)."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17003)
if SMALL:
    WIDTH, ENC, MID, DEC, B, CROP, FULL, NCROPS = 8, (1, 1), 1, (1, 1), 2, 32, (40, 64), 4
else:
    WIDTH, ENC, MID, DEC, B, CROP, FULL, NCROPS = 32, (1, 1, 1, 28), 1, (1, 1, 1, 1), 8, 256, (720, 1280), 32
device = "cuda" if torch.cuda.is_available() else "cpu"


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        ctx.eps = eps
        c = x.size(1)
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        y = (x - mu) / (var + eps).sqrt()
        ctx.save_for_backward(y, var, weight)
        y = weight.view(1, c, 1, 1) * y + bias.view(1, c, 1, 1)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        eps = ctx.eps
        c = grad_output.size(1)
        y, var, weight = ctx.saved_tensors
        g = grad_output * weight.view(1, c, 1, 1)
        mean_g = g.mean(dim=1, keepdim=True)
        mean_gy = (g * y).mean(dim=1, keepdim=True)
        gx = 1.0 / torch.sqrt(var + eps) * (g - y * mean_gy - mean_g)
        return (
            gx,
            (grad_output * y).sum(dim=3).sum(dim=2).sum(dim=0),
            grad_output.sum(dim=3).sum(dim=2).sum(dim=0),
            None,
        )


class LayerNorm2d(nn.Module):
    def __init__(self, channels, eps=1e-6):
        super().__init__()
        self.register_parameter("weight", nn.Parameter(torch.ones(channels)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(channels)))
        self.eps = eps

    def forward(self, x):
        return LayerNormFunction.apply(x, self.weight, self.bias, self.eps)


class SimpleGate(nn.Module):
    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        return x1 * x2


class NAFBlock(nn.Module):
    def __init__(self, c, dw_expand=2, ffn_expand=2):
        super().__init__()
        dw_channel = c * dw_expand
        self.conv1 = nn.Conv2d(c, dw_channel, 1, 1, 0, bias=True)
        self.conv2 = nn.Conv2d(dw_channel, dw_channel, 3, 1, 1, groups=dw_channel, bias=True)
        self.conv3 = nn.Conv2d(dw_channel // 2, c, 1, 1, 0, bias=True)
        self.sca = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(dw_channel // 2, dw_channel // 2, 1, 1, 0)
        )
        self.sg = SimpleGate()
        ffn_channel = ffn_expand * c
        self.conv4 = nn.Conv2d(c, ffn_channel, 1, 1, 0, bias=True)
        self.conv5 = nn.Conv2d(ffn_channel // 2, c, 1, 1, 0, bias=True)
        self.norm1 = LayerNorm2d(c)
        self.norm2 = LayerNorm2d(c)
        self.beta = nn.Parameter(torch.zeros((1, c, 1, 1)), requires_grad=True)
        self.gamma = nn.Parameter(torch.zeros((1, c, 1, 1)), requires_grad=True)

    def forward(self, inp):
        x = self.norm1(inp)
        x = self.conv1(x)
        x = self.conv2(x)
        x = self.sg(x)
        x = x * self.sca(x)
        x = self.conv3(x)
        y = inp + x * self.beta
        x = self.conv4(self.norm2(y))
        x = self.sg(x)
        x = self.conv5(x)
        return y + x * self.gamma


class NAFNet(nn.Module):
    def __init__(self, img_channel=3, width=32, middle_blk_num=1, enc_blk_nums=(), dec_blk_nums=()):
        super().__init__()
        self.intro = nn.Conv2d(img_channel, width, 3, 1, 1, bias=True)
        self.ending = nn.Conv2d(width, img_channel, 3, 1, 1, bias=True)
        self.encoders = nn.ModuleList()
        self.decoders = nn.ModuleList()
        self.ups = nn.ModuleList()
        self.downs = nn.ModuleList()
        chan = width
        for num in enc_blk_nums:
            self.encoders.append(nn.Sequential(*[NAFBlock(chan) for _ in range(num)]))
            self.downs.append(nn.Conv2d(chan, 2 * chan, 2, 2))
            chan = chan * 2
        self.middle_blks = nn.Sequential(*[NAFBlock(chan) for _ in range(middle_blk_num)])
        for num in dec_blk_nums:
            self.ups.append(nn.Sequential(nn.Conv2d(chan, chan * 2, 1, bias=False), nn.PixelShuffle(2)))
            chan = chan // 2
            self.decoders.append(nn.Sequential(*[NAFBlock(chan) for _ in range(num)]))
        self.padder_size = 2 ** len(self.encoders)

    def forward(self, inp):
        h, w = inp.shape[2:]
        inp = self.check_image_size(inp)
        x = self.intro(inp)
        encs = []
        for encoder, down in zip(self.encoders, self.downs, strict=True):
            x = encoder(x)
            encs.append(x)
            x = down(x)
        x = self.middle_blks(x)
        for decoder, up, enc_skip in zip(self.decoders, self.ups, encs[::-1], strict=True):
            x = up(x)
            x = x + enc_skip
            x = decoder(x)
        x = self.ending(x)
        x = x + inp
        return x[:, :, :h, :w]

    def check_image_size(self, x):
        _, _, h, w = x.size()
        mod_pad_h = (self.padder_size - h % self.padder_size) % self.padder_size
        mod_pad_w = (self.padder_size - w % self.padder_size) % self.padder_size
        return F.pad(x, (0, mod_pad_w, 0, mod_pad_h))


class PSNRLoss(nn.Module):
    def __init__(self, loss_weight=1.0):
        super().__init__()
        self.loss_weight = loss_weight
        self.scale = 10 / math.log(10)

    def forward(self, pred, target):
        return (
            self.loss_weight
            * self.scale
            * torch.log(((pred - target) ** 2).mean(dim=(1, 2, 3)) + 1e-8).mean()
        )


model = NAFNet(3, WIDTH, MID, ENC, DEC).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, betas=(0.9, 0.9))
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200000, eta_min=1e-7)
criterion = PSNRLoss()
gen = torch.Generator().manual_seed(17003)
BOX = torch.ones(3, 1, 9, 9, device=device) / 81.0
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def sharp_blur(n, h, w):
    base = torch.rand(n, 3, h // 16, w // 16, generator=gen)
    sharp = F.interpolate(base, size=(h, w), mode="nearest").to(device)
    blur = F.conv2d(F.pad(sharp, (4, 4, 4, 4), mode="replicate"), BOX, groups=3)
    return blur, sharp


def step():
    lq, gt = sharp_blur(B, CROP, CROP)
    optimizer.zero_grad()
    pred = model(lq)
    loss = criterion(pred, gt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    optimizer.step()
    scheduler.step()
    return loss.item()


model.train()
print(f"step 0 psnr loss {step():.3f}")
if device == "cuda":
    print(f"step0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for s in (1, 2):
    print(f"step {s} psnr loss {step():.3f}")
if device == "cuda":
    print(f"steps peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    lq, gt = sharp_blur(1, *FULL)
    pred = model(lq).clamp(0, 1)
    mse = ((pred - gt) ** 2).mean()
    print(f"gopro frame psnr {(10 * torch.log10(1 / mse)).item():.2f}")
    del lq, gt, pred, mse
if device == "cuda":
    print(f"full peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

outs = []
with torch.inference_mode():
    for _ in range(NCROPS // B):
        clean = torch.rand(B, 3, CROP, CROP, generator=gen).to(device)
        noisy = clean + (25.0 / 255.0) * torch.randn(B, 3, CROP, CROP, generator=gen).to(device)
        restored = model(noisy)
        outs.append((restored.clamp(0, 1) * 255.0).round().to(torch.uint8).cpu())
print(f"sidd crops {sum(o.shape[0] for o in outs)}")
if device == "cuda":
    print(
        f"sidd allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
