"""A HiFi-GAN V1 vocoder step as jik876/hifi-gan (models.py, meldataset.py, train.py) writes it, with
the current torch.nn.utils.parametrizations.weight_norm / spectral_norm: the generator (Conv1d 80 ->
512 of kernel 7, four ConvTranspose1d upsamplings by 8, 8, 2, 2 of kernels 16, 16, 4, 4 halving the
channels, each followed by the multi-receptive-field fusion of three ResBlock1s of kernels 3, 7, 11
with dilations 1, 3, 5, LeakyReLU 0.1, a Conv1d to 1 channel and tanh), the multi-period
discriminator (periods 2, 3, 5, 7, 11: the waveform reflect-padded to a multiple of the period and
viewed as 2-D, five (5, 1) Conv2d of stride (3, 1) to 1,024 channels and a (3, 1) output conv) and
the multi-scale discriminator (three Conv1d stacks with grouped convolutions, the first with
spectral_norm, two AvgPool1d(4, 2, padding=2) between scales). mel_spectrogram on the GPU as
meldataset.py: reflect padding of (n_fft - hop) / 2, torch.stft (n_fft 1,024, hop 256, win 1,024,
hann, center=False), magnitude sqrt(re^2 + im^2 + 1e-9), an 80-band mel filterbank built in torch by
matmul, log(clamp(x, 1e-5)). fp32, AdamW (lr 2e-4, betas 0.8/0.99) for both, ExponentialLR 0.999
each; batches of 16 segments of 8,192 samples (the mels from the segments); each step the
discriminators' LSGAN loss on detached fakes, then the generator's adversarial, feature-matching
and 45 x mel L1 losses; 3 steps (the first its own phase); then validation on 4 utterances of
5 s (full mels) under no_grad; then weight norm removed from the generator
(parametrize.remove_parametrizations) and 8 utterances of 10 s synthesised under inference_mode;
4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16805)
if SMALL:
    B, SEG, CH, VAL_N, VAL_SEC, SYN_N, SYN_SEC, STEPS = 2, 2048, 32, 2, 0.5, 2, 0.5, 2
else:
    B, SEG, CH, VAL_N, VAL_SEC, SYN_N, SYN_SEC, STEPS = 16, 8192, 512, 4, 5.0, 8, 10.0, 3
SR, N_FFT, HOP, WIN, N_MELS, FMAX = 22050, 1024, 256, 1024, 80, 8000.0
LRELU = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


def init_weights(m, mean=0.0, std=0.01):
    if "Conv" in m.__class__.__name__:
        m.weight.data.normal_(mean, std)


def get_padding(k, d=1):
    return int((k * d - d) / 2)


class ResBlock1(nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList(
            weight_norm(
                nn.Conv1d(channels, channels, kernel_size, 1, dilation=d, padding=get_padding(kernel_size, d))
            )
            for d in dilation
        )
        self.convs2 = nn.ModuleList(
            weight_norm(
                nn.Conv1d(channels, channels, kernel_size, 1, dilation=1, padding=get_padding(kernel_size, 1))
            )
            for _ in dilation
        )
        self.convs1.apply(init_weights)
        self.convs2.apply(init_weights)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2, strict=True):
            xt = F.leaky_relu(x, LRELU)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU)
            xt = c2(xt)
            x = xt + x
        return x


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        rates, kernels = (8, 8, 2, 2), (16, 16, 4, 4)
        rb_kernels, rb_dilations = (3, 7, 11), ((1, 3, 5),) * 3
        self.num_kernels = len(rb_kernels)
        self.conv_pre = weight_norm(nn.Conv1d(N_MELS, CH, 7, 1, padding=3))
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(rates, kernels, strict=True)):
            self.ups.append(
                weight_norm(
                    nn.ConvTranspose1d(CH // (2**i), CH // (2 ** (i + 1)), k, u, padding=(k - u) // 2)
                )
            )
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = CH // (2 ** (i + 1))
            for k, d in zip(rb_kernels, rb_dilations, strict=True):
                self.resblocks.append(ResBlock1(ch, k, d))
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, 1, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)

    def forward(self, x):
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = F.leaky_relu(x, LRELU)
            x = up(x)
            xs = None
            for j in range(self.num_kernels):
                r = self.resblocks[i * self.num_kernels + j](x)
                xs = r if xs is None else xs + r
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.conv_post(x)
        return torch.tanh(x)


class DiscriminatorP(nn.Module):
    def __init__(self, period, kernel_size=5, stride=3):
        super().__init__()
        self.period = period
        chans = (1, 32, 128, 512, 1024, 1024)
        self.convs = nn.ModuleList(
            weight_norm(
                nn.Conv2d(
                    chans[i],
                    chans[i + 1],
                    (kernel_size, 1),
                    (stride if i < 4 else 1, 1),
                    padding=(get_padding(5, 1), 0),
                )
            )
            for i in range(5)
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
        norm_f = spectral_norm if use_spectral_norm else weight_norm
        self.convs = nn.ModuleList(
            [
                norm_f(nn.Conv1d(1, 128, 15, 1, padding=7)),
                norm_f(nn.Conv1d(128, 128, 41, 2, groups=4, padding=20)),
                norm_f(nn.Conv1d(128, 256, 41, 2, groups=16, padding=20)),
                norm_f(nn.Conv1d(256, 512, 41, 4, groups=16, padding=20)),
                norm_f(nn.Conv1d(512, 1024, 41, 4, groups=16, padding=20)),
                norm_f(nn.Conv1d(1024, 1024, 41, 1, groups=16, padding=20)),
                norm_f(nn.Conv1d(1024, 1024, 5, 1, padding=2)),
            ]
        )
        self.conv_post = norm_f(nn.Conv1d(1024, 1, 3, 1, padding=1))

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
        self.discriminators = nn.ModuleList(DiscriminatorP(p) for p in (2, 3, 5, 7, 11))

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class MultiScaleDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList(
            [DiscriminatorS(use_spectral_norm=True), DiscriminatorS(), DiscriminatorS()]
        )
        self.meanpools = nn.ModuleList([nn.AvgPool1d(4, 2, padding=2), nn.AvgPool1d(4, 2, padding=2)])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for i, d in enumerate(self.discriminators):
            if i != 0:
                y = self.meanpools[i - 1](y)
                y_hat = self.meanpools[i - 1](y_hat)
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g, strict=True):
        for rl, gl in zip(dr, dg, strict=True):
            loss += torch.mean(torch.abs(rl - gl))
    return loss * 2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs, strict=True):
        loss += torch.mean((1 - dr) ** 2) + torch.mean(dg**2)
    return loss


def generator_loss(disc_outputs):
    loss = 0
    for dg in disc_outputs:
        loss += torch.mean((1 - dg) ** 2)
    return loss


def mel_basis(sr=SR, n_fft=N_FFT, n_mels=N_MELS, fmin=0.0, fmax=FMAX):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (bins[None, :] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - bins[None, :]) / (hz[2:, None] - hz[1:-1, None])
    enorm = 2.0 / (hz[2:] - hz[:-2])
    return torch.clamp(torch.minimum(lower, upper), min=0.0) * enorm[:, None]


MEL_BASIS = mel_basis().to(device)
HANN = torch.hann_window(WIN).to(device)


def mel_spectrogram(y):
    y = F.pad(y.unsqueeze(1), (int((N_FFT - HOP) / 2), int((N_FFT - HOP) / 2)), mode="reflect").squeeze(1)
    spec = torch.stft(
        y,
        N_FFT,
        hop_length=HOP,
        win_length=WIN,
        window=HANN,
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    spec = torch.view_as_real(spec)
    spec = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
    spec = torch.matmul(MEL_BASIS, spec)
    return torch.log(torch.clamp(spec, min=1e-5))


generator = Generator().to(device)
mpd = MultiPeriodDiscriminator().to(device)
msd = MultiScaleDiscriminator().to(device)
optim_g = torch.optim.AdamW(generator.parameters(), 2e-4, betas=(0.8, 0.99))
optim_d = torch.optim.AdamW(list(msd.parameters()) + list(mpd.parameters()), 2e-4, betas=(0.8, 0.99))
scheduler_g = torch.optim.lr_scheduler.ExponentialLR(optim_g, gamma=0.999)
scheduler_d = torch.optim.lr_scheduler.ExponentialLR(optim_d, gamma=0.999)
gen = torch.Generator().manual_seed(16805)
print(f"generator {sum(p.numel() for p in generator.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def audio(n, samples):
    t = torch.arange(samples) / SR
    f0 = 100 + 300 * torch.rand(n, 1, generator=gen)
    y = 0.3 * torch.sin(2 * math.pi * f0 * t) + 0.05 * torch.randn(n, samples, generator=gen)
    return y.to(device)


generator.train()
mpd.train()
msd.train()
for step in range(STEPS):
    y = audio(B, SEG)
    x = mel_spectrogram(y)
    y = y.unsqueeze(1)
    y_g_hat = generator(x)
    y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1))

    optim_d.zero_grad()
    y_df_hat_r, y_df_hat_g, _, _ = mpd(y, y_g_hat.detach())
    loss_disc_f = discriminator_loss(y_df_hat_r, y_df_hat_g)
    y_ds_hat_r, y_ds_hat_g, _, _ = msd(y, y_g_hat.detach())
    loss_disc_s = discriminator_loss(y_ds_hat_r, y_ds_hat_g)
    loss_disc_all = loss_disc_s + loss_disc_f
    loss_disc_all.backward()
    optim_d.step()

    optim_g.zero_grad()
    loss_mel = F.l1_loss(x, y_g_hat_mel) * 45
    y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
    y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
    loss_fm_f = feature_loss(fmap_f_r, fmap_f_g)
    loss_fm_s = feature_loss(fmap_s_r, fmap_s_g)
    loss_gen_f = generator_loss(y_df_hat_g)
    loss_gen_s = generator_loss(y_ds_hat_g)
    loss_gen_all = loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f + loss_mel
    loss_gen_all.backward()
    optim_g.step()
    print(
        f"step {step} gen {loss_gen_all.item():.3f} disc {loss_disc_all.item():.3f} mel {loss_mel.item():.3f}"
    )
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
scheduler_g.step()
scheduler_d.step()
del y, x, y_g_hat, y_g_hat_mel, loss_gen_all, loss_disc_all
del fmap_f_r, fmap_f_g, fmap_s_r, fmap_s_g, y_df_hat_r, y_df_hat_g, y_ds_hat_r, y_ds_hat_g

generator.eval()
val_err = 0.0
with torch.no_grad():
    for _ in range(VAL_N):
        y = audio(1, int(VAL_SEC * SR))
        x = mel_spectrogram(y)
        y_g_hat = generator(x)
        y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1))
        val_err += F.l1_loss(x, y_g_hat_mel[..., : x.shape[-1]]).item()
print(f"val mel error {val_err / VAL_N:.4f}")
del y, x, y_g_hat, y_g_hat_mel
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for module in generator.modules():
    if parametrize.is_parametrized(module):
        parametrize.remove_parametrizations(module, "weight")
with torch.inference_mode():
    mels = mel_spectrogram(audio(SYN_N, int(SYN_SEC * SR)))
    wav = generator(mels).squeeze(1)
    wav_int16 = (wav * 32767.0).to(torch.int16)
print(f"synthesised {tuple(wav_int16.shape)}")
if device == "cuda":
    print(
        f"synth allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
