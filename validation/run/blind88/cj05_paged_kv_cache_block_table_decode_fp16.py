"""A hand-written decoder-only LM (16 layers, 2,048 wide, 16 heads, RoPE, SwiGLU, 32,000 vocab) in
fp16 serving 8 requests of different prompt lengths with a paged KV cache as vLLM-style servers
keep it: one preallocated pool of 16-token blocks per layer, a block table per request, prefill
writes whole blocks with index_copy_, each decode step appends one slot and gathers the request's
blocks for attention by the block table; greedy decoding of 64 tokens, then a second wave of 12
shorter requests reusing the freed blocks; 2 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8805)
if SMALL:
    D, NL, NH, FF, V, BLOCK, POOL = 32, 2, 4, 64, 100, 4, 128
    WAVES = ([20, 9, 13], [7, 5, 11, 3])
    NEW = 5
else:
    D, NL, NH, FF, V, BLOCK, POOL = 2048, 16, 16, 5632, 32000, 16, 2048
    WAVES = (
        [1800, 950, 1200, 400, 1500, 700, 1024, 300],
        [128, 512, 260, 90, 333, 600, 45, 210, 800, 77, 150, 480],
    )
    NEW = 64
HD = D // NH
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(NL))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)


model = LM().to(device=device, dtype=dtype).eval()
inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=device).float() / HD))


def rope(x, pos):
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype)[:, None], ang.sin().to(x.dtype)[:, None]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


# the pool: (layers, 2, blocks * BLOCK, heads, head_dim), slots addressed block * BLOCK + offset
pool = torch.empty(NL, 2, POOL * BLOCK, NH, HD, device=device, dtype=dtype)
free = list(range(POOL))
if device == "cuda":
    print(f"model+pool {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def slots_of(table, start, n):
    pos = torch.arange(start, start + n, device=device)
    return table[pos // BLOCK] * BLOCK + pos % BLOCK


def forward(ids, table, start):
    """ids: (n,) tokens at positions start..start+n of one request; returns last logits."""
    n = ids.shape[0]
    pos = torch.arange(start, start + n, device=device)
    write = slots_of(table, start, n)
    read = slots_of(table, 0, start + n)
    x = model.emb(ids)
    for i, layer in enumerate(model.layers):
        h = layer.n1(x)
        q, k, v = layer.qkv(h).view(n, 3, NH, HD).unbind(1)
        q, k = rope(q, pos), rope(k, pos)
        pool[i, 0].index_copy_(0, write, k)
        pool[i, 1].index_copy_(0, write, v)
        keys = pool[i, 0].index_select(0, read).transpose(0, 1)
        vals = pool[i, 1].index_select(0, read).transpose(0, 1)
        att = F.scaled_dot_product_attention(q.transpose(0, 1), keys, vals, is_causal=n > 1 and start == 0)
        x = x + layer.o(att.transpose(0, 1).reshape(n, D))
        gate, up = layer.gate_up(layer.n2(x)).chunk(2, -1)
        x = x + layer.down(F.silu(gate) * up)
    return model.head(model.norm(x[-1:]))


for wave in WAVES:
    tables, last, outs = [], [], []
    with torch.inference_mode():
        for L in wave:
            need = math.ceil((L + NEW) / BLOCK)
            blocks, free[:] = free[:need], free[need:]
            table = torch.tensor(blocks, device=device)
            ids = torch.randint(0, V, (L,), device=device)
            last.append(forward(ids, table, 0).argmax(-1))
            tables.append((table, blocks, L))
        for t in range(NEW):
            for r, (table, _, L) in enumerate(tables):
                last[r] = forward(last[r], table, L + t).argmax(-1)
                outs.append(last[r])
    for _, blocks, _ in tables:
        free.extend(blocks)
    if device == "cuda":
        print(
            f"wave {len(wave)} tokens {len(outs)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del tables, last, outs
