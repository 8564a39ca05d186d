"""A Vocos-like vocoder by hand on random 24 kHz waveforms, under expandable segments.

PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set at the top.
Generator: 100-band log-mel (torch.stft n_fft 1024, hop 256, centred, Hann; an HTK mel filterbank
by hand) -> Conv1d 512 (k 7) and LayerNorm -> 8 ConvNeXt blocks (depthwise Conv1d k 7, LayerNorm,
Linear 512 -> 1536, GELU, Linear 1536 -> 512, layer scale, residual) -> LayerNorm -> the iSTFT head:
Linear 512 -> 1026, magnitude exp(.) clamped at 100 and phase, a complex spectrum by torch.polar,
torch.istft (n_fft 1024, hop 256, Hann) back to the waveform.
Discriminators: multi-period (periods 2, 3, 5, 7, 11, Conv2d (5, 1) stride (3, 1) to 512 channels) and
multi-resolution (magnitude spectrograms at n_fft 512, 1024, 2048: Conv2d (3, 9) of 32 channels).
Losses: hinge, feature matching x 2, mel L1 x 45.
Phase 1: batch 32 x 16,384 samples, bf16 autocast for the networks (the mel, stft and istft in fp32
outside it), fused AdamW for both, 3 steps.
Phase 2: no_grad vocoding of 16 mel spectrograms of 30 s (2,813 frames) in fp32.
Phase 3: the discriminators and their optimizer dropped, empty_cache(); the generator fine-tuned on the
mel loss alone in fp32 with each ConvNeXt block under torch.utils.checkpoint (non-reentrant), SGD with
Nesterov momentum, 2 micro-batches of 32 accumulated per step, 3 steps. 3 phases after the models'."""

import math
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21504)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
SR, N_FFT, HOP, MELS = 24000, 1024, 256, 100
DIM, INTER, LAYERS = (512, 1536, 8) if not SMALL else (64, 128, 2)
BATCH, SEGMENT, EVAL_CLIPS, EVAL_FRAMES, MICRO = (
    (32, 16384, 16, 2813, 32) if not SMALL else (2, 4096, 1, 40, 2)
)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def mel_filterbank(n_mels, n_fft, sr):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, centre, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None] - lower) / (centre - lower)
    down = (upper - bins[None]) / (upper - centre)
    return torch.clamp(torch.minimum(up, down), min=0.0)


FB = mel_filterbank(MELS, N_FFT, SR).to(device)
WINDOW = torch.hann_window(N_FFT, device=device)


def log_mel(wave):
    spec = torch.stft(wave, N_FFT, HOP, window=WINDOW, center=True, return_complex=True).abs()
    return torch.log(torch.clamp(FB @ spec, min=1e-5))


class ConvNeXtBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.dwconv = nn.Conv1d(DIM, DIM, 7, padding=3, groups=DIM)
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.pw1 = nn.Linear(DIM, INTER)
        self.pw2 = nn.Linear(INTER, DIM)
        self.gamma = nn.Parameter(torch.full((DIM,), 1.0 / LAYERS))

    def forward(self, x):
        y = self.dwconv(x).transpose(1, 2)
        y = self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).transpose(1, 2)


class Vocos(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Conv1d(MELS, DIM, 7, padding=3)
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.blocks = nn.ModuleList(ConvNeXtBlock() for _ in range(LAYERS))
        self.final = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, N_FFT + 2)

    def features(self, mel, ckpt=False):
        x = self.norm(self.embed(mel).transpose(1, 2)).transpose(1, 2)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if ckpt else block(x)
        return self.head(self.final(x.transpose(1, 2))).transpose(1, 2)

    def synthesize(self, h):
        mag, phase = h.float().chunk(2, dim=1)
        mag = torch.exp(mag).clamp(max=1e2)
        spec = torch.polar(mag, phase)
        return torch.istft(spec, N_FFT, HOP, window=WINDOW, center=True)


