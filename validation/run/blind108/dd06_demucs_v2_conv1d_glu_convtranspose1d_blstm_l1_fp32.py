"""Demucs (v2) waveform music source separation, hand-written: 5 encoder levels of Conv1d(k=8,
stride 4) + ReLU + Conv1d(k=1) + GLU from 48 channels doubling to 768, a 2-layer bidirectional
LSTM bottleneck with a linear projection, 5 decoder levels of Conv1d(k=3) + GLU +
ConvTranspose1d(k=8, stride 4) with U-Net skips cropped to length, 4 stereo sources out; the mix
is normalized by its mean/std and padded to a valid length; batch 4 of 3 s stereo 44.1 kHz
mixtures made as sums of the sources, L1 loss, fp32, Adam, 3 steps; then an 8 s mixture separated
under inference_mode in two overlapping halves blended with a linear cross-fade; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10806)
B, SECS, EVAL_SECS, H, DEPTH, STEPS = (2, 0.25, 0.5, 8, 3, 2) if SMALL else (4, 3.0, 8.0, 48, 5, 3)
SR, K, S, NSRC = 44100, 8, 4, 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class Demucs(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = nn.ModuleList(), nn.ModuleList()
        cin, ch = 2, H
        for i in range(DEPTH):
            self.encoder.append(
                nn.Sequential(nn.Conv1d(cin, ch, K, S), nn.ReLU(), nn.Conv1d(ch, 2 * ch, 1), nn.GLU(1))
            )
            out = NSRC * 2 if i == 0 else cin
            dec = [nn.Conv1d(ch, 2 * ch, 3, padding=1), nn.GLU(1), nn.ConvTranspose1d(ch, out, K, S)]
            if i > 0:
                dec.append(nn.ReLU())
            self.decoder.insert(0, nn.Sequential(*dec))
            cin, ch = ch, 2 * ch
        self.lstm = nn.LSTM(cin, cin, num_layers=2, bidirectional=True)
        self.proj = nn.Linear(2 * cin, cin)

    def valid_length(self, n):
        for _ in range(DEPTH):
            n = max(math.ceil((n - K) / S) + 1, 1)
        for _ in range(DEPTH):
            n = (n - 1) * S + K
        return n

    def forward(self, mix):
        length = mix.shape[-1]
        mono = mix.mean(1, keepdim=True)
        mean, std = mono.mean(-1, keepdim=True), mono.std(-1, keepdim=True)
        x = (mix - mean) / (1e-5 + std)
        delta = self.valid_length(length) - length
        x = F.pad(x, (delta // 2, delta - delta // 2))
        skips = []
        for enc in self.encoder:
            x = enc(x)
            skips.append(x)
        y, _ = self.lstm(x.permute(2, 0, 1))
        x = self.proj(y).permute(1, 2, 0)
        for dec in self.decoder:
            skip = skips.pop()
            off = (skip.shape[-1] - x.shape[-1]) // 2
            x = dec(x + skip[..., off : off + x.shape[-1]])
        off = (x.shape[-1] - length) // 2
        x = x[..., off : off + length]
        x = x * std + mean
        return x.view(x.shape[0], NSRC, 2, length)


model = Demucs().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
gen = torch.Generator(device=device).manual_seed(6)


def sources(n, secs):
    t = int(secs * SR)
    return 0.1 * torch.randn(n, NSRC, 2, t, device=device, generator=gen).cumsum(-1).tanh()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    src = sources(B, SECS)
    mix = src.sum(1)
    est = model(mix)
    loss = F.l1_loss(est, src)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del src, mix, est, loss
model.eval()
with torch.inference_mode():
    mix = sources(1, EVAL_SECS).sum(1)
    n = mix.shape[-1]
    half, ov = n // 2, int(0.1 * n)
    a = model(mix[..., : half + ov])
    b = model(mix[..., half - ov :])
    fade = torch.linspace(1, 0, 2 * ov, device=device)
    out = torch.zeros(1, NSRC, 2, n, device=device)
    out[..., : half - ov] = a[..., : half - ov]
    out[..., half + ov :] = b[..., 2 * ov :]
    out[..., half - ov : half + ov] = a[..., half - ov :] * fade + b[..., : 2 * ov] * (1 - fade)
if device == "cuda":
    print(
        f"eval {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
