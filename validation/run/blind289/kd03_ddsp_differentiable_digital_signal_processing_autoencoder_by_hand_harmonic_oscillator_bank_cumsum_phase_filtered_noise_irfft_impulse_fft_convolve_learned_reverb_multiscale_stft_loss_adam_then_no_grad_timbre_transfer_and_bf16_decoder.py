"""DDSP (Engel et al., ICLR 2020, "DDSP: Differentiable Digital Signal Processing") decoder and synthesiser
written by hand as the acids-ircam ddsp_pytorch reference does, trained on synthetic monophonic
instrument audio at 16 kHz (a random vibrato f0 contour, a fixed spectral envelope, breath noise).
Conditioning: f0 (Hz) and an A-weighting-free loudness (frame log power from `torch.stft`) at 100 frames a
second. Decoder: per-input MLPs (Linear + LayerNorm + LeakyReLU, 512), a GRU(1024 -> 512), an output MLP
with f0 and loudness re-concatenated, two projections through `2 sigmoid(x)^ln 10 + 1e-7`. Harmonic
synthesiser: 100 harmonic amplitudes normalised, zeroed above Nyquist, upsampled to audio rate by
`F.interpolate`, phases by `torch.cumsum` of 2 pi f0 / sr times `arange(1, 101)`, `sin` and a weighted sum
(B x samples x 100 tensors). Filtered noise: 65 band magnitudes made a zero-phase impulse by `irfft`, `roll`,
a Hann window, zero padding, convolved with uniform noise per 160-sample block by `fft_convolve` (rfft
product, irfft). A learned exponentially-decaying 1 s reverb impulse (`impulse[:, 0] = 1` in place)
applied by the same FFT convolution over the whole clip. Multi-scale spectral loss: `torch.stft` magnitudes
at 4096 ... 128 points (75% overlap, normalized), linear and log L1.
Phase 1: 8 Adam steps at 16 clips x 4 s. Phase 2: no_grad timbre transfer, 4 clips x 30 s resynthesised with
f0 an octave up (and loudness -6 dB). Phase 3: 6 steps at 32 clips x 2 s with the decoder under bf16
autocast and the synthesiser kept in fp32 (`autocast(enabled=False)`, `.float()` controls).
3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2893)
dev = "cuda"
SR, BLOCK, N_HARM, N_BANDS = 16000, 160, 100, 65


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- DSP helpers (ddsp_pytorch core.py) ---------------------------------------------------------------------
def safe_log(x):
    return torch.log(x + 1e-7)


def multiscale_fft(signal, scales=(4096, 2048, 1024, 512, 256, 128), overlap=0.75):
    stfts = []
    for s in scales:
        S = torch.stft(
            signal,
            s,
            int(s * (1 - overlap)),
            s,
            torch.hann_window(s).to(signal),
            True,
            normalized=True,
            return_complex=True,
        ).abs()
        stfts.append(S)
    return stfts


def scale_function(x):
    return 2 * torch.sigmoid(x) ** (math.log(10)) + 1e-7


def upsample(signal, factor):
    signal = signal.permute(0, 2, 1)
    signal = F.interpolate(signal, size=signal.shape[-1] * factor)
    return signal.permute(0, 2, 1)


def remove_above_nyquist(amplitudes, pitch, sampling_rate):
    n_harm = amplitudes.shape[-1]
    pitches = pitch * torch.arange(1, n_harm + 1).to(pitch)
    aa = (pitches < sampling_rate / 2).float() + 1e-4
    return amplitudes * aa


def harmonic_synth(pitch, amplitudes, sampling_rate):
    n_harmonic = amplitudes.shape[-1]
    omega = torch.cumsum(2 * math.pi * pitch / sampling_rate, 1)
    omegas = omega * torch.arange(1, n_harmonic + 1).to(omega)
    return (torch.sin(omegas) * amplitudes).sum(-1, keepdim=True)


def amp_to_impulse_response(amp, target_size):
    amp = torch.stack([amp, torch.zeros_like(amp)], -1)
    amp = torch.view_as_complex(amp)
    amp = torch.fft.irfft(amp)
    filter_size = amp.shape[-1]
    amp = torch.roll(amp, filter_size // 2, -1)
    win = torch.hann_window(filter_size, dtype=amp.dtype, device=amp.device)
    amp = amp * win
    amp = F.pad(amp, (0, int(target_size) - int(filter_size)))
    return torch.roll(amp, -filter_size // 2, -1)


def fft_convolve(signal, kernel):
    signal = F.pad(signal, (0, signal.shape[-1]))
    kernel = F.pad(kernel, (kernel.shape[-1], 0))
    output = torch.fft.irfft(torch.fft.rfft(signal) * torch.fft.rfft(kernel))
    return output[..., output.shape[-1] // 2 :]


def mlp(in_size, hidden_size, n_layers):
    channels = [in_size] + n_layers * [hidden_size]
    net = []
    for i in range(n_layers):
        net += [nn.Linear(channels[i], channels[i + 1]), nn.LayerNorm(channels[i + 1]), nn.LeakyReLU()]
    return nn.Sequential(*net)


class Reverb(nn.Module):
    def __init__(self, length, sampling_rate, initial_wet=0.0, initial_decay=5.0):
        super().__init__()
        self.length = length
        self.noise = nn.Parameter((torch.rand(length) * 2 - 1).unsqueeze(-1))
        self.decay = nn.Parameter(torch.tensor(float(initial_decay)))
        self.wet = nn.Parameter(torch.tensor(float(initial_wet)))
        self.register_buffer("t", (torch.arange(length) / sampling_rate).reshape(1, -1, 1))

    def build_impulse(self):
        t = torch.exp(-F.softplus(-self.decay) * self.t * 500)
        impulse = self.noise * t * torch.sigmoid(self.wet)
        impulse[:, 0] = 1
        return impulse

    def forward(self, x):
        impulse = F.pad(self.build_impulse(), (0, 0, 0, x.shape[1] - self.length))
        return fft_convolve(x.squeeze(-1), impulse.squeeze(-1)).unsqueeze(-1)


class DDSP(nn.Module):
    def __init__(self, hidden_size=512):
        super().__init__()
        self.in_mlps = nn.ModuleList([mlp(1, hidden_size, 3), mlp(1, hidden_size, 3)])
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out_mlp = mlp(hidden_size + 2, hidden_size, 3)
        self.proj_matrices = nn.ModuleList(
            [nn.Linear(hidden_size, N_HARM + 1), nn.Linear(hidden_size, N_BANDS)]
        )
        self.reverb = Reverb(SR, SR)

    def controls(self, pitch, loudness):
        hidden = torch.cat([self.in_mlps[0](pitch), self.in_mlps[1](loudness)], -1)
        hidden = torch.cat([self.gru(hidden)[0], pitch, loudness], -1)
        hidden = self.out_mlp(hidden)
        return scale_function(self.proj_matrices[0](hidden)), scale_function(
            self.proj_matrices[1](hidden) - 5
        )

    def synth(self, pitch, param, noise_param):
        total_amp = param[..., :1]
        amplitudes = remove_above_nyquist(param[..., 1:], pitch, SR)
        amplitudes = amplitudes / amplitudes.sum(-1, keepdim=True)
        amplitudes = amplitudes * total_amp
        amplitudes = upsample(amplitudes, BLOCK)
        harmonic = harmonic_synth(upsample(pitch, BLOCK), amplitudes, SR)
        impulse = amp_to_impulse_response(noise_param, BLOCK)
        noise = torch.rand(impulse.shape[0], impulse.shape[1], BLOCK, device=impulse.device) * 2 - 1
        noise = fft_convolve(noise, impulse).contiguous()
        noise = noise.reshape(noise.shape[0], -1, 1)
        return self.reverb(harmonic + noise)

    def forward(self, pitch, loudness):
        param, noise_param = self.controls(pitch, loudness)
        return self.synth(pitch, param, noise_param)


# --- synthetic instrument recordings ------------------------------------------------------------------------
@torch.no_grad()
def make_clips(b, seconds):
    frames = seconds * SR // BLOCK
    base = 110 * 2 ** (torch.randint(0, 24, (b, 1, 1), device=dev) / 12)
    t = torch.arange(frames, device=dev).view(1, -1, 1) / (SR / BLOCK)
    f0 = base * (1 + 0.01 * torch.sin(2 * math.pi * 5.5 * t)) * (1 + 0.05 * torch.rand(b, 1, 1, device=dev))
    env = torch.sigmoid(8 * torch.sin(2 * math.pi * t / 1.7 + torch.rand(b, 1, 1, device=dev) * 6))
    k = torch.arange(1, N_HARM + 1, device=dev)
    amps = (1 / k**1.3).view(1, 1, -1).expand(b, frames, -1) * env
    amps = remove_above_nyquist(amps, f0, SR)
    audio = harmonic_synth(upsample(f0, BLOCK), upsample(amps, BLOCK), SR).squeeze(-1)
    audio = 0.3 * audio + 0.01 * torch.randn_like(audio) * upsample(env, BLOCK).squeeze(-1)
    return audio, f0


@torch.no_grad()
def loudness_of(audio):
    S = torch.stft(audio, 1024, BLOCK, 1024, torch.hann_window(1024, device=dev), True, return_complex=True)
    power = S.abs().pow(2).mean(1)[:, : audio.shape[-1] // BLOCK]  # (B, frames)
    return (10 * torch.log10(power + 1e-10)).unsqueeze(-1) / 80 + 1


def spectral_loss(rec, target):
    loss = 0
    for s_x, s_y in zip(multiscale_fft(target), multiscale_fft(rec), strict=True):
        loss = loss + (s_x - s_y).abs().mean() + (safe_log(s_x) - safe_log(s_y)).abs().mean()
    return loss


model = DDSP().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

# --- phase 1: training at 16 x 4 s --------------------------------------------------------------------------
for step in range(8):
    audio, f0 = make_clips(16, 4)
    loud = loudness_of(audio)
    rec = model(f0, loud).squeeze(-1)
    loss = spectral_loss(rec, audio)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.3f}")
report("phase1 train 16x4s")

# --- phase 2: timbre transfer of long clips -----------------------------------------------------------------
model.eval()
with torch.no_grad():
    audio, f0 = make_clips(4, 30)
    loud = loudness_of(audio) - 6 / 80
    out = model(f0 * 2, loud).squeeze(-1)
    out = out / out.abs().amax(-1, keepdim=True).clamp_min(1e-5)
    print("transfer rms", out.pow(2).mean().sqrt().item())
    del out, audio, f0, loud
report("phase2 timbre transfer 4x30s")

# --- phase 3: bf16 decoder, fp32 synthesiser ----------------------------------------------------------------
model.train()
for step in range(6):
    audio, f0 = make_clips(32, 2)
    loud = loudness_of(audio)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        param, noise_param = model.controls(f0, loud)
        with torch.autocast("cuda", enabled=False):
            rec = model.synth(f0, param.float(), noise_param.float()).squeeze(-1)
            loss = spectral_loss(rec, audio)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.3f}")
report("phase3 bf16 decoder 32x2s")
