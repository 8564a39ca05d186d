"""The pytorch.org DCGAN tutorial as written: 64 x 64 CelebA images (seeded random tensors of the
same shape, normalised to [-1, 1] on the host and moved per batch), nz 100, ngf 64, ndf 64, the
Generator of ConvTranspose2d, BatchNorm2d, ReLU and Tanh and the Discriminator of strided Conv2d,
LeakyReLU(0.2), BatchNorm2d and Sigmoid, both initialised by `weights_init` (normal 0.02, batch
norm weight around 1), BCELoss, one Adam each (lr 0.0002, betas 0.5, 0.999); each iteration the
discriminator's loss on the real batch backward, a fake batch from fresh noise, the loss on its
detached copy backward, the discriminator's step, then the generator's loss on the same fake batch
with real labels refilled into the label tensor, its step, D(x) and D(G(z)) read by `.item()`;
batch 128, fp32, 8 iterations with the fixed noise's 64 images generated under no_grad every 4;
then 1,024 images generated in eval mode under no_grad in batches of 256 for a grid; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.optim as optim

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(999)
device = torch.device("cuda:0" if (torch.cuda.is_available()) else "cpu")
batch_size = 8 if SMALL else 128
image_size, nc, nz, ngf, ndf = 64, 3, 100, 64, 64
lr, beta1 = 0.0002, 0.5
ITERS, N_GRID, GRID_B = (2, 16, 8) if SMALL else (8, 1024, 256)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input)


def report(tag):
    if device.type == "cuda":
        print(f"{tag} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


netG = Generator(1).to(device)
netG.apply(weights_init)
netD = Discriminator(1).to(device)
netD.apply(weights_init)
criterion = nn.BCELoss()
fixed_noise = torch.randn(64, nz, 1, 1, device=device)
real_label, fake_label = 1.0, 0.0
optimizerD = optim.Adam(netD.parameters(), lr=lr, betas=(beta1, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=lr, betas=(beta1, 0.999))
report("models")

img_list, G_losses, D_losses = [], [], []
for i in range(ITERS):
    data = [torch.rand(batch_size, nc, image_size, image_size) * 2 - 1, torch.zeros(batch_size)]
    netD.zero_grad()
    real_cpu = data[0].to(device)
    b_size = real_cpu.size(0)
    label = torch.full((b_size,), real_label, dtype=torch.float, device=device)
    output = netD(real_cpu).view(-1)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean().item()
    noise = torch.randn(b_size, nz, 1, 1, device=device)
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach()).view(-1)
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean().item()
    errD = errD_real + errD_fake
    optimizerD.step()
    netG.zero_grad()
    label.fill_(real_label)
    output = netD(fake).view(-1)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    G_losses.append(errG.item())
    D_losses.append(errD.item())
    if i % 4 == 3:
        with torch.no_grad():
            fake = netG(fixed_noise).detach().cpu()
        img_list.append(fake)
    if i == 0:
        report("first_iteration")
print(f"Loss_D {D_losses[-1]:.4f} Loss_G {G_losses[-1]:.4f} D(x) {D_x:.4f}", end=" ")
print(f"D(G(z)) {D_G_z1:.4f} / {D_G_z2:.4f}")
report("train")

netG.eval()
grid = []
with torch.no_grad():
    for _start in range(0, N_GRID, GRID_B):
        noise = torch.randn(GRID_B, nz, 1, 1, device=device)
        grid.append(netG(noise).clamp_(-1, 1).add_(1).mul_(0.5))
    grid = torch.cat(grid)
print(f"grid {tuple(grid.shape)} mean {grid.mean().item():.3f}")
report("generate")
