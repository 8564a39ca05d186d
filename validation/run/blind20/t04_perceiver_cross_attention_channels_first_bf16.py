"""A Perceiver-style model: inputs arrive channels-first (B, C, N) and are projected by nn.Linear on
their transpose (a non-contiguous view), 256 learned latents cross-attend to 4,096 input positions
(nn.MultiheadAttention with kdim/vdim), then 6 latent self-attention blocks, fp32 weights under bf16
autocast, AdamW, batch 32, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2004)
C, N, LAT, WIDTH, DEPTH, B = (8, 64, 16, 32, 2, 2) if SMALL else (64, 4096, 256, 512, 6, 32)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Perceiver(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(C, WIDTH)
        self.latents = nn.Parameter(torch.randn(LAT, WIDTH) * 0.02)
        self.cross = nn.MultiheadAttention(WIDTH, 8, batch_first=True)
        self.cross_norm = nn.LayerNorm(WIDTH)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(DEPTH)
        )
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x):
        kv = self.inp(x.transpose(1, 2))
        lat = self.latents.expand(x.shape[0], -1, -1)
        lat = lat + self.cross(self.cross_norm(lat), kv, kv, need_weights=False)[0]
        for blk in self.blocks:
            lat = blk(lat)
        return self.head(lat.mean(1))


model = Perceiver().to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, C, N, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
