"""Hand-written decoder-only transformer with a manual KV cache: a prefill, then greedy decoding one token
at a time, the cache grown with torch.cat every step (fp16 weights, torch.no_grad)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, D, HEADS, VOCAB, B, PROMPT, NEW = (
    (2, 64, 4, 256, 2, 8, 4) if os.environ.get("SMOKE") else (8, 1024, 16, 32000, 8, 256, 64)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
torch.manual_seed(0)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)

    def forward(self, x, cache):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        return self.out(y.transpose(1, 2).reshape(b, t, D)), (k, v)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, cache):
        a, cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.mlp(self.ln2(x)), cache


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(PROMPT + NEW, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids, start, caches):
        pos = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        new_caches = []
        for layer, cache in zip(self.layers, caches, strict=True):
            x, cache = layer(x, cache)
            new_caches.append(cache)
        return self.head(self.ln(x[:, -1:])), new_caches


model = Decoder().to(device=device, dtype=dtype).eval()
prompt = torch.randint(0, VOCAB, (B, PROMPT), device=device)
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    logits, caches = model(prompt, 0, [None] * LAYERS)
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    tokens = [logits.argmax(-1)]
    for i in range(NEW - 1):
        logits, caches = model(tokens[-1], PROMPT + i, caches)
        tokens.append(logits.argmax(-1))
    out = torch.cat([prompt, *tokens], dim=1)
if device == "cuda":
    print(f"decode peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
print(out.shape)