class PeriodDisc(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        chans = (1, 32, 128, 512, 512)
        self.convs = nn.ModuleList(
            nn.Conv2d(chans[i], chans[i + 1], (5, 1), (3, 1), padding=(2, 0)) for i in range(4)
        )
        self.convs.append(nn.Conv2d(512, 512, (5, 1), 1, padding=(2, 0)))
        self.post = nn.Conv2d(512, 1, (3, 1), padding=(1, 0))

    def forward(self, y):
        b, t = y.shape
        if t % self.period:
            y = F.pad(y, (0, self.period - t % self.period), "reflect")
        x = y.view(b, 1, -1, self.period)
        feats = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            feats.append(x)
        return self.post(x), feats


class ResolutionDisc(nn.Module):
    def __init__(self, n_fft):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        self.convs = nn.ModuleList(
            [
                nn.Conv2d(1, 32, (3, 9), padding=(1, 4)),
                nn.Conv2d(32, 32, (3, 9), (1, 2), padding=(1, 4)),
                nn.Conv2d(32, 32, (3, 9), (1, 2), padding=(1, 4)),
                nn.Conv2d(32, 32, (3, 9), (1, 2), padding=(1, 4)),
                nn.Conv2d(32, 32, (3, 3), padding=(1, 1)),
            ]
        )
        self.post = nn.Conv2d(32, 1, (3, 3), padding=(1, 1))

    def forward(self, y):
        with torch.autocast("cuda", enabled=False):
            x = torch.stft(
                y.float(), self.n_fft, self.n_fft // 4, window=self.window, return_complex=True
            ).abs()
        x = x.unsqueeze(1).transpose(2, 3)  # (B, 1, frames, freq)
        feats = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            feats.append(x)
        return self.post(x), feats


class Discriminators(nn.Module):
    def __init__(self):
        super().__init__()
        self.discs = nn.ModuleList(
            [*(PeriodDisc(p) for p in (2, 3, 5, 7, 11)), *(ResolutionDisc(n) for n in (512, 1024, 2048))]
        )

    def forward(self, y):
        return [d(y) for d in self.discs]


gen = Vocos().to(device)
disc = Discriminators().to(device)
print(
    f"vocos {sum(p.numel() for p in gen.parameters())} "
    f"discriminators {sum(p.numel() for p in disc.parameters())}"
)
fused = device == "cuda"
opt_g = torch.optim.AdamW(gen.parameters(), lr=5e-4, betas=(0.8, 0.9), fused=fused)
opt_d = torch.optim.AdamW(disc.parameters(), lr=5e-4, betas=(0.8, 0.9), fused=fused)
report("models")


def generate(mel, ckpt=False, autocast=False):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and amp):
        h = gen.features(mel, ckpt)
    return gen.synthesize(h)


# phase 1: GAN training, bf16 autocast, fused AdamW
gen.train()
disc.train()
for step in range(3):
    y = torch.rand(BATCH, SEGMENT, device=device) * 1.6 - 0.8
    with torch.no_grad():
        mel = log_mel(y)
    y_hat = generate(mel, autocast=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        real = disc(y)
        fake = disc(y_hat.detach())
        loss_d = sum(
            F.relu(1 - r).mean() + F.relu(1 + f).mean() for (r, _), (f, _) in zip(real, fake, strict=True)
        )
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    del real, fake
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        real = disc(y)
        fake = disc(y_hat)
        adv = sum(F.relu(1 - f).mean() for f, _ in fake)
        fm = sum(
            torch.mean(torch.abs(a.detach() - b))
            for (_, fr), (_, ff) in zip(real, fake, strict=True)
            for a, b in zip(fr, ff, strict=True)
        )
    loss_mel = F.l1_loss(log_mel(y_hat), mel)
    loss_g = adv + 2 * fm + 45 * loss_mel
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    print(f"gan step {step} loss_d {loss_d.item():.3f} loss_g {loss_g.item():.3f} mel {loss_mel.item():.3f}")
    del real, fake, y_hat, loss_g, loss_d, adv, fm
report("gan bf16 autocast fused adamw expandable")

# phase 2: vocoding 30-s mels
gen.eval()
with torch.no_grad():
    mel = torch.randn(EVAL_CLIPS, MELS, EVAL_FRAMES, device=device) - 4.0
    audio = generate(mel)
    print(f"vocoded {tuple(audio.shape)} peak {audio.abs().max().item():.3f}")
del mel, audio
report("no_grad vocoding 30 s")

# phase 3: generator-only fine-tuning, fp32, checkpointed blocks, SGD nesterov, accumulation
del disc, opt_d
if device == "cuda":
    torch.cuda.empty_cache()
gen.train()
opt_g = torch.optim.SGD(gen.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
for step in range(3):
    for _ in range(2):
        y = torch.rand(MICRO, SEGMENT, device=device) * 1.6 - 0.8
        with torch.no_grad():
            mel = log_mel(y)
        loss = F.l1_loss(log_mel(generate(mel, ckpt=True)), mel) / 2
        loss.backward()
    opt_g.step()
    opt_g.zero_grad(set_to_none=True)
    print(f"mel-only step {step} loss {loss.item():.4f}")
report("fp32 checkpointed sgd nesterov accumulation")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
