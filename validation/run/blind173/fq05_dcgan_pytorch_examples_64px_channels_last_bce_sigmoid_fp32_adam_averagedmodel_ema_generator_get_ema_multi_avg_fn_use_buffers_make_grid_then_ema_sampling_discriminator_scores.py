"""DCGAN as pytorch/examples (dcgan/main.py) writes it, at 64 x 64 with nz 100, ngf = ndf = 128
(the Generator's five ConvTranspose2d of 4 x 4 with BatchNorm and ReLU, tanh; the Discriminator's
five Conv2d with BatchNorm and LeakyReLU 0.2 and a Sigmoid, BCELoss), weights_init normal(0, 0.02)
and BatchNorm normal(1, 0.02); both models and the batches in channels_last; fp32 (TF32 allowed for
cuDNN, its default); Adam(lr 2e-4, betas (0.5, 0.999)) for each; plus an EMA copy of the generator
as users add it now: torch.optim.swa_utils.AveragedModel(netG, multi_avg_fn=get_ema_multi_avg_fn(
0.999), use_buffers=True), update_parameters after each generator step (the foreach lerp over
parameters and BatchNorm buffers). Batch 512 of "real" images from a seeded CPU generator, pinned
and copied non_blocking; the D step (real with label 1 by torch.full, fake with label 0 on
fake.detach()), then the G step against label 1; iteration 0 its own phase, iterations 1-5 another;
then vutils.make_grid of 64 samples of the fixed noise from the EMA generator, normalized on the
GPU; then 8,192 EMA samples in batches of 1,024 under no_grad with the discriminator's scores (the
mean and the fraction over 0.5); 4 phases."""

import os

import torch
import torch.nn as nn
import torchvision.utils as vutils
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17305)
if SMALL:
    B, NZ, NGF, NDF, ITERS, N_EVAL, EVAL_B = 8, 16, 8, 8, 3, 32, 16
else:
    B, NZ, NGF, NDF, ITERS, N_EVAL, EVAL_B = 512, 100, 128, 128, 6, 8192, 1024
NC = 3
device = "cuda" if torch.cuda.is_available() else "cpu"


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(NGF * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 8, NGF * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NGF * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NGF * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NGF),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, x):
        return self.main(x)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NDF * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, NDF * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NDF * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 4, NDF * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NDF * 8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


netG = Generator().to(device, memory_format=torch.channels_last)
netG.apply(weights_init)
netD = Discriminator().to(device, memory_format=torch.channels_last)
netD.apply(weights_init)
ema_G = AveragedModel(netG, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
criterion = nn.BCELoss()
fixed_noise = torch.randn(64, NZ, 1, 1, device=device)
real_label, fake_label = 1.0, 0.0
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
data_gen = torch.Generator().manual_seed(17305)
print(f"G {sum(p.numel() for p in netG.parameters())} D {sum(p.numel() for p in netD.parameters())}")
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for i in range(ITERS):
    batch = torch.rand(B, NC, 64, 64, generator=data_gen) * 2 - 1
    if device == "cuda":
        batch = batch.pin_memory()
    real_cpu = batch.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    batch_size = real_cpu.size(0)
    label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)
    output = netD(real_cpu)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean().item()
    noise = torch.randn(batch_size, NZ, 1, 1, device=device)
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean().item()
    errD = errD_real + errD_fake
    optimizerD.step()
    # (2) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    label.fill_(real_label)
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    ema_G.update_parameters(netG)
    print(
        f"[{i}] Loss_D {errD.item():.4f} Loss_G {errG.item():.4f} D(x) {D_x:.4f}",
        f"D(G(z)) {D_G_z1:.4f} / {D_G_z2:.4f}",
    )
    if device == "cuda" and i in (0, ITERS - 1):
        print(f"iter {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del batch, real_cpu, label, output, noise, fake, errD_real, errD_fake, errD, errG

ema_G.eval()
with torch.no_grad():
    fake = ema_G(fixed_noise)
    grid = vutils.make_grid(fake, padding=2, normalize=True)
    grid_u8 = grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to("cpu", torch.uint8)
print(f"grid {tuple(grid_u8.shape)}")
del fake, grid
if device == "cuda":
    print(f"grid peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

netD.eval()
scores = []
with torch.no_grad():
    for _ in range(N_EVAL // EVAL_B):
        z = torch.randn(EVAL_B, NZ, 1, 1, device=device)
        scores.append(netD(ema_G(z)))
    scores = torch.cat(scores)
print(f"ema D score mean {scores.mean().item():.4f} fooled {(scores > 0.5).float().mean().item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
