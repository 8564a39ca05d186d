"""GPU audio augmentation written from torch.fft alone (torchaudio's phase vocoder and Griffin-Lim re-derived
by hand), then a keyword-spotting CNN trained on the augmented clips and a learned complex
frequency-domain denoising filter.

Synthetic 4 s clips at 16 kHz (harmonic tones with vibrato plus noise), batch 64. STFTs use a Kaiser
window (`torch.signal.windows.kaiser`, beta 8) with n_fft 1024, hop 256, `return_complex=True`. Phases:
(1) time stretch by 1.25 and 0.8 with a phase vocoder (`torch.angle` of neighbouring frames, phase
advance, wrapping by `torch.round`, `torch.cumsum` of the phase increments, magnitudes interpolated
between frames, `torch.polar`), `torch.stft`/`torch.istft`, and a pitch shift by +3 semitones (stretch by
2^(-3/12) then `F.interpolate(mode="linear")` back to 4 s); (2) Griffin-Lim reconstruction of the
stretched clips from their magnitudes: 32 iterations with momentum 0.99 under no_grad, random initial
phases; (3) a 6-layer log-mel CNN (mel filterbank built by hand and applied with matmul, BatchNorm, GELU)
trained 12 steps with AdamW under bf16 autocast, each step augmenting its batch with a rate drawn in turn
from (0.9, 1.1, 1.25); (4) a learned complex filter (`nn.Parameter` of `torch.cfloat`, 8,001 rfft bins)
applied by `torch.fft.rfft` / `irfft` and trained 20 Adam steps against a three-resolution STFT magnitude
loss (512, 1024, 2048)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(30103)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, SR, SECONDS, N_FFT, HOP, N_MELS, CLASSES = 64, 16000, 4, 1024, 256, 80, 35
LENGTH = SR * SECONDS


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def synth_clips(batch):
    t = torch.arange(LENGTH, device=device) / SR
    f0 = 110 + 330 * torch.rand(batch, 1, device=device)
    vibrato = 1 + 0.01 * torch.sin(2 * math.pi * 5 * t)
    phase = 2 * math.pi * torch.cumsum(f0 * vibrato / SR, dim=-1)
    harmonics = torch.arange(1, 6, device=device).view(1, -1, 1)
    x = (torch.sin(harmonics * phase.unsqueeze(1)) / harmonics).sum(1)
    return x + 0.05 * torch.randn_like(x)


window = torch.signal.windows.kaiser(N_FFT, beta=8.0, sym=False, device=device)


def stft(x, n_fft=N_FFT, hop=HOP, win=None):
    win = window if win is None else win
    return torch.stft(x, n_fft, hop_length=hop, window=win, return_complex=True)


def istft(spec, length):
    return torch.istft(spec, N_FFT, hop_length=HOP, window=window, length=length)


phase_advance = torch.linspace(0, math.pi * HOP, N_FFT // 2 + 1, device=device).unsqueeze(-1)


def phase_vocoder(spec, rate):
    time_steps = torch.arange(0, spec.size(-1), rate, device=device)
    alphas = torch.remainder(time_steps, 1.0)
    phase_0 = torch.angle(spec[..., :1])
    spec = F.pad(spec, [0, 2])
    idx = time_steps.long()
    spec_0, spec_1 = spec[..., idx], spec[..., idx + 1]
    phase = torch.angle(spec_1) - torch.angle(spec_0) - phase_advance
    phase = phase - 2 * math.pi * torch.round(phase / (2 * math.pi)) + phase_advance
    phase_acc = torch.cumsum(torch.cat([phase_0, phase[..., :-1]], dim=-1), dim=-1)
    mag = alphas * spec_1.abs() + (1 - alphas) * spec_0.abs()
    return torch.polar(mag, phase_acc)


def time_stretch(x, rate):
    stretched = phase_vocoder(stft(x), rate)
    return istft(stretched, round(LENGTH / rate))


def pitch_shift(x, semitones):
    rate = 2 ** (-semitones / 12)
    y = time_stretch(x, rate)
    return F.interpolate(y.unsqueeze(1), size=LENGTH, mode="linear", align_corners=False).squeeze(1)


def griffin_lim(mag, length, iters=32, momentum=0.99):
    angles = torch.polar(torch.ones_like(mag), 2 * math.pi * torch.rand_like(mag))
    tprev = torch.zeros_like(angles)
    for _ in range(iters):
        inverse = istft(mag * angles, length)
        rebuilt = stft(inverse)
        angles = rebuilt - tprev.mul_(momentum / (1 + momentum))
        angles = angles.div(angles.abs().add(1e-16))
        tprev = rebuilt
    return istft(mag * angles, length)


def mel_filterbank(n_freqs, n_mels, sr):
    def hz_to_mel(f):
        return 2595 * math.log10(1 + f / 700)

    mels = torch.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700 * (10 ** (mels / 2595) - 1)
    freqs = torch.linspace(0, sr / 2, n_freqs)
    up = (freqs.unsqueeze(1) - hz[:-2]) / (hz[1:-1] - hz[:-2])
    down = (hz[2:] - freqs.unsqueeze(1)) / (hz[2:] - hz[1:-1])
    return torch.clamp(torch.minimum(up, down), min=0)


class KeywordCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("fb", mel_filterbank(N_FFT // 2 + 1, N_MELS, SR))
        layers, ch = [], 1
        for out in (32, 32, 64, 64, 128, 128):
            stride = 2 if out != ch else 1
            layers += [
                nn.Conv2d(ch, out, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.GELU(),
            ]
            ch = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(ch, CLASSES)

    def forward(self, wave):
        power = stft(wave).abs().pow(2).transpose(-1, -2)
        logmel = torch.log(power @ self.fb + 1e-6).unsqueeze(1)
        h = self.features(logmel)
        return self.head(h.mean((-1, -2)))


# phase 1: phase-vocoder time stretch and pitch shift
clips = synth_clips(B)
with torch.no_grad():
    fast = time_stretch(clips, 1.25)
    slow = time_stretch(clips, 0.8)
    shifted = pitch_shift(clips, 3)
print(
    f"stretched {tuple(fast.shape)} {tuple(slow.shape)} shifted rms {shifted.pow(2).mean().sqrt().item():.4f}"
)
report("phase 1 phase vocoder")

# phase 2: Griffin-Lim from magnitudes
with torch.no_grad():
    mag = stft(slow).abs()
    rebuilt = griffin_lim(mag, slow.shape[-1])
    err = (stft(rebuilt).abs() - mag).norm() / mag.norm()
print(f"griffin-lim spectral convergence {err.item():.4f}")
del fast, slow, shifted, mag, rebuilt
report("phase 2 griffin-lim")

# phase 3: keyword CNN on augmented clips
model = KeywordCNN().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
labels = torch.randint(0, CLASSES, (B,), device=device)
for _step, rate in enumerate((0.9, 1.1, 1.25) * 4):
    with torch.no_grad():
        aug = time_stretch(clips, rate)
        aug = F.pad(aug, [0, max(0, LENGTH - aug.shape[-1])])[..., :LENGTH]
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(aug), labels)
    loss.backward()
    opt.step()
print(f"cnn loss {loss.item():.4f}")
report("phase 3 keyword cnn")

# phase 4: learned complex rfft-domain filter with a multi-resolution STFT loss
del model, opt
noisy = clips + 0.2 * torch.randn_like(clips)
response = nn.Parameter(torch.ones(LENGTH // 2 + 1, dtype=torch.cfloat, device=device))
opt = torch.optim.Adam([response], lr=1e-2)
resolutions = [(n, n // 4, torch.hann_window(n, device=device)) for n in (512, 1024, 2048)]
for _step in range(20):
    opt.zero_grad(set_to_none=True)
    filtered = torch.fft.irfft(torch.fft.rfft(noisy) * response, n=LENGTH)
    loss = 0.0
    for n_fft, hop, win in resolutions:
        s_hat = stft(filtered, n_fft, hop, win).abs()
        s_ref = stft(clips, n_fft, hop, win).abs()
        loss = (
            loss
            + (s_hat - s_ref).norm() / s_ref.norm()
            + F.l1_loss(torch.log(s_hat + 1e-7), torch.log(s_ref + 1e-7))
        )
    loss.backward()
    opt.step()
print(f"filter loss {loss.item():.4f} gain {response.abs().mean().item():.4f}")
report("phase 4 complex filter")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
