"""HiFi-GAN V1 by hand on random waveforms: generator, multi-period and multi-scale discriminators.

Generator: mel (80 bands) -> Conv1d 512 (k 7) -> four ConvTranspose1d upsamplings (8, 8, 2, 2; kernels
16, 16, 4, 4; 512 -> 32 channels), each followed by the multi-receptive-field fusion (three residual
blocks of kernels 3, 7, 11 with dilations 1, 3, 5, their outputs averaged), leaky ReLU 0.1, Conv1d to
1 channel and tanh; every convolution under torch.nn.utils.parametrizations.weight_norm.
Discriminators: MPD (periods 2, 3, 5, 7, 11: the waveform padded by reflection and reshaped to
(B, 1, T/p, p), five Conv2d (5, 1) with stride (3, 1) up to 1024 channels and a (3, 1) post conv, weight
norm) and MSD (three scales: the raw waveform with spectral_norm (parametrizations) and two
average-pooled ones with weight norm; grouped Conv1d of kernel 41).
Losses: LSGAN, feature matching (L1 over every discriminator feature map) x 2 and the mel L1 x 45
(torch.stft n_fft 1024, hop 256, Hann window, a Slaney-like mel filterbank matrix built by hand, log
clamp 1e-5).
Phase 1: 3 steps in fp32, batch 32 x 8192 samples, two AdamW (betas 0.8, 0.99), the discriminator
step first (generator output detached), zero_grad(set_to_none=True).
Phase 2: inference_mode: 4 clips of 10 s at 22,050 Hz (mel 862 frames -> 220,672 samples).
Phase 3: 3 steps under bf16 autocast (the mel loss in fp32 outside autocast), zero_grad(set_to_none=
False) on both optimizers, ExponentialLR schedulers. 3 phases after the models'."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21501)
device = "cuda" if torch.cuda.is_available() else "cpu"
SR, N_FFT, HOP, MELS = 22050, 1024, 256, 80
BATCH, SEGMENT, EVAL_CLIPS, EVAL_FRAMES = (32, 8192, 4, 862) if not SMALL else (2, 2048, 1, 32)
UP_CH = 512 if not SMALL else 64


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def mel_filterbank(n_mels, n_fft, sr, fmin=0.0, fmax=8000.0):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, centre, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None] - lower) / (centre - lower)
    down = (upper - bins[None]) / (upper - centre)
    fb = torch.clamp(torch.minimum(up, down), min=0.0)
    return fb * (2.0 / (upper - lower))  # Slaney area normalisation


FB = mel_filterbank(MELS, N_FFT, SR).to(device)
WINDOW = torch.hann_window(N_FFT, device=device)


def mel_spectrogram(wave):
    pad = (N_FFT - HOP) // 2
    wave = F.pad(wave.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(wave, N_FFT, hop_length=HOP, window=WINDOW, center=False, return_complex=True)
    mag = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)
    return torch.log(torch.clamp(FB @ mag, min=1e-5))


def get_padding(k, d=1):
    return (k * d - d) // 2


class ResBlock(nn.Module):
    def __init__(self, ch, k, dilations=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList(
            weight_norm(nn.Conv1d(ch, ch, k, dilation=d, padding=get_padding(k, d))) for d in dilations
        )
        self.convs2 = nn.ModuleList(
            weight_norm(nn.Conv1d(ch, ch, k, padding=get_padding(k))) for _ in dilations
        )

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2, strict=True):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, 0.1)), 0.1))
            x = xt + x
        return x


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_pre = weight_norm(nn.Conv1d(MELS, UP_CH, 7, padding=3))
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        ch = UP_CH
        for u, k in zip((8, 8, 2, 2), (16, 16, 4, 4), strict=True):
            self.ups.append(weight_norm(nn.ConvTranspose1d(ch, ch // 2, k, u, padding=(k - u) // 2)))
            ch //= 2
            self.resblocks.append(nn.ModuleList(ResBlock(ch, k) for k in (3, 7, 11)))
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, padding=3))

    def forward(self, mel):
        x = self.conv_pre(mel)
        for up, blocks in zip(self.ups, self.resblocks, strict=True):
            x = up(F.leaky_relu(x, 0.1))
            xs = None
            for b in blocks:
                xs = b(x) if xs is None else xs + b(x)
            x = xs / len(blocks)
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


class PeriodDisc(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        chans = (1, 32, 128, 512, 1024)
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv2d(chans[i], chans[i + 1], (5, 1), (3, 1), padding=(2, 0))) for i in range(4)
        )
        self.convs.append(weight_norm(nn.Conv2d(1024, 1024, (5, 1), 1, padding=(2, 0))))
        self.post = weight_norm(nn.Conv2d(1024, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        feats = []
        b, c, t = x.shape
        if t % self.period:
            n_pad = self.period - t % self.period
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            feats.append(x)
        x = self.post(x)
        feats.append(x)
        return torch.flatten(x, 1, -1), feats


class ScaleDisc(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.convs = nn.ModuleList(
            [
                norm(nn.Conv1d(1, 128, 15, 1, padding=7)),
                norm(nn.Conv1d(128, 128, 41, 2, groups=4, padding=20)),
                norm(nn.Conv1d(128, 256, 41, 2, groups=16, padding=20)),
                norm(nn.Conv1d(256, 512, 41, 4, groups=16, padding=20)),
                norm(nn.Conv1d(512, 1024, 41, 4, groups=16, padding=20)),
                norm(nn.Conv1d(1024, 1024, 41, 1, groups=16, padding=20)),
                norm(nn.Conv1d(1024, 1024, 5, 1, padding=2)),
            ]
        )
        self.post = norm(nn.Conv1d(1024, 1, 3, 1, padding=1))

    def forward(self, x):
        feats = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            feats.append(x)
        x = self.post(x)
        feats.append(x)
        return torch.flatten(x, 1, -1), feats


class Discriminators(nn.Module):
    def __init__(self):
        super().__init__()
        self.mpd = nn.ModuleList(PeriodDisc(p) for p in (2, 3, 5, 7, 11))
        self.msd = nn.ModuleList([ScaleDisc(spectral_norm), ScaleDisc(weight_norm), ScaleDisc(weight_norm)])
        self.pools = nn.ModuleList([nn.AvgPool1d(4, 2, padding=2), nn.AvgPool1d(4, 2, padding=2)])

    def forward(self, y):
        outs, feats = [], []
        for d in self.mpd:
            o, f = d(y)
            outs.append(o)
            feats.append(f)
        for i, d in enumerate(self.msd):
            if i > 0:
                y = self.pools[i - 1](y)
            o, f = d(y)
            outs.append(o)
            feats.append(f)
        return outs, feats


def disc_loss(real_outs, fake_outs):
    loss = 0
    for dr, dg in zip(real_outs, fake_outs, strict=True):
        loss = loss + torch.mean((1 - dr) ** 2) + torch.mean(dg**2)
    return loss


def gen_loss(fake_outs):
    return sum(torch.mean((1 - dg) ** 2) for dg in fake_outs)


def feature_loss(real_feats, fake_feats):
    loss = 0
    for fr, fg in zip(real_feats, fake_feats, strict=True):
        for r, g in zip(fr, fg, strict=True):
            loss = loss + torch.mean(torch.abs(r - g))
    return loss * 2


gen = Generator().to(device)
disc = Discriminators().to(device)
print(
    f"generator {sum(p.numel() for p in gen.parameters())} "
    f"discriminators {sum(p.numel() for p in disc.parameters())}"
)
opt_g = torch.optim.AdamW(gen.parameters(), lr=2e-4, betas=(0.8, 0.99))
opt_d = torch.optim.AdamW(disc.parameters(), lr=2e-4, betas=(0.8, 0.99))
report("models")


def train_step(amp_dtype, set_to_none):
    wave = torch.rand(BATCH, SEGMENT, device=device) * 1.8 - 0.9
    with torch.no_grad():
        mel = mel_spectrogram(wave)
    y = wave.unsqueeze(1)
    with torch.autocast("cuda", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        y_hat = gen(mel)
        real_outs, _ = disc(y)
        fake_outs, _ = disc(y_hat.detach())
        loss_d = disc_loss(real_outs, fake_outs)
    opt_d.zero_grad(set_to_none=set_to_none)
    loss_d.backward()
    opt_d.step()
    del real_outs, fake_outs
    mel_hat = mel_spectrogram(y_hat.squeeze(1).float())
    loss_mel = F.l1_loss(mel_hat, mel) * 45
    with torch.autocast("cuda", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
        _, real_feats = disc(y)
        fake_outs, fake_feats = disc(y_hat)
        loss_g = gen_loss(fake_outs) + feature_loss(real_feats, fake_feats)
    loss_g = loss_g + loss_mel
    opt_g.zero_grad(set_to_none=set_to_none)
    loss_g.backward()
    opt_g.step()
    return loss_d.item(), loss_g.item(), loss_mel.item()


# phase 1: fp32 GAN training
gen.train()
disc.train()
for step in range(3):
    ld, lg, lm = train_step(None, True)
    print(f"fp32 step {step} loss_d {ld:.3f} loss_g {lg:.3f} mel {lm:.3f}")
print(f"after fp32 training: max allocated {torch.cuda.max_memory_allocated() if device == 'cuda' else 0}")
report("fp32 gan training")

# phase 2: inference of 10-s clips
gen.eval()
with torch.inference_mode():
    mel = torch.randn(EVAL_CLIPS, MELS, EVAL_FRAMES, device=device) - 5.0
    audio = gen(mel).squeeze(1)
    print(f"generated {tuple(audio.shape)} rms {audio.pow(2).mean().sqrt().item():.4f}")
del mel, audio
report("inference_mode 10 s")

# phase 3: bf16 autocast, set_to_none=False, ExponentialLR
gen.train()
sched_g = torch.optim.lr_scheduler.ExponentialLR(opt_g, gamma=0.999)
sched_d = torch.optim.lr_scheduler.ExponentialLR(opt_d, gamma=0.999)
for step in range(3):
    ld, lg, lm = train_step(torch.bfloat16, False)
    sched_g.step()
    sched_d.step()
    print(f"bf16 step {step} loss_d {ld:.3f} loss_g {lg:.3f} mel {lm:.3f}")
report("bf16 autocast set_to_none False")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
