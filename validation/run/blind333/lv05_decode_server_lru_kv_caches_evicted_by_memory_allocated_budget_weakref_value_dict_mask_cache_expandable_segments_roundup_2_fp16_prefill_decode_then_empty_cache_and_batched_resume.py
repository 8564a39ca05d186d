"""A single-GPU decode server for a hand-written fp16 decoder (12 layers, 2048 wide, rotary-free,
learned positions): each request gets a preallocated KV cache (`torch.empty` per layer, 4,096
positions), kept in an `OrderedDict` LRU by request id; before admitting a request the server evicts
least-recently-used caches until `torch.cuda.memory_allocated()` plus the new cache's bytes fits a
budget of the weights plus 2.5 GiB (memory-figure-driven admission). Additive causal masks are cached
per prompt length in a `weakref.WeakValueDictionary`, so a mask lives only while a prefill holds it.
The allocator is configured before torch is imported with
`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,roundup_power2_divisions:2"`.

Phases: 0 weights loaded; 1 six requests admitted (prefill, 8 greedy tokens each), evicting as the
budget demands; 2 three earlier requests continued (LRU touch) and four long new ones admitted;
3 `empty_cache()`, the surviving caches' requests decoded together as one padded batch (caches
gathered with `torch.stack`), 8 tokens."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,roundup_power2_divisions:2"

import math
import weakref
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3335)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
if SMALL:
    V, D, H, L, MAXLEN, GIB = 512, 64, 4, 2, 128, 2**20
    WAVE1 = [40, 24, 64, 16, 48, 32]
    WAVE2 = [96, 100, 80, 112]
else:
    V, D, H, L, MAXLEN, GIB = 32000, 2048, 16, 12, 4096, 2**30
    WAVE1 = [1500, 700, 2900, 400, 2100, 1200]
    WAVE2 = [3600, 3900, 3100, 3800]
HD = D // H
NEW = 8


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.up, self.down = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def forward(self, x, cache, pos, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, HD).permute(2, 0, 3, 1, 4)
        cache[0][:, :, pos : pos + t] = k
        cache[1][:, :, pos : pos + t] = v
        keys, values = cache[0][:, :, : pos + t], cache[1][:, :, : pos + t]
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(V, D), nn.Embedding(MAXLEN, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, caches, pos, mask=None):
        t = ids.shape[1]
        x = self.emb(ids) + self.pos(torch.arange(pos, pos + t, device=ids.device))
        for layer, cache in zip(self.layers, caches, strict=False):
            x = layer(x, cache, pos, mask)
        return self.head(self.norm(x[:, -1]))


masks = weakref.WeakValueDictionary()


def causal_mask(t):
    m = masks.get(t)
    if m is None:
        m = torch.full((t, t), -math.inf, device=device, dtype=dtype).triu_(1)
        masks[t] = m
    return m


def cache_bytes(batch=1):
    return L * 2 * batch * H * MAXLEN * HD * torch.finfo(dtype).bits // 8


def new_cache():
    return [
        (
            torch.empty(1, H, MAXLEN, HD, device=device, dtype=dtype),
            torch.empty(1, H, MAXLEN, HD, device=device, dtype=dtype),
        )
        for _ in range(L)
    ]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def allocated():
    return torch.cuda.memory_allocated() if device == "cuda" else 0


model = Decoder().to(device=device, dtype=dtype).eval()
budget = allocated() + int(2.5 * GIB)
lru = OrderedDict()  # request id -> [cache, position, last token]
report("phase0 weights")


@torch.no_grad()
def admit(rid, length):
    while lru and allocated() + cache_bytes() > budget:
        evicted, _ = lru.popitem(last=False)
        print("evict", evicted)
    cache = new_cache()
    ids = torch.randint(0, V, (1, length), device=device)
    nxt = model(ids, cache, 0, causal_mask(length)).argmax(-1, keepdim=True)
    lru[rid] = [cache, length, nxt]
    decode(rid, NEW)


@torch.no_grad()
def decode(rid, n):
    entry = lru[rid]
    lru.move_to_end(rid)
    cache, pos, nxt = entry
    for _ in range(n):
        nxt = model(nxt, cache, pos).argmax(-1, keepdim=True)
        pos += 1
    entry[1], entry[2] = pos, nxt


for i, length in enumerate(WAVE1):
    admit(i, length)
print("live", list(lru))
report("phase1 first wave")

for rid in (1, 3, 5):
    if rid in lru:
        decode(rid, NEW)
for i, length in enumerate(WAVE2):
    admit(10 + i, length)
print("live", list(lru), "masks", len(masks))
report("phase2 second wave")

if device == "cuda":
    torch.cuda.empty_cache()
with torch.no_grad():
    rids = list(lru)
    pos = max(lru[r][1] for r in rids)
    caches = [
        (
            torch.cat([lru[r][0][i][0] for r in rids]),
            torch.cat([lru[r][0][i][1] for r in rids]),
        )
        for i in range(L)
    ]
    nxt = torch.cat([lru[r][2] for r in rids])
    for _ in range(NEW):
        nxt = model(nxt, caches, pos).argmax(-1, keepdim=True)
        pos += 1
    print("batched", len(rids), nxt.shape)
del caches, nxt
report("phase3 batched resume")
