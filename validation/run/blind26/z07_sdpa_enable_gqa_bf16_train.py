"""A hand-written GQA transformer: F.scaled_dot_product_attention(..., is_causal=True,
enable_gqa=True) with 16 query heads over 4 key/value heads (no repeat_interleave in the model),
RMSNorm, SwiGLU, bf16 weights, 6 layers of 1024 at batch 8 and 1024 tokens, fused AdamW,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2607)
D, L, HQ, HKV, B, S, V = (32, 1, 4, 2, 2, 16, 64) if SMALL else (1024, 6, 16, 4, 8, 1024, 16000)
HD = D // HQ
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q = nn.Linear(D, D, bias=False)
        self.kv = nn.Linear(D, 2 * HKV * HD, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.up = nn.Linear(D, 2 * 2816 if not SMALL else 2 * 64, bias=False)
        self.down = nn.Linear(2816 if not SMALL else 64, D, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, HQ, HD).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2, HKV, HD).unbind(2)
        a = F.scaled_dot_product_attention(
            q, k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        x = x + self.o(a.transpose(1, 2).reshape(b, s, D))
        g, u = self.up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Model().to(device=device, dtype=dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
