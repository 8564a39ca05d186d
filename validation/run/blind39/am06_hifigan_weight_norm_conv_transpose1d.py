"""A HiFi-GAN-style vocoder generator trained on an L1 mel-free waveform loss: weight-normalised
Conv1d and ConvTranspose1d (torch.nn.utils.parametrizations.weight_norm) upsampling 80-bin frames
by 8x8x2x2, leaky ReLU residual blocks with dilations 1, 3, 5, fp32, AdamW (foreach), batch 8 of
64 frames, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3906)
M, C, B, FR = (8, 16, 2, 8) if SMALL else (80, 256, 8, 64)
RATES = (8, 8, 2, 2)


class Res(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv1d(ch, ch, 3, dilation=d, padding=d)) for d in (1, 3, 5)
        )

    def forward(self, x):
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, 0.1))
        return x


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(M, C, 7, padding=3))
        ups, res, ch = [], [], C
        for r in RATES:
            ups.append(weight_norm(nn.ConvTranspose1d(ch, ch // 2, 2 * r, stride=r, padding=r // 2)))
            ch //= 2
            res.append(Res(ch))
        self.ups, self.res = nn.ModuleList(ups), nn.ModuleList(res)
        self.post = weight_norm(nn.Conv1d(ch, 1, 7, padding=3))

    def forward(self, mel):
        x = self.pre(mel)
        for up, res in zip(self.ups, self.res, strict=True):
            x = res(up(F.leaky_relu(x, 0.1)))
        return torch.tanh(self.post(F.leaky_relu(x)))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Generator().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.8, 0.99))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    mel = torch.randn(B, M, FR, device=device)
    wav = torch.randn(B, 1, FR * 256, device=device)
    loss = F.l1_loss(model(mel), wav)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del mel, wav, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
