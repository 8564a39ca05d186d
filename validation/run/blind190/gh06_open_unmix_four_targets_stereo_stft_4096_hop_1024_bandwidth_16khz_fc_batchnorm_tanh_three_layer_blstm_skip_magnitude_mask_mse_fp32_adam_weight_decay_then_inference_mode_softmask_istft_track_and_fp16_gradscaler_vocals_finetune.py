"""Open-Unmix (Stoter et al. 2019, sigsep/open-unmix-pytorch) written by hand, one model per target for
the four MUSDB18 targets (vocals, drums, bass, other): stereo 44.1 kHz audio, torch.stft on the device
(n_fft 4096, hop 1024, Hann window, complex) and the magnitude of both channels, cropped to the 1,487
bins below 16 kHz; per-bin input mean and scale parameters, a Linear of 2 x 1,487 -> 512 without bias +
BatchNorm1d + tanh, a 3-layer bidirectional LSTM of 256 per direction (dropout 0.4), its output
concatenated with its input (skip), Linear 1,024 -> 512 + BatchNorm1d + ReLU, Linear 512 -> 2 x 2,049 +
BatchNorm1d, per-bin output scale and mean, ReLU, and the result multiplied with the mixture's magnitude.

Data: 6-second stereo excerpts at batch 16 (the mixture as the sum of four random sources), made on the
device. Loss: MSE between estimated and target magnitude spectrograms, each target's model trained by its
own Adam (lr 1e-3, weight decay 1e-5), as open-unmix's train.py does for one target, here all four in
one loop. fp32.

Phases: the first step of all four; 2 more steps; under torch.inference_mode the four models in eval
mode separate a 30-second stereo track: the magnitudes, a soft mask (each target's magnitude over their
sum), the masked complex mixture spectrogram through torch.istft, the stems moved to the host; then the
other three models and their optimizers deleted, torch.cuda.empty_cache(), and the vocals model
fine-tuned for 2 steps at batch 32 under fp16 autocast with torch.amp.GradScaler and gradient clipping
at 1. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19006)
if SMALL:
    BATCH, SECONDS, HIDDEN, STEPS, TRACK_SECONDS, FT_BATCH = 2, 1, 32, 1, 2, 2
else:
    BATCH, SECONDS, HIDDEN, STEPS, TRACK_SECONDS, FT_BATCH = 16, 6, 512, 2, 30, 32
RATE, N_FFT, HOP, CHANNELS = 44100, 4096, 1024, 2
BINS = N_FFT // 2 + 1
MAX_BIN = int(16000 / (RATE / 2) * BINS)  # bandwidth 16 kHz -> 1487 bins
TARGETS = ["vocals", "drums", "bass", "other"]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
window = torch.hann_window(N_FFT, device=device)


def stft(audio):
    # audio: [batch, channels, samples] -> complex [batch, channels, bins, frames]
    b, c, t = audio.shape
    spec = torch.stft(audio.reshape(b * c, t), N_FFT, HOP, window=window, center=True, return_complex=True)
    return spec.view(b, c, BINS, -1)


def istft(spec, length):
    b, c, f, frames = spec.shape
    wav = torch.istft(spec.reshape(b * c, f, frames), N_FFT, HOP, window=window, length=length)
    return wav.view(b, c, length)


class OpenUnmix(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.hidden = hidden
        self.input_mean = nn.Parameter(torch.zeros(MAX_BIN))
        self.input_scale = nn.Parameter(torch.ones(MAX_BIN))
        self.fc1 = nn.Linear(MAX_BIN * CHANNELS, hidden, bias=False)
        self.bn1 = nn.BatchNorm1d(hidden)
        self.lstm = nn.LSTM(hidden, hidden // 2, num_layers=3, bidirectional=True, dropout=0.4)
        self.fc2 = nn.Linear(hidden * 2, hidden, bias=False)
        self.bn2 = nn.BatchNorm1d(hidden)
        self.fc3 = nn.Linear(hidden, BINS * CHANNELS, bias=False)
        self.bn3 = nn.BatchNorm1d(BINS * CHANNELS)
        self.output_scale = nn.Parameter(torch.ones(BINS))
        self.output_mean = nn.Parameter(torch.ones(BINS))

    def forward(self, mag):
        # mag: [batch, channels, bins, frames] -> [frames, batch, channels, bins]
        x = mag.permute(3, 0, 1, 2)
        frames, batch, channels, bins = x.shape
        mix = x.detach().clone()
        x = x[..., :MAX_BIN]
        x = (x + self.input_mean) * self.input_scale
        x = self.fc1(x.reshape(-1, channels * MAX_BIN))
        x = torch.tanh(self.bn1(x)).reshape(frames, batch, self.hidden)
        lstm_out, _ = self.lstm(x)
        x = torch.cat([x, lstm_out], -1)
        x = F.relu(self.bn2(self.fc2(x.reshape(-1, x.shape[-1]))))
        x = self.bn3(self.fc3(x)).reshape(frames, batch, channels, bins)
        x = F.relu(x * self.output_scale + self.output_mean) * mix
        return x.permute(1, 2, 3, 0)


def sources_batch(bsz, seconds):
    samples = seconds * RATE
    stems = torch.randn(len(TARGETS), bsz, CHANNELS, samples, device=device) * 0.1
    return stems.sum(0), stems


models = {name: OpenUnmix().to(device) for name in TARGETS}
opts = {name: torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1e-5) for name, m in models.items()}
print(f"params per target {sum(p.numel() for p in models['vocals'].parameters()) / 1e6:.2f}M")


def train_all():
    mix, stems = sources_batch(BATCH, SECONDS)
    mix_mag = stft(mix).abs()
    losses = []
    for i, name in enumerate(TARGETS):
        model, opt = models[name], opts[name]
        target_mag = stft(stems[i]).abs()
        est = model(mix_mag)
        loss = F.mse_loss(est, target_mag)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


for m in models.values():
    m.train()
print("step 0 losses", [f"{v:.5f}" for v in train_all()])
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} losses", [f"{v:.5f}" for v in train_all()])
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for m in models.values():
    m.eval()
with torch.inference_mode():
    track, _ = sources_batch(1, TRACK_SECONDS)
    spec = stft(track)
    mag = spec.abs()
    estimates = torch.stack([models[name](mag) for name in TARGETS])  # [targets, 1, 2, bins, frames]
    masks = estimates / (estimates.sum(0, keepdim=True) + 1e-10)
    stems_out = {name: istft(spec * masks[i], track.shape[-1]).cpu() for i, name in enumerate(TARGETS)}
print("stems", {k: tuple(v.shape) for k, v in stems_out.items()})
if device == "cuda":
    print(f"separate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

vocals, vocals_opt = models["vocals"], opts["vocals"]
for name in ["drums", "bass", "other"]:
    del models[name], opts[name]
if device == "cuda":
    torch.cuda.empty_cache()
vocals.train()
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(2):
    mix, stems = sources_batch(FT_BATCH, SECONDS)
    mix_mag = stft(mix).abs()
    target_mag = stft(stems[0]).abs()
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        est = vocals(mix_mag)
        loss = F.mse_loss(est.float(), target_mag)
    vocals_opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(vocals_opt)
    gn = torch.nn.utils.clip_grad_norm_(vocals.parameters(), 1.0)
    scaler.step(vocals_opt)
    scaler.update()
    print(f"vocals fp16 step {step} loss {loss.item():.5f} grad norm {gn.item():.3f}")
if device == "cuda":
    print(
        f"finetune allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
