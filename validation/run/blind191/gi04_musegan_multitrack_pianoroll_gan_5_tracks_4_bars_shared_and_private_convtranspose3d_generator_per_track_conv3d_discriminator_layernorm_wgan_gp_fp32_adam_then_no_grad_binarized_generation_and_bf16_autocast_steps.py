"""A MuseGAN-style multi-track piano-roll GAN (Dong et al. 2018), in the shape of the MuseGAN PyTorch
tutorial but larger: 5 tracks (drums, piano, guitar, bass, strings), 4 bars of 48 time steps (beat
resolution 12) over 84 pitches (C1-B7), so a sample is a (5, 4, 48, 84) tensor in [-1, 1].

Generator: z (256-d) viewed as (256, 1, 1, 1) through shared ConvTranspose3d blocks (BatchNorm3d + ReLU)
with kernels equal to their strides — (4, 1, 1) bars, (1, 4, 1) beats, (1, 1, 7) octaves, (1, 3, 1)
sub-beats — to (128, 4, 12, 7), then per track a private ConvTranspose3d (1, 4, 1) to 48 steps and a
(1, 1, 12) one to 84 pitches and 1 channel, concatenated over tracks, tanh. Discriminator: per track a
Conv3d (1, 1, 12)/12 and a (1, 4, 1)/4, concatenated (5 x 64 channels), then shared Conv3d blocks down
to (512, 1, 1, 1) and a linear critic; every block is Conv3d + a per-sample LayerNorm written by hand +
LeakyReLU(0.2).

WGAN-GP training (gradient penalty 10 on random interpolates, torch.autograd.grad with create_graph) in
fp32 with Adam (lr 1e-3, betas (0.5, 0.9)) for both nets, one critic update and one generator update per
iteration, batch 256 of random piano rolls made on the device. Phases: the first iteration; 2 more;
generating 1,024 samples under torch.no_grad with the generator in eval mode, binarized (> 0) and moved
to the host as bool; then 2 iterations under bf16 autocast (the penalty's gradients taken inside
autocast, the loss in fp32). 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19104)
if SMALL:
    B, GEN_B, ITERS, WIDTH = 4, 4, 1, 8
else:
    B, GEN_B, ITERS, WIDTH = 256, 1024, 2, 64
TRACKS, BARS, STEPS, PITCHES, LATENT = 5, 4, 48, 84, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class GenBlock(nn.Module):
    def __init__(self, cin, cout, kernel, stride):
        super().__init__()
        self.conv = nn.ConvTranspose3d(cin, cout, kernel, stride)
        self.bn = nn.BatchNorm3d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class LayerNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(n))
        self.beta = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        shape = [-1] + [1] * (x.dim() - 1)
        flat = x.reshape(x.size(0), -1)
        mean = flat.mean(1).view(*shape)
        std = flat.std(1).view(*shape)
        y = (x - mean) / (std + self.eps)
        shape = [1, -1] + [1] * (x.dim() - 2)
        return self.gamma.view(*shape) * y + self.beta.view(*shape)


class DiscBlock(nn.Module):
    def __init__(self, cin, cout, kernel, stride):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, kernel, stride)
        self.ln = LayerNorm(cout)

    def forward(self, x):
        return F.leaky_relu(self.ln(self.conv(x)), 0.2)


class Generator(nn.Module):
    def __init__(self, w=WIDTH):
        super().__init__()
        self.shared = nn.Sequential(
            GenBlock(LATENT, 8 * w, (4, 1, 1), (4, 1, 1)),
            GenBlock(8 * w, 4 * w, (1, 4, 1), (1, 4, 1)),
            GenBlock(4 * w, 2 * w, (1, 1, 7), (1, 1, 7)),
            GenBlock(2 * w, 2 * w, (1, 3, 1), (1, 3, 1)),
        )
        self.private_time = nn.ModuleList([GenBlock(2 * w, w, (1, 4, 1), (1, 4, 1)) for _ in range(TRACKS)])
        self.private_pitch = nn.ModuleList(
            [nn.ConvTranspose3d(w, 1, (1, 1, 12), (1, 1, 12)) for _ in range(TRACKS)]
        )

    def forward(self, z):
        h = self.shared(z.view(-1, LATENT, 1, 1, 1))
        tracks = [pitch(time(h)) for time, pitch in zip(self.private_time, self.private_pitch, strict=True)]
        return torch.tanh(torch.cat(tracks, dim=1))


class Discriminator(nn.Module):
    def __init__(self, w=WIDTH):
        super().__init__()
        self.pitch = nn.ModuleList([DiscBlock(1, w, (1, 1, 12), (1, 1, 12)) for _ in range(TRACKS)])
        self.time = nn.ModuleList([DiscBlock(w, w, (1, 4, 1), (1, 4, 1)) for _ in range(TRACKS)])
        self.shared = nn.Sequential(
            DiscBlock(TRACKS * w, 2 * w, (1, 1, 3), (1, 1, 1)),
            DiscBlock(2 * w, 2 * w, (1, 1, 5), (1, 1, 5)),
            DiscBlock(2 * w, 4 * w, (1, 3, 1), (1, 3, 1)),
            DiscBlock(4 * w, 4 * w, (1, 4, 1), (1, 4, 1)),
            DiscBlock(4 * w, 8 * w, (2, 1, 1), (1, 1, 1)),
            DiscBlock(8 * w, 8 * w, (3, 1, 1), (3, 1, 1)),
        )
        self.dense = nn.Linear(8 * w, 1)

    def forward(self, x):
        feats = [t(p(x[:, i : i + 1])) for i, (p, t) in enumerate(zip(self.pitch, self.time, strict=True))]
        h = self.shared(torch.cat(feats, dim=1))
        return self.dense(h.flatten(1))


def gradient_penalty(disc, real, fake):
    alpha = torch.rand(real.size(0), 1, 1, 1, 1, device=real.device)
    inter = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = disc(inter)
    grads = torch.autograd.grad(out, inter, grad_outputs=torch.ones_like(out), create_graph=True)[0]
    return ((grads.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


G = Generator().to(device)
D = Discriminator().to(device)
g_params = sum(p.numel() for p in G.parameters())
d_params = sum(p.numel() for p in D.parameters())
print(f"G {g_params / 1e6:.2f}M D {d_params / 1e6:.2f}M")
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.9))


def random_pianorolls(n):
    return (torch.rand(n, TRACKS, BARS, STEPS, PITCHES, device=device) < 0.05).float() * 2 - 1


def iteration(use_amp=False):
    real = random_pianorolls(B)
    z = torch.randn(B, LATENT, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        fake = G(z).detach()
        d_real = D(real).mean()
        d_fake = D(fake).mean()
        gp = gradient_penalty(D, real, fake.float())
    d_loss = d_fake.float() - d_real.float() + 10.0 * gp.float()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()

    z = torch.randn(B, LATENT, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        g_loss = -D(G(z)).mean()
    opt_g.zero_grad()
    g_loss.float().backward()
    opt_g.step()
    return d_loss.item(), g_loss.item()


G.train()
D.train()
print("iter 0 d_loss {:.4f} g_loss {:.4f}".format(*iteration()))
if device == "cuda":
    print(f"first iteration peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for it in range(1, ITERS + 1):
    print(f"iter {it} d_loss %.4f g_loss %.4f" % iteration())
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

G.eval()
with torch.no_grad():
    samples = G(torch.randn(GEN_B, LATENT, device=device))
    rolls = (samples > 0).cpu()
print(f"generated {tuple(rolls.shape)} note density {rolls.float().mean():.4f}")
if device == "cuda":
    print(f"generation peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del samples
G.train()

for it in range(2):
    print(f"bf16 iter {it} d_loss %.4f g_loss %.4f" % iteration(use_amp=amp))
if device == "cuda":
    print(f"bf16 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
