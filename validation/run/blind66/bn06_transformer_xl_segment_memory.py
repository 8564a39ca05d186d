"""Segment-level recurrence as Transformer-XL trains: a decoder written by hand whose every layer
attends over the previous segment's hidden states (detached, kept as memories between steps) and the
current segment, a causal mask offset by the memory length, attention by
F.scaled_dot_product_attention with that boolean mask; 768 wide, 12 layers, memories of 512, 4
consecutive segments of 512 tokens at batch 8, bf16 autocast, AdamW; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6606)
V, D, H, NL, B, SEG, MEM = (100, 32, 2, 2, 2, 8, 8) if SMALL else (32000, 768, 12, 12, 8, 512, 512)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.kv, self.o = nn.Linear(D, D), nn.Linear(D, 2 * D), nn.Linear(D, D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, mem, mask):
        b, n, _ = x.shape
        h = self.n1(x)
        ctx = torch.cat([mem, h], dim=1) if mem is not None else h
        q = self.q(h).view(b, n, H, -1).transpose(1, 2)
        k, v = self.kv(ctx).view(b, ctx.shape[1], 2, H, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, -ctx.shape[1] :])
        x = x + self.o(a.transpose(1, 2).reshape(b, n, D))
        return x + self.ff(self.n2(x)), h


device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(V, D).to(device)
layers = nn.ModuleList(Layer() for _ in range(NL)).to(device)
head = nn.Linear(D, V).to(device)
params = [*emb.parameters(), *layers.parameters(), *head.parameters()]
optimizer = torch.optim.AdamW(params, lr=2.5e-4)
mask = torch.ones(SEG, MEM + SEG, dtype=torch.bool, device=device).tril(MEM)
mems = [None] * NL
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    ids = torch.randint(0, V, (B, SEG + 1), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        x, new = emb(ids[:, :-1]), []
        for layer, mem in zip(layers, mems, strict=True):
            x, h = layer(x, mem, mask)
            new.append(h[:, -MEM:].detach())
        logits = head(x)
    loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    mems = new
    del ids, x, h, new, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
