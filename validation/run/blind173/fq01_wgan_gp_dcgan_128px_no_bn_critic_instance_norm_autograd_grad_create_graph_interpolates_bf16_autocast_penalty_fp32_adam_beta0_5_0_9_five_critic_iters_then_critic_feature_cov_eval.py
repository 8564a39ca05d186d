"""WGAN-GP (Gulrajani et al. 2017) as the widely copied PyTorch ports write it (e.g.
EmilienDupont/wgan-gp, eriklindernoren/PyTorch-GAN's wgan_gp.py), at 128 x 128 with a DCGAN-shaped
pair: a generator from a 128-d code through a Linear to 1,024 x 4 x 4 and five ConvTranspose2d
(4, 2, 1) up-samplings (1,024 -> 512 -> 256 -> 128 -> 64 -> 3, BatchNorm and ReLU, tanh), and a critic
without BatchNorm (the paper's advice) of five Conv2d (4, 2, 1) down-samplings 3 -> 64 -> ... -> 1,024
with InstanceNorm2d(affine=True) and LeakyReLU 0.2, then a Linear to one score. The critic's and the
generator's forwards run under bf16 autocast; the gradient penalty is formed in fp32 outside autocast
(interpolates = alpha * real + (1 - alpha) * fake with requires_grad_, the critic's score, then
torch.autograd.grad(outputs, interpolates, grad_outputs=ones, create_graph=True, retain_graph=True),
((||grad||_2 - 1)^2).mean() * 10) and back-propagated with the Wasserstein loss (double backward
through the convolutions and the instance norms). Adam(lr 1e-4, betas (0.5, 0.9)) for both; batch 64
of "real" images drawn from a seeded CPU generator and copied in; 5 critic iterations per generator
iteration; 3 generator iterations (the first critic iteration its own phase, the rest of the first
generator iteration another); then 2,048 samples drawn under no_grad in chunks of 512 and the critic's
penultimate features' mean and covariance (torch.cov) as a Frechet-style statistic; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17301)
if SMALL:
    B, Z, G_CH, D_CH, HW, N_SAMPLES, CHUNK, GEN_ITERS = 4, 16, 16, 8, 32, 16, 8, 2
else:
    B, Z, G_CH, D_CH, HW, N_SAMPLES, CHUNK, GEN_ITERS = 64, 128, 64, 64, 128, 2048, 512, 3
CRITIC_ITERS, LAMBDA_GP = 5, 10.0
device = "cuda" if torch.cuda.is_available() else "cpu"
N_UP = {32: 3, 128: 5}[HW]


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        top = G_CH * 2 ** (N_UP - 1)
        self.top = top
        self.fc = nn.Sequential(nn.Linear(Z, top * 4 * 4), nn.BatchNorm1d(top * 4 * 4), nn.ReLU(True))
        layers = []
        ch = top
        for _ in range(N_UP - 1):
            layers += [
                nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ch // 2),
                nn.ReLU(True),
            ]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, 3, 4, 2, 1), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(self.fc(z).view(-1, self.top, 4, 4))


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, D_CH, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        ch = D_CH
        for _ in range(N_UP - 1):
            layers += [
                nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False),
                nn.InstanceNorm2d(ch * 2, affine=True),
                nn.LeakyReLU(0.2, True),
            ]
            ch *= 2
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.out = nn.Linear(ch * 4 * 4, 1)

    def forward(self, x, return_features=False):
        f = self.features(x)
        s = self.out(f)
        return (s, f) if return_features else s


def compute_gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1, 1, 1, device=real.device)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_interpolates = critic(interpolates)
    gradients = torch.autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=torch.ones_like(d_interpolates),
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    gradients = gradients.view(gradients.size(0), -1)
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


generator = Generator().to(device)
critic = Critic().to(device)
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-4, betas=(0.5, 0.9))
opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
data_gen = torch.Generator().manual_seed(17301)
print(
    f"generator {sum(p.numel() for p in generator.parameters())}",
    f"critic {sum(p.numel() for p in critic.parameters())}",
)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def real_batch():
    x = torch.rand(B, 3, HW, HW, generator=data_gen) * 2 - 1
    return x.to(device, non_blocking=True)


generator.train()
critic.train()
for gen_iter in range(GEN_ITERS):
    for p in critic.parameters():
        p.requires_grad_(True)
    for critic_iter in range(CRITIC_ITERS):
        real = real_batch()
        z = torch.randn(B, Z, device=device)
        opt_d.zero_grad()
        with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                fake = generator(z)
            d_real = critic(real).float().mean()
            d_fake = critic(fake).float().mean()
        gp = compute_gradient_penalty(critic, real, fake.float())
        d_loss = d_fake - d_real + LAMBDA_GP * gp
        d_loss.backward()
        opt_d.step()
        if device == "cuda" and gen_iter == 0 and critic_iter == 0:
            print(
                f"critic iter 0 peak {torch.cuda.max_memory_allocated()}",
                f"reserved {torch.cuda.memory_reserved()}",
            )
            torch.cuda.reset_peak_memory_stats()

    for p in critic.parameters():
        p.requires_grad_(False)
    opt_g.zero_grad()
    z = torch.randn(B, Z, device=device)
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        g_loss = -critic(generator(z)).float().mean()
    g_loss.backward()
    opt_g.step()
    print(f"gen iter {gen_iter} d_loss {d_loss.item():.3f} gp {gp.item():.3f} g_loss {g_loss.item():.3f}")
    if device == "cuda" and gen_iter in (0, GEN_ITERS - 1):
        print(
            f"gen iter {gen_iter} peak {torch.cuda.max_memory_allocated()}",
            f"reserved {torch.cuda.memory_reserved()}",
        )
        torch.cuda.reset_peak_memory_stats()
del real, fake, z, d_real, d_fake, gp, d_loss, g_loss

generator.eval()
critic.eval()
feats = []
with torch.no_grad():
    for _ in range(0, N_SAMPLES, CHUNK):
        z = torch.randn(CHUNK, Z, device=device)
        with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
            imgs = generator(z)
            _, f = critic(imgs, return_features=True)
        feats.append(f.float())
    feats = torch.cat(feats)
    mu = feats.mean(0)
    sigma = torch.cov(feats[:, :2048].T)
print(f"feature mean norm {mu.norm().item():.3f} cov trace {sigma.trace().item():.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
