"""A 1-D convolutional waveform autoencoder (Conv1d down, ConvTranspose1d up, LeakyReLU) trained with an L1
loss plus a multi-resolution STFT loss (torch.stft at n_fft 512/1024/2048 with Hann windows, spectral
convergence and log-magnitude terms); fp32, AdamW (foreach), batch 8 x 32768 samples, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SAMPLES, CH = (2, 4096, 8) if SMALL else (8, 32768, 64)
FFTS = (512, 1024, 2048)
torch.manual_seed(1304)
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout, down):
    conv = nn.Conv1d(cin, cout, 8, stride=4, padding=2) if down else nn.ConvTranspose1d(cin, cout, 8, stride=4, padding=2)
    return nn.Sequential(conv, nn.LeakyReLU(0.2))


model = nn.Sequential(
    nn.Conv1d(1, CH, 7, padding=3),
    block(CH, 2 * CH, True),
    block(2 * CH, 4 * CH, True),
    block(4 * CH, 2 * CH, False),
    block(2 * CH, CH, False),
    nn.Conv1d(CH, 1, 7, padding=3),
).to(device)
windows = {n: torch.hann_window(n, device=device) for n in FFTS}


def stft_loss(y, x):
    total = 0.0
    for n in FFTS:
        sy = torch.stft(y, n, hop_length=n // 4, window=windows[n], return_complex=True).abs()
        sx = torch.stft(x, n, hop_length=n // 4, window=windows[n], return_complex=True).abs()
        sc = torch.linalg.norm(sx - sy) / torch.linalg.norm(sx)
        mag = F.l1_loss(torch.log(sy.clamp(min=1e-5)), torch.log(sx.clamp(min=1e-5)))
        total = total + sc + mag
    return total / len(FFTS)


optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    wave = torch.randn(BATCH, 1, SAMPLES, device=device)
    out = model(wave)
    loss = F.l1_loss(out, wave) + stft_loss(out.squeeze(1), wave.squeeze(1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
