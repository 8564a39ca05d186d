"""A speech denoiser on magnitude spectrograms: `torch.stft` (n_fft 1,024, hop 256, Hann window) of
4-second 16 kHz clips, a small 2-D conv U-Net predicting a mask, `torch.istft` back to waveforms, an L1
loss on the audio; fp32, Adam, batch 16, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7905)
B, T, NFFT, HOP, W = (2, 4096, 256, 64, 8) if SMALL else (16, 64000, 1024, 256, 32)


def block(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.e1, self.e2, self.mid = block(1, W), block(W, 2 * W), block(2 * W, 2 * W)
        self.d2, self.d1 = block(4 * W, W), block(2 * W, W)
        self.out = nn.Conv2d(W, 1, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        m = self.mid(b)
        d = self.d2(torch.cat([m, b], 1))
        d = F.interpolate(d, size=a.shape[-2:], mode="nearest")
        return torch.sigmoid(self.out(self.d1(torch.cat([d, a], 1))))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = UNet().to(device)
window = torch.hann_window(NFFT, device=device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clean = torch.randn(B, T, device=device)
    noisy = clean + 0.3 * torch.randn(B, T, device=device)
    spec = torch.stft(noisy, NFFT, HOP, window=window, return_complex=True)
    mag = spec.abs().unsqueeze(1)
    mask = model(torch.log1p(mag)).squeeze(1)
    est = torch.istft(spec * mask, NFFT, HOP, window=window, length=T)
    loss = F.l1_loss(est, clean)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clean, noisy, spec, mag, mask, est, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
