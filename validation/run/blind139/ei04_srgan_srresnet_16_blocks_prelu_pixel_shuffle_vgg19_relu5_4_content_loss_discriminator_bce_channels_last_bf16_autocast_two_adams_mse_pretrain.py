"""SRGAN (Ledig et al. 2017) reproduced by hand: the SRResNet generator (9 x 9 head with PReLU,
16 residual blocks of conv-BN-PReLU-conv-BN, a BN'd long skip, two x2 upsamplers of conv to 256
channels + nn.PixelShuffle + PReLU, a 9 x 9 tail and tanh), the VGG-style discriminator (eight
3 x 3 convolutions 64 ... 512 with BN and LeakyReLU 0.2, strides alternating, Linear 18,432 -> 1,024
-> 1) and the content loss on a frozen torchvision VGG19's relu5_4 features (features[:36], ImageNet
normalisation, the paper's 1 / 12.75 ** 2 scale); 96 x 96 crops at batch 32, low-resolution inputs by
antialiased bicubic F.interpolate; channels-last throughout, bf16 autocast, two Adams (lr 1e-4);
one MSE pretraining step of the SRResNet, then 2 adversarial steps (discriminator on detached
fakes, generator on content + 1e-3 BCE-with-logits); then validation under inference_mode: 6 images
of 128 x 128 super-resolved to 512 x 512, clamped, their PSNR against bicubic; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13904)
B, HR, VB, VLR, NB = (2, 32, 1, 16, 2) if SMALL else (32, 96, 6, 128, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
CL = torch.channels_last


class ResidualBlock(nn.Module):
    def __init__(self, c=64):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return x + self.bn2(self.conv2(self.prelu(self.bn1(self.conv1(x)))))


class UpsampleBlock(nn.Sequential):
    def __init__(self, c, r):
        super().__init__(nn.Conv2d(c, c * r * r, 3, padding=1), nn.PixelShuffle(r), nn.PReLU())


class Generator(nn.Module):
    def __init__(self, nb=16):
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, 64, 9, padding=4), nn.PReLU())
        self.body = nn.Sequential(*[ResidualBlock() for _ in range(nb)])
        self.body_tail = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64))
        self.up = nn.Sequential(UpsampleBlock(64, 2), UpsampleBlock(64, 2))
        self.tail = nn.Conv2d(64, 3, 9, padding=4)

    def forward(self, x):
        h = self.head(x)
        h = h + self.body_tail(self.body(h))
        return torch.tanh(self.tail(self.up(h)))


class Discriminator(nn.Module):
    def __init__(self, hr=96):
        super().__init__()
        cfg = [(3, 64, 1, False), (64, 64, 2, True), (64, 128, 1, True), (128, 128, 2, True),
               (128, 256, 1, True), (256, 256, 2, True), (256, 512, 1, True),
               (512, 512, 2, True)]  # fmt: skip
        layers = []
        for cin, cout, stride, bn in cfg:
            layers.append(nn.Conv2d(cin, cout, 3, stride, 1))
            if bn:
                layers.append(nn.BatchNorm2d(cout))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
        self.features = nn.Sequential(*layers)
        s = hr // 16
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(512 * s * s, 1024), nn.LeakyReLU(0.2, inplace=True), nn.Linear(1024, 1)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class VGGLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torchvision.models.vgg19().features[:36].eval()
        for p in self.features.parameters():
            p.requires_grad_(False)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, sr, hr):
        f_sr = self.features(((sr + 1) / 2 - self.mean) / self.std)
        f_hr = self.features(((hr + 1) / 2 - self.mean) / self.std)
        return F.mse_loss(f_sr, f_hr) / 12.75**2


generator = Generator(NB).to(device, memory_format=CL)
discriminator = Discriminator(HR).to(device, memory_format=CL)
vgg_loss = VGGLoss().to(device, memory_format=CL)
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-4, betas=(0.9, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-4, betas=(0.9, 0.999))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def pair(b, hr):
    high = (torch.rand(b, 3, hr, hr, device=device) * 2 - 1).contiguous(memory_format=CL)
    low = F.interpolate(high, scale_factor=0.25, mode="bicubic", antialias=True, align_corners=False)
    return low.contiguous(memory_format=CL), high


generator.train()
low, high = pair(B, HR)
with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    mse = F.mse_loss(generator(low).float(), high)
opt_g.zero_grad(set_to_none=True)
mse.backward()
opt_g.step()
if device == "cuda":
    print(
        f"pretrain mse {mse.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

bce = nn.BCEWithLogitsLoss()
for step in range(2):
    low, high = pair(B, HR)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        fake = generator(low)
        d_real = discriminator(high)
        d_fake = discriminator(fake.detach())
        loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        d_fake = discriminator(fake)
        content = vgg_loss(fake, high)
        adversarial = bce(d_fake, torch.ones_like(d_fake))
        loss_g = content + 1e-3 * adversarial
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    if device == "cuda":
        print(
            f"gan step {step} d {loss_d.item():.4f} g {loss_g.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del fake, d_real, d_fake, loss_d, loss_g, content, adversarial
generator.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    low, high = pair(VB, VLR * 4)
    sr = generator(low).float().clamp(-1, 1)
    bicubic = F.interpolate(low, scale_factor=4, mode="bicubic", align_corners=False).clamp(-1, 1)
    mse_sr = ((sr - high) / 2).pow(2).mean(dim=(1, 2, 3))
    mse_bi = ((bicubic.float() - high) / 2).pow(2).mean(dim=(1, 2, 3))
    psnr_sr = (10 * torch.log10(1 / mse_sr)).mean()
    psnr_bi = (10 * torch.log10(1 / mse_bi)).mean()
if device == "cuda":
    print(
        f"psnr sr {psnr_sr.item():.2f} bicubic {psnr_bi.item():.2f}"
        f" scale {math.prod(sr.shape[2:]) // math.prod(low.shape[2:])}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
