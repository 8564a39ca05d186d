"""A hand-written decoder with grouped-query attention through `F.scaled_dot_product_attention`:
32 query heads over 8 key/value heads (`enable_gqa=True`), a boolean mask that is causal and hides
each sequence's right padding, RMSNorm, SwiGLU, 8 layers of width 2048, fp16 weights with a
GradScaler-free loss scale, AdamW (foreach), batch 4 of 2048 tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4805)
D, HQ, HKV, LAYERS, B, T, V = (64, 4, 2, 2, 2, 32, 100) if SMALL else (2048, 32, 8, 8, 4, 2048, 32000)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q = nn.Linear(D, D, bias=False)
        self.kv = nn.Linear(D, 2 * D * HKV // HQ, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.up = nn.Linear(D, 2 * 4 * D, bias=False)
        self.down = nn.Linear(4 * D, D, bias=False)

    def forward(self, x, mask):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, HQ, -1).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, HKV, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        g, u = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


emb = nn.Embedding(V, D)
blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
head = nn.Linear(D, V, bias=False)
model = nn.ModuleDict(dict(emb=emb, blocks=blocks, head=head)).to(device, dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
lengths = torch.tensor([T, T - T // 4, T // 2, T - 7][:B])
for step in range(2):
    ids = torch.randint(0, V, (B, T), device=device)
    keep = torch.arange(T)[None, :] < lengths[:, None]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = (causal[None] & keep[:, None, :]).unsqueeze(1).to(device)
    x = model["emb"](ids)
    for block in model["blocks"]:
        x = block(x, mask)
    logits = model["head"](x).float()
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()) * 1024.0
    loss.backward()
    for p in model.parameters():
        p.grad.div_(1024.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, mask, x, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
