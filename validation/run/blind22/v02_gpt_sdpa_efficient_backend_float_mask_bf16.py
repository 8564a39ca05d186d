"""A GPT-style decoder (768 wide, 6 layers, 12 heads) in bf16 weights whose attention calls
F.scaled_dot_product_attention with an additive float mask (causal plus an ALiBi-like bias, per
head) inside torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION); AdamW(fused=True),
batch 8 x 1024, 3 steps; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2202)
B, T, W, H, DEPTH, V = (2, 16, 32, 4, 1, 100) if SMALL else (8, 1024, 768, 12, 6, 32000)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(W)
        self.qkv = nn.Linear(W, 3 * W, bias=False)
        self.out = nn.Linear(W, W, bias=False)
        self.ln2 = nn.LayerNorm(W)
        self.fc = nn.Linear(W, 4 * W)
        self.proj = nn.Linear(4 * W, W)

    def forward(self, x, bias):
        q, k, v = self.qkv(self.ln1(x)).split(W, dim=-1)
        q, k, v = (t.view(B, T, H, W // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, W))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, W)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.ln = nn.LayerNorm(W)
        self.head = nn.Linear(W, V, bias=False)

    def forward(self, ids):
        pos = torch.arange(T, device=ids.device)
        slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], device=ids.device)
        dist = (pos[None, :] - pos[:, None]).clamp(max=0).to(torch.bfloat16)
        bias = slopes.to(torch.bfloat16)[:, None, None] * dist
        bias = bias.masked_fill(pos[None, :] > pos[:, None], -math.inf)[None]
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, bias)
        return self.head(self.ln(x))


model = GPT().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, T), device=device)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION if device == "cuda" else SDPBackend.MATH):
        logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
