"""A text-conditioned UNet block stack written by hand (GroupNorm, SiLU, 3x3 convolutions, spatial
self-attention and cross-attention to 77 text tokens through SDPA) in fp16, 20 denoising steps with
classifier-free guidance (the batch of 8 latents of 64x64 doubled each step) under torch.no_grad; 2
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7306)
C, B, S, STEPS = (32, 1, 8, 2) if SMALL else (320, 8, 64, 20)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, C), nn.Conv2d(C, C, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(32, C), nn.Conv2d(C, C, 3, padding=1)
        self.na, self.qkv, self.o = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.nc, self.q, self.kv, self.oc = (
            nn.LayerNorm(C),
            nn.Linear(C, C),
            nn.Linear(768, 2 * C),
            nn.Linear(C, C),
        )

    def forward(self, x, text):
        x = x + self.c2(F.silu(self.n2(self.c1(F.silu(self.n1(x))))))
        b, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(self.na(t)).view(b, -1, 3, 8, c // 8).permute(2, 0, 3, 1, 4)
        t = t + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, c))
        q = self.q(self.nc(t)).view(b, -1, 8, c // 8).transpose(1, 2)
        k, v = self.kv(text).view(b, -1, 2, 8, c // 8).permute(2, 0, 3, 1, 4)
        t = t + self.oc(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, c))
        return t.transpose(1, 2).reshape(b, c, h, w)


device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
inp, out = nn.Conv2d(4, C, 3, padding=1), nn.Conv2d(C, 4, 3, padding=1)
blocks = nn.ModuleList(Block() for _ in range(4))
model = nn.ModuleDict({"inp": inp, "out": out, "blocks": blocks}).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    latents = torch.randn(B, 4, S, S, device=device, dtype=dtype)
    text = torch.randn(2 * B, 77, 768, device=device, dtype=dtype)
    for _ in range(STEPS):
        x = model["inp"](torch.cat([latents, latents]))
        for blk in model["blocks"]:
            x = blk(x, text)
        uncond, cond = model["out"](x).chunk(2)
        latents = latents - 0.05 * (uncond + 7.5 * (cond - uncond))
        del x, uncond, cond
print(f"latents {tuple(latents.shape)}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
