"""A causal linear-attention language model written with cumulative sums (elu+1 feature maps, the key-value
outer products cumsum'd along time, a normaliser from the keys' cumsum), gated MLPs, fp32, Adam, batch 4 x
1024, 512 wide, 6 layers, 64-dim heads, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
WIDTH, LAYERS, HEAD, VOCAB = (32, 1, 16, 100) if SMALL else (512, 6, 64, 16000)
BATCH, SEQ = (2, 16) if SMALL else (4, 1024)
torch.manual_seed(1104)
device = "cuda" if torch.cuda.is_available() else "cpu"


class LinearAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, c // HEAD, HEAD).unbind(2)
        q, k = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.einsum("bthd,bthe->bthde", k, v).cumsum(dim=1)
        num = torch.einsum("bthd,bthde->bthe", q, kv)
        den = torch.einsum("bthd,bthd->bth", q, k.cumsum(dim=1)).unsqueeze(-1)
        return self.out((num / (den + 1e-6)).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = LinearAttention()
        self.gate = nn.Linear(WIDTH, 2 * 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        a, g = self.gate(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(a * F.silu(g))


model = nn.Sequential(nn.Embedding(VOCAB, WIDTH), *[Block() for _ in range(LAYERS)], nn.LayerNorm(WIDTH),
                      nn.Linear(WIDTH, VOCAB)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
