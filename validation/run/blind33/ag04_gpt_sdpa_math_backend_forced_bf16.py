"""A hand-written GPT (1024 wide, 6 layers, 16 heads, rotary-free, learned positions) in bf16 whose
attention runs under torch.nn.attention.sdpa_kernel(SDPBackend.MATH), as users force it to debug
or to get double backward: the math path materializes the attention matrix; batch 4 at 1024
tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3304)
D, L, H, V, B, S = (32, 2, 4, 64, 2, 16) if SMALL else (1024, 6, 16, 32000, 4, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D, bias=False), nn.GELU(), nn.Linear(4 * D, D, bias=False))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, H, D // H).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(SDPBackend.MATH):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
        return x + self.mlp(self.ln2(x))


model = nn.ModuleDict(
    {
        "tok": nn.Embedding(V, D),
        "pos": nn.Embedding(S, D),
        "blocks": nn.ModuleList(Block() for _ in range(L)),
        "ln": nn.LayerNorm(D),
        "head": nn.Linear(D, V, bias=False),
    }
).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    x = model["tok"](ids[:, :-1]) + model["pos"](torch.arange(S, device=device))
    for blk in model["blocks"]:
        x = blk(x)
    logits = model["head"](model["ln"](x))
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, x, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
