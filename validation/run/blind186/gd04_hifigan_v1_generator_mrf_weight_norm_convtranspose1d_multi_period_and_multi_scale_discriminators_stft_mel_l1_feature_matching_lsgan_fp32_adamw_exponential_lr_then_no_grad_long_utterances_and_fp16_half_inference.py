"""HiFi-GAN V1 (Kong et al. 2020) written by hand after the jik876/hifi-gan repository: the generator
takes 80-band log-mel spectrograms through a Conv1d(80, 512, 7), four ConvTranspose1d upsamplers
(rates 8, 8, 2, 2, kernels 16, 16, 4, 4; 512 -> 256 -> 128 -> 64 -> 32 channels), each followed by a
multi-receptive-field fusion of three ResBlock1 (kernels 3, 7, 11; dilations 1, 3, 5; leaky ReLU 0.1),
averaged, then Conv1d(32, 1, 7) + tanh; every conv under torch.nn.utils.parametrizations.weight_norm.
The discriminators: the multi-period discriminator (periods 2, 3, 5, 7, 11; the waveform reflect-padded
and folded to (T / p, p), five Conv2d (5, 1) strided by 3 to 1,024 channels and a (3, 1) output conv,
weight norm) and the multi-scale discriminator (three Conv1d stacks with grouped convs up to 1,024
channels on the raw, 2x and 4x AvgPool1d-pooled waveform; spectral norm on the first, weight norm on the
others). Losses: LSGAN for both, feature matching (L1 over every discriminator layer, x 2) and the L1
mel loss (x 45), the mel spectrogram from torch.stft (n_fft 1,024, hop 256, Hann window, reflect
padding as the repository pads), the magnitude projected by a triangular 80 x 513 mel filterbank built
by hand on the device, log of clamp(1e-5).

Training: fp32, AdamW (lr 2e-4, betas (0.8, 0.99)) for the generator and both discriminators together,
ExponentialLR (gamma 0.999) stepped per step, batch 16 segments of 8,192 samples at 22,050 Hz.
Phases: the first step (the discriminator step then the generator step); 3 more; a no_grad validation
synthesizing 4 full utterances of 800 mel frames (204,800 samples) with their mel L1; then the weight
norms removed (parametrize.remove_parametrizations, leave_parametrized=True) and the generator cast by
.half() for fp16 inference under torch.inference_mode on 8 utterances of 1,200 frames. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18604)
if SMALL:
    B, SEG, STEPS, VAL_N, VAL_FRAMES, HALF_B, HALF_FRAMES, UP_CH = 2, 2048, 1, 1, 16, 2, 24, 64
else:
    B, SEG, STEPS, VAL_N, VAL_FRAMES, HALF_B, HALF_FRAMES, UP_CH = 16, 8192, 3, 4, 800, 8, 1200, 512
SR, N_FFT, HOP, WIN, N_MELS, FMIN, FMAX = 22050, 1024, 256, 1024, 80, 0.0, 8000.0
LRELU = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


def init_weights(m):
    if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
        m.weight.data.normal_(0.0, 0.01)


def get_padding(k, d=1):
    return (k * d - d) // 2


class ResBlock1(nn.Module):
    def __init__(self, ch, k, dilations=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList(
            [weight_norm(nn.Conv1d(ch, ch, k, 1, dilation=d, padding=get_padding(k, d))) for d in dilations]
        )
        self.convs2 = nn.ModuleList(
            [weight_norm(nn.Conv1d(ch, ch, k, 1, padding=get_padding(k))) for _ in dilations]
        )
        self.convs1.apply(init_weights)
        self.convs2.apply(init_weights)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2, strict=True):
            xt = c1(F.leaky_relu(x, LRELU))
            xt = c2(F.leaky_relu(xt, LRELU))
            x = xt + x
        return x


class Generator(nn.Module):
    def __init__(self, rates=(8, 8, 2, 2), kernels=(16, 16, 4, 4), rb_kernels=(3, 7, 11), ch=512):
        super().__init__()
        self.num_kernels = len(rb_kernels)
        self.conv_pre = weight_norm(nn.Conv1d(N_MELS, ch, 7, 1, padding=3))
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (u, k) in enumerate(zip(rates, kernels, strict=True)):
            cin, cout = ch // (2**i), ch // (2 ** (i + 1))
            self.ups.append(weight_norm(nn.ConvTranspose1d(cin, cout, k, u, padding=(k - u) // 2)))
            for rk in rb_kernels:
                self.resblocks.append(ResBlock1(cout, rk))
        self.conv_post = weight_norm(nn.Conv1d(cout, 1, 7, 1, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)

    def forward(self, x):
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU))
            xs = None
            for j in range(self.num_kernels):
                r = self.resblocks[i * self.num_kernels + j](x)
                xs = r if xs is None else xs + r
            x = xs / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))
        return torch.tanh(x)


class DiscriminatorP(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        chans = [1, 32, 128, 512, 1024, 1024]
        self.convs = nn.ModuleList(
            [
                weight_norm(nn.Conv2d(chans[i], chans[i + 1], (5, 1), (3 if i < 4 else 1, 1), padding=(2, 0)))
                for i in range(5)
            ]
        )
        self.conv_post = weight_norm(nn.Conv2d(1024, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        fmap = []
        b, c, t = x.shape
        if t % self.period != 0:
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for layer in self.convs:
            x = F.leaky_relu(layer(x), LRELU)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class DiscriminatorS(nn.Module):
    def __init__(self, use_spectral_norm=False):
        super().__init__()
        norm = spectral_norm if use_spectral_norm else weight_norm
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
        self.conv_post = norm(nn.Conv1d(1024, 1, 3, 1, padding=1))

    def forward(self, x):
        fmap = []
        for layer in self.convs:
            x = F.leaky_relu(layer(x), LRELU)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorP(p) for p in (2, 3, 5, 7, 11)])

    def forward(self, y, y_hat):
        outs = [], [], [], []
        for d in self.discriminators:
            r, fr = d(y)
            g, fg = d(y_hat)
            for lst, v in zip(outs, (r, g, fr, fg), strict=True):
                lst.append(v)
        return outs


class MultiScaleDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList(
            [DiscriminatorS(use_spectral_norm=True), DiscriminatorS(), DiscriminatorS()]
        )
        self.meanpools = nn.ModuleList([nn.AvgPool1d(4, 2, padding=2), nn.AvgPool1d(4, 2, padding=2)])

    def forward(self, y, y_hat):
        outs = [], [], [], []
        for i, d in enumerate(self.discriminators):
            if i != 0:
                y = self.meanpools[i - 1](y)
                y_hat = self.meanpools[i - 1](y_hat)
            r, fr = d(y)
            g, fg = d(y_hat)
            for lst, v in zip(outs, (r, g, fr, fg), strict=True):
                lst.append(v)
        return outs


def hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_filterbank():
    mels = torch.linspace(hz_to_mel(FMIN), hz_to_mel(FMAX), N_MELS + 2, device=device)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    freqs = torch.linspace(0, SR / 2, N_FFT // 2 + 1, device=device)
    lower = (freqs[None] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - freqs[None]) / (hz[2:, None] - hz[1:-1, None])
    return torch.clamp(torch.minimum(lower, upper), min=0.0)


MEL_BASIS = mel_filterbank()
HANN = torch.hann_window(WIN, device=device)


def mel_spectrogram(y):
    y = F.pad(y.unsqueeze(1), ((N_FFT - HOP) // 2, (N_FFT - HOP) // 2), mode="reflect").squeeze(1)
    spec = torch.stft(
        y, N_FFT, hop_length=HOP, win_length=WIN, window=HANN, center=False, return_complex=True
    )
    mag = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)
    return torch.log(torch.clamp(MEL_BASIS @ mag, min=1e-5))


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g, strict=True):
        for rl, gl in zip(dr, dg, strict=True):
            loss = loss + torch.mean(torch.abs(rl - gl))
    return loss * 2


def discriminator_loss(real, fake):
    loss = 0
    for dr, dg in zip(real, fake, strict=True):
        loss = loss + torch.mean((1 - dr) ** 2) + torch.mean(dg**2)
    return loss


def generator_loss(fake):
    return sum(torch.mean((1 - dg) ** 2) for dg in fake)


generator = Generator(ch=UP_CH).to(device)
mpd = MultiPeriodDiscriminator().to(device)
msd = MultiScaleDiscriminator().to(device)
print(
    f"G {sum(p.numel() for p in generator.parameters()) / 1e6:.2f}M"
    f" MPD {sum(p.numel() for p in mpd.parameters()) / 1e6:.2f}M"
    f" MSD {sum(p.numel() for p in msd.parameters()) / 1e6:.2f}M"
)
optim_g = torch.optim.AdamW(generator.parameters(), 2e-4, betas=(0.8, 0.99))
optim_d = torch.optim.AdamW(list(msd.parameters()) + list(mpd.parameters()), 2e-4, betas=(0.8, 0.99))
sched_g = torch.optim.lr_scheduler.ExponentialLR(optim_g, gamma=0.999)
sched_d = torch.optim.lr_scheduler.ExponentialLR(optim_d, gamma=0.999)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

generator.train()
mpd.train()
msd.train()
for step in range(STEPS + 1):
    y = torch.randn(B, SEG, device=device).clamp(-1, 1) * 0.5
    y_mel = mel_spectrogram(y)
    y = y.unsqueeze(1)
    y_g_hat = generator(y_mel)
    y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1))

    optim_d.zero_grad()
    y_df_r, y_df_g, _, _ = mpd(y, y_g_hat.detach())
    loss_disc_f = discriminator_loss(y_df_r, y_df_g)
    y_ds_r, y_ds_g, _, _ = msd(y, y_g_hat.detach())
    loss_disc_s = discriminator_loss(y_ds_r, y_ds_g)
    loss_disc_all = loss_disc_s + loss_disc_f
    loss_disc_all.backward()
    optim_d.step()

    optim_g.zero_grad()
    loss_mel = F.l1_loss(y_mel, y_g_hat_mel) * 45
    y_df_r, y_df_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
    y_ds_r, y_ds_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
    loss_fm = feature_loss(fmap_f_r, fmap_f_g) + feature_loss(fmap_s_r, fmap_s_g)
    loss_gen = generator_loss(y_df_g) + generator_loss(y_ds_g)
    loss_gen_all = loss_gen + loss_fm + loss_mel
    loss_gen_all.backward()
    optim_g.step()
    sched_g.step()
    sched_d.step()
    print(
        f"step {step} disc {loss_disc_all.item():.3f} gen {loss_gen_all.item():.3f} mel {loss_mel.item():.3f}"
    )
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del y, y_mel, y_g_hat, y_g_hat_mel, y_df_r, y_df_g, y_ds_r, y_ds_g, fmap_f_r, fmap_f_g, fmap_s_r, fmap_s_g
del loss_disc_all, loss_gen_all, loss_mel, loss_fm, loss_gen, loss_disc_f, loss_disc_s
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

generator.eval()
val_err = 0.0
with torch.no_grad():
    for _ in range(VAL_N):
        wav = torch.randn(1, VAL_FRAMES * HOP, device=device).clamp(-1, 1) * 0.5
        mel = mel_spectrogram(wav)
        y_hat = generator(mel)
        val_err += F.l1_loss(mel, mel_spectrogram(y_hat.squeeze(1))).item()
print(f"val mel error {val_err / VAL_N:.4f} samples {y_hat.shape[-1]}")
del wav, mel, y_hat
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del mpd, msd, optim_d, optim_g
for module in generator.modules():
    if parametrize.is_parametrized(module):
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
generator = generator.half()
with torch.inference_mode():
    mel = torch.randn(HALF_B, N_MELS, HALF_FRAMES, device=device, dtype=torch.float16) - 4.0
    audio = generator(mel).squeeze(1)
    audio_int16 = (audio.float() * 32767.0).to(torch.int16).cpu()
print(f"half inference audio {tuple(audio_int16.shape)}")
if device == "cuda":
    print(
        f"half allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
