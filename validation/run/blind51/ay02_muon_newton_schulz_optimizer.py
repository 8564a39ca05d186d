"""The Muon optimizer written by hand for a GPT-style model: momentum on each 2-D weight, its update
orthogonalised by 5 quintic Newton-Schulz iterations in bf16, AdamW for embeddings, norms and the
head; 12 layers of width 1024, fp32 weights, batch 16 x 1024 tokens under bf16 autocast, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5102)
D, L, V, B, T = (64, 2, 100, 2, 32) if SMALL else (1024, 12, 50304, 16, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc, self.out = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, 16 if D >= 64 else 2, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.n2(x))))


emb = nn.Embedding(V, D)
blocks = nn.ModuleList([Block() for _ in range(L)])
head = nn.Linear(D, V, bias=False)
model = nn.ModuleDict(dict(emb=emb, blocks=blocks, head=head)).to(device)
matrices = [p for p in blocks.parameters() if p.dim() == 2]
others = [p for p in model.parameters() if p.dim() != 2 or not any(p is m for m in matrices)]
adamw = torch.optim.AdamW(others, lr=3e-4, fused=device == "cuda")
momenta = [torch.zeros_like(p) for p in matrices]


def newton_schulz(g, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.bfloat16()
    x = x / (x.norm() + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        m = x @ x.T
        x = a * x + (b * m + c * m @ m) @ x
    return x.T if tall else x


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        x = model["emb"](ids[:, :-1])
        for block in model["blocks"]:
            x = block(x)
        loss = F.cross_entropy(model["head"](x).float().flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    with torch.no_grad():
        for p, m in zip(matrices, momenta, strict=True):
            m.mul_(0.95).add_(p.grad)
            update = newton_schulz(p.grad.add(m, alpha=0.95))
            p.add_(update.to(p.dtype), alpha=-0.02 * max(1, p.shape[0] / p.shape[1]) ** 0.5)
            del update
    adamw.step()
    model.zero_grad(set_to_none=True)
    del ids, x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
