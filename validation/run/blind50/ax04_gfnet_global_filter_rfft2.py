"""GFNet (global filter networks) written by hand: 16x16 patch embedding, 12 blocks whose token
mixing is `torch.fft.rfft2` over the 14x14 grid, a learned complex filter and `irfft2`, then an MLP;
bf16 autocast over fp32 weights (the FFTs run on the float32 LayerNorm outputs), AdamW, batch 64 at
224, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5004)
B, IMG, D, DEPTH = (2, 64, 32, 2) if SMALL else (64, 224, 384, 12)
G = IMG // 16
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.filter = nn.Parameter(torch.randn(G, G // 2 + 1, D, 2) * 0.02)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        b = x.shape[0]
        h = self.n1(x).float().view(b, G, G, D)
        f = torch.fft.rfft2(h, dim=(1, 2), norm="ortho") * torch.view_as_complex(self.filter)
        h = torch.fft.irfft2(f, s=(G, G), dim=(1, 2), norm="ortho").reshape(b, G * G, D)
        x = x + h
        return x + self.mlp(self.n2(x))


class GFNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, 16, stride=16)
        self.pos = nn.Parameter(torch.zeros(1, G * G, D))
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, 1000)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.blocks(x)).mean(1))


model = GFNet().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    img = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(img), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del img, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
