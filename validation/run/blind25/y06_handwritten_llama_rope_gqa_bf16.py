"""A hand-written Llama (RMSNorm, rotary embeddings from a cos/sin cache, grouped-query attention with
repeat_interleave of the keys and values, SwiGLU MLP, SDPA causal), 1024 wide, 8 layers, 16 heads,
4 key-value heads, 32,000 vocabulary, bf16 weights, AdamW (foreach default), batch 4 x 1024,
3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2506)
B, T, W, H, KV, DEPTH, V = (2, 16, 32, 4, 2, 1, 300) if SMALL else (4, 1024, 1024, 16, 4, 8, 32000)
D = W // H
device = "cuda" if torch.cuda.is_available() else "cpu"


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(W))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


def rotate(x, cos, sin):
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.q = nn.Linear(W, H * D, bias=False)
        self.kv = nn.Linear(W, 2 * KV * D, bias=False)
        self.o = nn.Linear(H * D, W, bias=False)
        self.gate_up = nn.Linear(W, 2 * 2816, bias=False)
        self.down = nn.Linear(2816, W, bias=False)

    def forward(self, x, cos, sin):
        h = self.n1(x)
        q = self.q(h).view(B, T, H, D).transpose(1, 2)
        k, v = self.kv(h).view(B, T, 2, KV, D).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, W))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, W)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = RMSNorm()
        self.head = nn.Linear(W, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
        freqs = torch.outer(torch.arange(T).float(), inv)
        angles = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        x = self.emb(ids)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


model = Llama().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, T), device=device)
    loss = F.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
