"""A hand-written decoder with grouped-query attention through SDPA's own enable_gqa=True (32 query
heads over 8 key/value heads), causal, attention dropout 0.1 in training, RMSNorm, SwiGLU, bf16
weights, AdamW (foreach), 2048 wide, 8 layers, batch 4 at 2048 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3903)
V, D, L, HQ, HKV, B, S = (64, 32, 2, 4, 2, 2, 16) if SMALL else (32000, 2048, 8, 32, 8, 4, 2048)
HD = D // HQ


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.q = nn.Linear(D, HQ * HD, bias=False)
        self.kv = nn.Linear(D, 2 * HKV * HD, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = nn.RMSNorm(D)
        self.gate_up = nn.Linear(D, 2 * 4 * D, bias=False)
        self.down = nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, HQ, HD).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2, HKV, HD).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, D))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class LM(nn.Module):
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


device = "cuda" if torch.cuda.is_available() else "cpu"
model = LM().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
