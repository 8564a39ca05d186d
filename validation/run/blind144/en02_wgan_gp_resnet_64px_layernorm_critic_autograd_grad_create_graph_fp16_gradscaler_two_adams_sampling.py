"""WGAN-GP with the ResNet architectures of the paper's 64 x 64 experiments (as in
jalola/improved-wgan-pytorch's gan_train.py: a generator of four up-sampling residual blocks with
BatchNorm, 8 x 64 -> 64 channels from a 128-d code, and a "GoodDiscriminator" critic of four
down-sampling residual blocks with LayerNorm over [C, H, W] and mean-pool shortcuts), trained
under fp16 autocast with one GradScaler per network; the gradient penalty takes
torch.autograd.grad of the critic's fp16 output at the interpolates (cast to fp32, not scaled)
with create_graph=True, forms the penalty under autocast, and the whole critic loss is scaled and
back-propagated (double backward through the convolutions, LayerNorm and the mean pools); 5
critic iterations per generator iteration, Adam(lr 1e-4, betas (0, 0.9)) for both, batch 64; 2
generator iterations, then 1,024 samples drawn and scored by the critic under no_grad in chunks
of 256; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14402)
B, DIM, Z, HW, N_SAMPLES, CHUNK = (4, 8, 16, 64, 16, 8) if SMALL else (64, 64, 128, 64, 1024, 256)
CRITIC_ITERS, GEN_ITERS, LAMBDA = 5, 2, 10.0
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, resample, hw):
        super().__init__()
        self.resample = resample
        if resample == "down":
            self.norm1 = nn.LayerNorm([cin, hw, hw])
            self.norm2 = nn.LayerNorm([cin, hw, hw])
            self.conv1 = nn.Conv2d(cin, cin, 3, padding=1, bias=False)
            self.conv2 = nn.Conv2d(cin, cout, 3, padding=1)
            self.shortcut = nn.Conv2d(cin, cout, 1)
        else:
            self.norm1 = nn.BatchNorm2d(cin)
            self.norm2 = nn.BatchNorm2d(cout)
            self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        if self.resample == "down":
            short = F.avg_pool2d(self.shortcut(x), 2)
            h = self.conv1(F.relu(self.norm1(x)))
            h = F.avg_pool2d(self.conv2(F.relu(self.norm2(h))), 2)
        else:
            short = self.shortcut(F.interpolate(x, scale_factor=2, mode="nearest"))
            h = F.interpolate(F.relu(self.norm1(x)), scale_factor=2, mode="nearest")
            h = self.conv2(F.relu(self.norm2(self.conv1(h))))
        return short + h


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.Linear(Z, 4 * 4 * 8 * DIM)
        self.blocks = nn.Sequential(
            ResidualBlock(8 * DIM, 8 * DIM, "up", 4),
            ResidualBlock(8 * DIM, 4 * DIM, "up", 8),
            ResidualBlock(4 * DIM, 2 * DIM, "up", 16),
            ResidualBlock(2 * DIM, DIM, "up", 32),
        )
        self.bn = nn.BatchNorm2d(DIM)
        self.out = nn.Conv2d(DIM, 3, 3, padding=1)

    def forward(self, z):
        x = self.ln1(z).view(-1, 8 * DIM, 4, 4)
        x = F.relu(self.bn(self.blocks(x)))
        return torch.tanh(self.out(x))


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, DIM, 3, padding=1)
        self.blocks = nn.Sequential(
            ResidualBlock(DIM, 2 * DIM, "down", 64),
            ResidualBlock(2 * DIM, 4 * DIM, "down", 32),
            ResidualBlock(4 * DIM, 8 * DIM, "down", 16),
            ResidualBlock(8 * DIM, 8 * DIM, "down", 8),
        )
        self.ln1 = nn.Linear(4 * 4 * 8 * DIM, 1)

    def forward(self, x):
        return self.ln1(self.blocks(self.conv1(x)).flatten(1)).view(-1)


gen, critic = Generator().to(device), Critic().to(device)
opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.0, 0.9))
scaler_g = torch.amp.GradScaler("cuda", enabled=device == "cuda")
scaler_d = torch.amp.GradScaler("cuda", enabled=device == "cuda")
amp = dict(device_type="cuda", dtype=torch.float16, enabled=device == "cuda")

if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for g_it in range(GEN_ITERS):
    for p in critic.parameters():
        p.requires_grad_(True)
    for _ in range(CRITIC_ITERS):
        real = torch.rand(B, 3, HW, HW, device=device) * 2 - 1
        z = torch.randn(B, Z, device=device)
        with torch.no_grad():
            with torch.autocast(**amp):
                fake = gen(z)
        alpha = torch.rand(B, 1, 1, 1, device=device)
        interp = (alpha * real + (1 - alpha) * fake.float()).requires_grad_(True)
        with torch.autocast(**amp):
            d_real = critic(real).mean()
            d_fake = critic(fake).mean()
            d_interp = critic(interp)
        grads = torch.autograd.grad(d_interp.float().sum(), interp, create_graph=True)[0]
        with torch.autocast(**amp):
            gp = ((grads.flatten(1).norm(2, dim=1) - 1) ** 2).mean() * LAMBDA
            d_loss = d_fake - d_real + gp
        opt_d.zero_grad(set_to_none=True)
        scaler_d.scale(d_loss).backward()
        scaler_d.step(opt_d)
        scaler_d.update()
    for p in critic.parameters():
        p.requires_grad_(False)
    z = torch.randn(B, Z, device=device)
    with torch.autocast(**amp):
        g_loss = -critic(gen(z)).mean()
    opt_g.zero_grad(set_to_none=True)
    scaler_g.scale(g_loss).backward()
    scaler_g.step(opt_g)
    scaler_g.update()
    if device == "cuda":
        print(
            f"gen iter {g_it} d_loss {d_loss.item():.3f} gp {gp.item():.3f} g_loss {g_loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del real, fake, interp, grads, gp, d_loss, d_real, d_fake, d_interp, g_loss
gen.eval()
scores = []
with torch.no_grad(), torch.autocast(**amp):
    for s in range(0, N_SAMPLES, CHUNK):
        imgs = gen(torch.randn(CHUNK, Z, device=device))
        scores.append(critic(imgs).float())
scores = torch.cat(scores)
if device == "cuda":
    print(
        f"samples {N_SAMPLES} mean critic {scores.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
