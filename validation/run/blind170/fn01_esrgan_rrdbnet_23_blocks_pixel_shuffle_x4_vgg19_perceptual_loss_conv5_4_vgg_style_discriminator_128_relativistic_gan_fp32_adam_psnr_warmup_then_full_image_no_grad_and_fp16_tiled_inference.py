"""An ESRGAN x4 step as xinntao/BasicSR (archs/rrdbnet_arch.py, archs/discriminator_arch.py,
losses/basic_loss.py PerceptualLoss, models/esrgan_model.py) writes it, by hand: the RRDBNet generator
(64 features, growth 32, 23 RRDBs of three ResidualDenseBlocks each: five 3 x 3 convolutions over the
growing torch.cat of earlier features, LeakyReLU 0.2, residual scaling 0.2), here with a
PixelShuffle(2) x 2 upsampler (conv 64 -> 256, pixel shuffle, LeakyReLU, twice) instead of nearest
interpolation, conv_hr and conv_last; the VGGStyleDiscriminator for 128 x 128 inputs (ten convolutions
with BatchNorm, stride-2 4 x 4 convolutions down to 512 x 4 x 4, linear 8,192 -> 100 -> 1); a frozen
torchvision vgg19(weights=None) feature extractor up to conv5_4 (before its ReLU, ImageNet-normalised
inputs) for the perceptual L1 loss on conv5_4. fp32, Adam (lr 1e-4, betas 0.9/0.99) for both networks,
MultiStepLR. Batch 16 of 128 x 128 HR crops (LR 32 x 32 by bicubic antialiased downsampling on the
GPU). Phases: two PSNR-oriented L1 warm-up steps of the generator alone; two GAN steps as
ESRGANModel.optimize_parameters (discriminator frozen for the generator's pixel 1e-2 + perceptual 1.0 +
relativistic GAN 5e-3 loss, then the relativistic discriminator step on detached fakes); the full-size
validation of two 256 x 256 LR images (1,024 x 1,024 out) under no_grad; then Real-ESRGAN's tiled
inference (tiles of 128 with 10 pixels of padding, pasted into the output) of a 512 x 384 image with
the generator in fp16 under inference_mode (4 phases after the models' creation)."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17001)
if SMALL:
    NB, B, HR, VAL, TILE_IMG, TILE = 2, 2, 32, 32, (48, 40), 16
else:
    NB, B, HR, VAL, TILE_IMG, TILE = 23, 16, 128, 256, (384, 512), 128
NF, GC, SCALE, TILE_PAD = 64, 32, 4, 10
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResidualDenseBlock(nn.Module):
    def __init__(self, nf=64, gc=32):
        super().__init__()
        self.conv1 = nn.Conv2d(nf, gc, 3, 1, 1)
        self.conv2 = nn.Conv2d(nf + gc, gc, 3, 1, 1)
        self.conv3 = nn.Conv2d(nf + 2 * gc, gc, 3, 1, 1)
        self.conv4 = nn.Conv2d(nf + 3 * gc, gc, 3, 1, 1)
        self.conv5 = nn.Conv2d(nf + 4 * gc, nf, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
                m.weight.data *= 0.1
                m.bias.data.fill_(0)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, nf, gc=32):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(nf, gc)
        self.rdb2 = ResidualDenseBlock(nf, gc)
        self.rdb3 = ResidualDenseBlock(nf, gc)

    def forward(self, x):
        out = self.rdb1(x)
        out = self.rdb2(out)
        out = self.rdb3(out)
        return out * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, nf=64, nb=23, gc=32):
        super().__init__()
        self.conv_first = nn.Conv2d(3, nf, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(nf, gc) for _ in range(nb)])
        self.conv_body = nn.Conv2d(nf, nf, 3, 1, 1)
        self.upsample = nn.Sequential(
            nn.Conv2d(nf, nf * 4, 3, 1, 1),
            nn.PixelShuffle(2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(nf, nf * 4, 3, 1, 1),
            nn.PixelShuffle(2),
            nn.LeakyReLU(0.2, inplace=True),
        )
        self.conv_hr = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_last = nn.Conv2d(nf, 3, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        feat = self.conv_first(x)
        body_feat = self.conv_body(self.body(feat))
        feat = feat + body_feat
        feat = self.upsample(feat)
        return self.conv_last(self.lrelu(self.conv_hr(feat)))


class VGGStyleDiscriminator(nn.Module):
    def __init__(self, num_in_ch=3, num_feat=64, input_size=128):
        super().__init__()
        chans = [num_feat, num_feat * 2, num_feat * 4, num_feat * 8, num_feat * 8]
        self.conv0_0 = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1, bias=True)
        self.conv0_1 = nn.Conv2d(num_feat, num_feat, 4, 2, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(num_feat, affine=True)
        self.stages = nn.ModuleList()
        cin = num_feat
        for c in chans[1:]:
            self.stages.append(
                nn.ModuleList(
                    [
                        nn.Conv2d(cin, c, 3, 1, 1, bias=False),
                        nn.BatchNorm2d(c, affine=True),
                        nn.Conv2d(c, c, 4, 2, 1, bias=False),
                        nn.BatchNorm2d(c, affine=True),
                    ]
                )
            )
            cin = c
        side = input_size // 32
        self.linear1 = nn.Linear(num_feat * 8 * side * side, 100)
        self.linear2 = nn.Linear(100, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        feat = self.lrelu(self.conv0_0(x))
        feat = self.lrelu(self.bn0_1(self.conv0_1(feat)))
        for c1, b1, c2, b2 in self.stages:
            feat = self.lrelu(b1(c1(feat)))
            feat = self.lrelu(b2(c2(feat)))
        feat = feat.view(feat.size(0), -1)
        feat = self.lrelu(self.linear1(feat))
        return self.linear2(feat)


class PerceptualLoss(nn.Module):
    def __init__(self):
        super().__init__()
        vgg = torchvision.models.vgg19(weights=None).features[:35]
        self.vgg = vgg.eval()
        for p in self.vgg.parameters():
            p.requires_grad = False
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, x, gt):
        x_features = self.vgg((x - self.mean) / self.std)
        gt_features = self.vgg((gt.detach() - self.mean) / self.std)
        return F.l1_loss(x_features, gt_features)


net_g = RRDBNet(NF, NB, GC).to(device)
net_d = (
    VGGStyleDiscriminator(input_size=HR).to(device)
    if not SMALL
    else VGGStyleDiscriminator(input_size=32).to(device)
)
cri_perceptual = PerceptualLoss().to(device)
optimizer_g = torch.optim.Adam(net_g.parameters(), lr=1e-4, betas=(0.9, 0.99))
optimizer_d = torch.optim.Adam(net_d.parameters(), lr=1e-4, betas=(0.9, 0.99))
sched_g = torch.optim.lr_scheduler.MultiStepLR(optimizer_g, milestones=[50000, 100000], gamma=0.5)
sched_d = torch.optim.lr_scheduler.MultiStepLR(optimizer_d, milestones=[50000, 100000], gamma=0.5)
gen = torch.Generator().manual_seed(17001)
print(
    f"net_g {sum(p.numel() for p in net_g.parameters())} net_d {sum(p.numel() for p in net_d.parameters())}"
)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def hr_batch(n, size):
    base = torch.rand(n, 3, size // 8, size // 8, generator=gen)
    img = F.interpolate(base, size=(size, size), mode="bilinear", align_corners=False)
    img = img + 0.05 * torch.randn(n, 3, size, size, generator=gen)
    return img.clamp_(0, 1).to(device)


def degrade(gt):
    lq = F.interpolate(gt, scale_factor=1 / SCALE, mode="bicubic", antialias=True, align_corners=False)
    return torch.clamp((lq * 255.0).round(), 0, 255) / 255.0


# PSNR-oriented warm-up (BasicSR's SRModel with the L1 pixel loss)
net_g.train()
for it in range(2):
    gt = hr_batch(B, HR)
    lq = degrade(gt)
    optimizer_g.zero_grad()
    output = net_g(lq)
    l_pix = F.l1_loss(output, gt)
    l_pix.backward()
    optimizer_g.step()
    sched_g.step()
    print(f"warmup {it} l_pix {l_pix.item():.4f}")
del output, l_pix
if device == "cuda":
    print(f"warmup peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ESRGAN: relativistic GAN + perceptual + pixel
net_d.train()
for it in range(2):
    gt = hr_batch(B, HR)
    lq = degrade(gt)
    for p in net_d.parameters():
        p.requires_grad = False
    optimizer_g.zero_grad()
    output = net_g(lq)
    l_g_pix = 1e-2 * F.l1_loss(output, gt)
    l_g_percep = 1.0 * cri_perceptual(output, gt)
    real_d_pred = net_d(gt).detach()
    fake_g_pred = net_d(output)
    l_g_real = F.binary_cross_entropy_with_logits(
        real_d_pred - torch.mean(fake_g_pred), torch.zeros_like(real_d_pred)
    )
    l_g_fake = F.binary_cross_entropy_with_logits(
        fake_g_pred - torch.mean(real_d_pred), torch.ones_like(fake_g_pred)
    )
    l_g_gan = 5e-3 * (l_g_real + l_g_fake) / 2
    l_g_total = l_g_pix + l_g_percep + l_g_gan
    l_g_total.backward()
    optimizer_g.step()

    for p in net_d.parameters():
        p.requires_grad = True
    optimizer_d.zero_grad()
    fake_d_pred = net_d(output).detach()
    real_d_pred = net_d(gt)
    l_d_real = (
        F.binary_cross_entropy_with_logits(
            real_d_pred - torch.mean(fake_d_pred), torch.ones_like(real_d_pred)
        )
        * 0.5
    )
    l_d_real.backward()
    fake_d_pred = net_d(output.detach())
    l_d_fake = (
        F.binary_cross_entropy_with_logits(
            fake_d_pred - torch.mean(real_d_pred.detach()), torch.zeros_like(fake_d_pred)
        )
        * 0.5
    )
    l_d_fake.backward()
    optimizer_d.step()
    sched_g.step()
    sched_d.step()
    print(f"gan {it} g {l_g_total.item():.4f} d {(l_d_real + l_d_fake).item():.4f}")
del output, l_g_total, l_d_real, l_d_fake, real_d_pred, fake_d_pred, fake_g_pred, gt, lq
if device == "cuda":
    print(f"gan peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# full-size validation (BasicSR's nondist_validation: one image at a time, PSNR on the Y-free RGB)
net_g.eval()
psnr = 0.0
with torch.no_grad():
    for _ in range(2):
        gt = hr_batch(1, VAL * SCALE)
        lq = degrade(gt)
        sr = net_g(lq).clamp_(0, 1)
        mse = torch.mean((sr * 255.0 - gt * 255.0) ** 2)
        psnr += (10.0 * torch.log10(255.0**2 / mse)).item()
        del sr, gt, lq, mse
print(f"val psnr {psnr / 2:.2f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# Real-ESRGAN's RealESRGANer.tile_process with the half-precision generator
net_g.half()
img = degrade(hr_batch(1, TILE_IMG[1] * SCALE))[:, :, : TILE_IMG[0], :].half()
batch, channel, height, width = img.shape
output = img.new_zeros((batch, channel, height * SCALE, width * SCALE))
tiles_x = math.ceil(width / TILE)
tiles_y = math.ceil(height / TILE)
with torch.inference_mode():
    for y in range(tiles_y):
        for x in range(tiles_x):
            ofs_x, ofs_y = x * TILE, y * TILE
            in_x0, in_x1 = ofs_x, min(ofs_x + TILE, width)
            in_y0, in_y1 = ofs_y, min(ofs_y + TILE, height)
            in_x0_pad, in_x1_pad = max(in_x0 - TILE_PAD, 0), min(in_x1 + TILE_PAD, width)
            in_y0_pad, in_y1_pad = max(in_y0 - TILE_PAD, 0), min(in_y1 + TILE_PAD, height)
            input_tile = img[:, :, in_y0_pad:in_y1_pad, in_x0_pad:in_x1_pad]
            output_tile = net_g(input_tile)
            out_x0, out_x1 = in_x0 * SCALE, in_x1 * SCALE
            out_y0, out_y1 = in_y0 * SCALE, in_y1 * SCALE
            t_x0 = (in_x0 - in_x0_pad) * SCALE
            t_x1 = t_x0 + (in_x1 - in_x0) * SCALE
            t_y0 = (in_y0 - in_y0_pad) * SCALE
            t_y1 = t_y0 + (in_y1 - in_y0) * SCALE
            output[:, :, out_y0:out_y1, out_x0:out_x1] = output_tile[:, :, t_y0:t_y1, t_x0:t_x1]
    out_u8 = (output.float().clamp_(0, 1) * 255.0).round().to(torch.uint8)
print(f"tiled {tuple(out_u8.shape)} tiles {tiles_x * tiles_y}")
if device == "cuda":
    print(
        f"tiled allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
