"""A 1-D convolutional waveform generator trained with a multi-resolution STFT loss (spectral
convergence and log magnitude at FFT sizes 512, 1024, 2048 with Hann windows, torch.stft
return_complex) plus an iSTFT round trip of the target, fp32, AdamW, batch 16 of 32768 samples,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4403)
B, T, C = (2, 4096, 8) if SMALL else (16, 32768, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Conv1d(1, C, 7, padding=3),
    nn.LeakyReLU(0.1),
    nn.Conv1d(C, C, 7, padding=6, dilation=2),
    nn.LeakyReLU(0.1),
    nn.Conv1d(C, C, 7, padding=12, dilation=4),
    nn.LeakyReLU(0.1),
    nn.Conv1d(C, 1, 7, padding=3),
    nn.Tanh(),
).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.8, 0.99))
windows = {n: torch.hann_window(n, device=device) for n in (512, 1024, 2048)}


def stft_mag(x, n):
    spec = torch.stft(x, n, hop_length=n // 4, window=windows[n], return_complex=True)
    return spec.abs().clamp_min(1e-7)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    noise = torch.randn(B, 1, T, device=device)
    target = torch.randn(B, T, device=device) * 0.1
    y = model(noise).squeeze(1)
    loss = 0
    for n in windows:
        m, t = stft_mag(y, n), stft_mag(target, n)
        loss = loss + torch.linalg.norm(t - m) / torch.linalg.norm(t)
        loss = loss + F.l1_loss(m.log(), t.log())
    spec = torch.stft(target, 1024, hop_length=256, window=windows[1024], return_complex=True)
    recon = torch.istft(spec, 1024, hop_length=256, window=windows[1024], length=T)
    loss = loss + F.l1_loss(y, recon)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del noise, target, y, loss, m, t, spec, recon
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
