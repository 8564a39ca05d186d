"""A MelGAN vocoder, hand-written: a generator from 80-band mel frames to waveform (Conv1d 7, four
ConvTranspose1d upsamplings 8x8x2x2 with residual stacks of dilated Conv1d 1/3/9, every convolution
under torch.nn.utils.parametrizations.weight_norm) and three discriminators on the waveform at 1x,
2x and 4x average-pooled scales (grouped strided Conv1d, every convolution under
torch.nn.utils.parametrizations.spectral_norm); hinge losses plus feature matching, Adamax (foreach)
for the generator and NAdam (decoupled weight decay, foreach) for the discriminators, fp32, batch 16
of 64 frames (16,384 samples), 2 steps; then the generator run under no_grad inside
parametrize.cached() on 4 clips of 400 frames; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11205)
B, FRAMES, EVAL_FRAMES, NGF, STEPS = (2, 16, 32, 8, 1) if SMALL else (16, 64, 400, 32, 2)
NMEL = 80
device = "cuda" if torch.cuda.is_available() else "cpu"


def wn(m):
    return weight_norm(m)


class ResStack(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.LeakyReLU(0.2),
                nn.ReflectionPad1d(d),
                wn(nn.Conv1d(ch, ch, 3, dilation=d)),
                nn.LeakyReLU(0.2),
                wn(nn.Conv1d(ch, ch, 1)),
            )
            for d in (1, 3, 9)
        )
        self.shortcuts = nn.ModuleList(wn(nn.Conv1d(ch, ch, 1)) for _ in range(3))

    def forward(self, x):
        for block, short in zip(self.blocks, self.shortcuts, strict=True):
            x = short(x) + block(x)
        return x


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        ch = NGF * 16
        layers = [nn.ReflectionPad1d(3), wn(nn.Conv1d(NMEL, ch, 7))]
        for r in (8, 8, 2, 2):
            layers += [
                nn.LeakyReLU(0.2),
                wn(nn.ConvTranspose1d(ch, ch // 2, 2 * r, r, padding=r // 2 + r % 2, output_padding=r % 2)),
                ResStack(ch // 2),
            ]
            ch //= 2
        layers += [nn.LeakyReLU(0.2), nn.ReflectionPad1d(3), wn(nn.Conv1d(ch, 1, 7)), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, mel):
        return self.net(mel)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        sn = spectral_norm
        self.layers = nn.ModuleList(
            [
                nn.Sequential(nn.ReflectionPad1d(7), sn(nn.Conv1d(1, 16, 15)), nn.LeakyReLU(0.2)),
                nn.Sequential(sn(nn.Conv1d(16, 64, 41, 4, padding=20, groups=4)), nn.LeakyReLU(0.2)),
                nn.Sequential(sn(nn.Conv1d(64, 256, 41, 4, padding=20, groups=16)), nn.LeakyReLU(0.2)),
                nn.Sequential(sn(nn.Conv1d(256, 1024, 41, 4, padding=20, groups=64)), nn.LeakyReLU(0.2)),
                nn.Sequential(sn(nn.Conv1d(1024, 1024, 41, 4, padding=20, groups=256)), nn.LeakyReLU(0.2)),
                nn.Sequential(sn(nn.Conv1d(1024, 1024, 5, padding=2)), nn.LeakyReLU(0.2)),
                sn(nn.Conv1d(1024, 1, 3, padding=1)),
            ]
        )

    def forward(self, x):
        feats = []
        for layer in self.layers:
            x = layer(x)
            feats.append(x)
        return feats


class MultiScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.discs = nn.ModuleList(Discriminator() for _ in range(3))
        self.pool = nn.AvgPool1d(4, 2, padding=1, count_include_pad=False)

    def forward(self, x):
        outs = []
        for d in self.discs:
            outs.append(d(x))
            x = self.pool(x)
        return outs


G, D = Generator().to(device), MultiScale().to(device)
opt_g = torch.optim.Adamax(G.parameters(), lr=1e-4, betas=(0.5, 0.9), foreach=True)
opt_d = torch.optim.NAdam(
    D.parameters(), lr=1e-4, betas=(0.5, 0.9), weight_decay=1e-4, decoupled_weight_decay=True, foreach=True
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    mel = torch.randn(B, NMEL, FRAMES, device=device)
    audio = torch.randn(B, 1, FRAMES * 256, device=device).clamp(-1, 1)
    fake = G(mel)
    loss_d = 0.0
    for real_f, fake_f in zip(D(audio), D(fake.detach()), strict=True):
        loss_d = loss_d + F.relu(1 - real_f[-1]).mean() + F.relu(1 + fake_f[-1]).mean()
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    loss_g = 0.0
    with torch.no_grad():
        real_feats = D(audio)
    for real_f, fake_f in zip(real_feats, D(fake), strict=True):
        loss_g = loss_g - fake_f[-1].mean()
        for rf, ff in zip(real_f[:-1], fake_f[:-1], strict=True):
            loss_g = loss_g + 10 / 3 * F.l1_loss(ff, rf)
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    if device == "cuda":
        print(
            f"step {step} d {loss_d.item():.3f} g {loss_g.item():.3f} "
            f"peak {torch.cuda.max_memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del mel, audio, fake, loss_d, loss_g, real_feats
G.eval()
with torch.no_grad(), parametrize.cached():
    wav = G(torch.randn(4, NMEL, EVAL_FRAMES, device=device))
if device == "cuda":
    print(
        f"eval {tuple(wav.shape)} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
