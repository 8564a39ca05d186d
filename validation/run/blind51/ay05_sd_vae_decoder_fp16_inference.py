"""A Stable-Diffusion-style VAE decoder written by hand, in fp16 under `inference_mode`: 4-channel
64x64 latents to 512x512 images through a mid block with single-head self-attention at 64x64
(4,096 tokens, SDPA), ResNet blocks with GroupNorm(32) and SiLU, nearest-neighbour upsampling by
`F.interpolate`, channels 512/512/256/128; batch 4, 2 batches; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5105)
B, LAT, CH = (1, 8, (32, 32, 32, 32)) if SMALL else (4, 64, (512, 512, 256, 128))
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


class Res(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.GroupNorm(32, c)
        self.qkv, self.out = nn.Linear(c, 3 * c), nn.Linear(c, c)

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).unsqueeze(1).chunk(3, -1)
        a = F.scaled_dot_product_attention(q, k, v).squeeze(1)
        return x + self.out(a).transpose(1, 2).reshape(b, c, h, w)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(4, CH[0], 3, padding=1)
        self.mid = nn.ModuleList([Res(CH[0], CH[0]), Attn(CH[0]), Res(CH[0], CH[0])])
        self.ups = nn.ModuleList()
        cin = CH[0]
        for i, c in enumerate(CH):
            self.ups.append(nn.ModuleList([Res(cin, c), Res(c, c), Res(c, c)]))
            self.ups.append(nn.Conv2d(c, c, 3, padding=1) if i < 3 else nn.Identity())
            cin = c
        self.norm, self.out = nn.GroupNorm(32, CH[-1]), nn.Conv2d(CH[-1], 3, 3, padding=1)

    def forward(self, z):
        x = self.inp(z)
        for m in self.mid:
            x = m(x)
        for i in range(0, len(self.ups), 2):
            for r in self.ups[i]:
                x = r(x)
            if not isinstance(self.ups[i + 1], nn.Identity):
                x = self.ups[i + 1](F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.out(F.silu(self.norm(x)))


model = Decoder().to(device, dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for batch in range(2):
        z = torch.randn(B, 4, LAT, LAT, device=device, dtype=dtype)
        img = model(z).clamp(-1, 1)
        del z, img
        if device == "cuda":
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"batch {batch} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()
