"""A DiT (diffusion transformer): patchify a 4x32x32 latent with patch 2 into 256 tokens, 12 blocks of
width 768 with adaLN-Zero modulation from a timestep and class embedding (shift, scale and gate for
attention and MLP), SDPA, GELU(tanh) MLP, unpatchify; bf16 weights, AdamW(fused=True), an MSE loss on
predicted noise, batch 64, 3 steps."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1902)
WIDTH, DEPTH, HEADS, BATCH = (64, 2, 4, 2) if SMALL else (768, 12, 12, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(WIDTH, 6 * WIDTH))

    def forward(self, x, c):
        s1, sc1, g1, s2, sc2, g2 = self.ada(c).chunk(6, dim=1)
        b, n, _ = x.shape
        q, k, v = self.qkv(modulate(self.norm1(x), s1, sc1)).view(b, n, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, WIDTH)
        x = x + g1.unsqueeze(1) * self.proj(a)
        h = self.fc2(F.gelu(self.fc1(modulate(self.norm2(x), s2, sc2)), approximate="tanh"))
        return x + g2.unsqueeze(1) * h


class DiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(4, WIDTH, 2, stride=2)
        self.pos = nn.Parameter(torch.zeros(1, 256, WIDTH))
        self.t_mlp = nn.Sequential(nn.Linear(256, WIDTH), nn.SiLU(), nn.Linear(WIDTH, WIDTH))
        self.y_emb = nn.Embedding(1001, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(WIDTH, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(WIDTH, 2 * WIDTH))
        self.out = nn.Linear(WIDTH, 2 * 2 * 4)

    def forward(self, x, t, y):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        half = 128
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        temb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(x.dtype)
        c = self.t_mlp(temb) + self.y_emb(y)
        for blk in self.blocks:
            x = blk(x, c)
        shift, scale = self.ada(c).chunk(2, dim=1)
        x = self.out(modulate(self.norm(x), shift, scale))
        b = x.shape[0]
        x = x.view(b, 16, 16, 2, 2, 4).permute(0, 5, 1, 3, 2, 4).reshape(b, 4, 32, 32)
        return x


model = DiT().to(device=device, dtype=dtype).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x0 = torch.randn(BATCH, 4, 32, 32, device=device, dtype=dtype)
    noise = torch.randn_like(x0)
    t = torch.randint(0, 1000, (BATCH,), device=device)
    y = torch.randint(0, 1001, (BATCH,), device=device)
    a = (1 - t.float() / 1000).to(dtype).view(-1, 1, 1, 1)
    loss = F.mse_loss(model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, y), noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
