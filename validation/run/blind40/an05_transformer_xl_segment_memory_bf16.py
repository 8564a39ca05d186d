"""Segment-level recurrence as Transformer-XL trains long documents: each layer attends over its
cached (detached) hidden states of the previous 512-token segment plus the current one through
SDPA with an explicit causal band mask, the memory replaced after each segment, bf16 weights,
AdamW (foreach), 1024 wide, 6 layers, batch 8, 4 segments; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4005)
V, D, L, H, B, S = (64, 32, 2, 4, 2, 8) if SMALL else (32000, 1024, 6, 16, 8, 512)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(D)
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.o = nn.Linear(D, D)
        self.n2 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, mem, mask):
        b, s, _ = x.shape
        h = self.n1(x)
        ctx = torch.cat([mem, h], dim=1)
        q = self.q(h).view(b, s, H, D // H).transpose(1, 2)
        k, v = self.kv(ctx).view(b, ctx.shape[1], 2, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, D))
        return x + self.ff(self.n2(x)), h.detach()


class XL(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.head = nn.Linear(D, V)

    def forward(self, ids, mems, mask):
        x = self.emb(ids)
        new = []
        for layer, mem in zip(self.layers, mems, strict=True):
            x, m = layer(x, mem, mask)
            new.append(m)
        return self.head(x), new


device = "cuda" if torch.cuda.is_available() else "cpu"
model = XL().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
i = torch.arange(S, device=device)[:, None]
j = torch.arange(2 * S, device=device)[None, :]
mask = (j <= i + S) & (j > i)
mems = [torch.zeros(B, S, D, device=device, dtype=torch.bfloat16) for _ in range(L)]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for seg in range(4):
    ids = torch.randint(0, V, (B, S + 1), device=device)
    logits, mems = model(ids[:, :-1], mems, mask)
    loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, logits, loss
    if device == "cuda":
        print(
            f"segment {seg} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
