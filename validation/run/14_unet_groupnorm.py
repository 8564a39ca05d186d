"""Small UNet (GroupNorm + SiLU conv blocks, strided-conv downsampling, ConvTranspose2d and
F.interpolate upsampling, torch.cat skips) trained as a denoiser with Adam and MSE."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, IMG, C = (2, 32, 8) if os.environ.get("SMOKE") else (8, 128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class ConvBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm1 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(8, cout)

    def forward(self, x):
        x = F.silu(self.norm1(self.conv1(x)))
        return F.silu(self.norm2(self.conv2(x)))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = ConvBlock(3, C)
        self.down1 = nn.Conv2d(C, C, 3, stride=2, padding=1)
        self.enc2 = ConvBlock(C, 2 * C)
        self.down2 = nn.Conv2d(2 * C, 2 * C, 3, stride=2, padding=1)
        self.mid = ConvBlock(2 * C, 4 * C)
        self.up2 = nn.ConvTranspose2d(4 * C, 2 * C, 2, stride=2)
        self.dec2 = ConvBlock(4 * C, 2 * C)
        self.dec1 = ConvBlock(2 * C + C, C)
        self.out = nn.Conv2d(C, 3, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.down1(e1))
        m = self.mid(self.down2(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        up1 = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up1, e1], dim=1))
        return self.out(d1)


model = UNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-4)
if device == "cuda":
    print(f"params {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    clean = torch.randn(B, 3, IMG, IMG, device=device)
    noise = torch.randn_like(clean)
    pred = model(clean + 0.1 * noise)
    loss = F.mse_loss(pred, noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    sample = model(torch.randn(B, 3, IMG, IMG, device=device))
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
