"""A Llama-style decoder written by hand (16 layers of 2,048, 16 query and 4 key/value heads, SwiGLU
MLP 5,632, vocabulary 32,000; 1.2B parameters) served the way small inference engines do it in pure
PyTorch: every projection of the layers is quantized asymmetrically to 4 bits in groups of 32 along
k and packed by `torch._convert_weight_to_int4pack(.., 4)` (4 inner k-tiles) for
`torch._weight_int4pack_mm`; the output head is int8 per channel for `torch._weight_int8pack_mm`.
The bf16 model is quantized one layer at a time and its bf16 weights freed.

The KV cache is paged by hand: one pool of blocks of 16 tokens per layer (bf16), a free list and a
block table per sequence; a new token's key and value are written with `index_put_` at (block,
offset), and attention gathers each sequence's blocks through its padded block table (`pool[table]`),
masks past each sequence's length and calls SDPA with `enable_gqa=True`. Continuous batching: 8 slots,
sequences with fixed prompt lengths and fixed numbers of new tokens are admitted (a prefill each, its
blocks allocated) as others finish (their blocks back on the free list), greedy.

Phases: 0 the bf16 model quantized to int4/int8 (bf16 weights freed), the page pools; 1 the first 8
prefills; 2 continuous-batching decode until 24 sequences are done; 3 a second run with 32 slots of
shorter requests. Seeded."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(354_03)
device = "cuda"
if SMALL:
    V, D, L, H, KVH, FF, NBLK = 512, 256, 2, 4, 2, 512, 256
else:
    V, D, L, H, KVH, FF, NBLK = 32000, 2048, 16, 16, 4, 5632, 2048
HD, BS, GROUP, TILES = D // H, 16, 32, 4


def report(tag):
    print(
        f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
        f"memory_allocated {torch.cuda.memory_allocated()} "
        f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


class Int4Linear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach()
        n, k = w.shape
        g = w.float().reshape(-1, GROUP)
        lo, hi = g.amin(1, keepdim=True), g.amax(1, keepdim=True)
        scales = (hi - lo).clamp(min=1e-6) / 15
        zeros = lo + scales * 8
        q = (g - lo).div(scales).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        packed = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        self.register_buffer("weight", torch._convert_weight_to_int4pack(packed, TILES))
        sz = torch.stack([scales.reshape(n, k // GROUP), zeros.reshape(n, k // GROUP)], 2)
        self.register_buffer("scales_and_zeros", sz.transpose(0, 1).contiguous().to(torch.bfloat16))
        self.n = n

    def forward(self, x):
        shape = x.shape
        y = torch._weight_int4pack_mm(
            x.reshape(-1, shape[-1]).contiguous(), self.weight, GROUP, self.scales_and_zeros
        )
        return y.reshape(*shape[:-1], self.n)


class Int8Head(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        scale = w.abs().amax(1).clamp(min=1e-8) / 127
        self.register_buffer("weight", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale.to(torch.bfloat16))

    def forward(self, x):
        return torch._weight_int8pack_mm(x.contiguous(), self.weight, self.scales)


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(D), RMSNorm(D)
        self.wq, self.wk, self.wv = (
            nn.Linear(D, D, bias=False),
            nn.Linear(D, KVH * HD, bias=False),
            nn.Linear(D, KVH * HD, bias=False),
        )
        self.wo = nn.Linear(D, D, bias=False)
        self.w1, self.w3, self.w2 = (
            nn.Linear(D, FF, bias=False),
            nn.Linear(D, FF, bias=False),
            nn.Linear(FF, D, bias=False),
        )
        self.k_pool = self.v_pool = None

    def forward(self, x, cos, sin, blocks, offsets, tables, lengths, causal):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = rope(self.wq(h).view(b, t, H, HD), cos, sin)
        k = rope(self.wk(h).view(b, t, KVH, HD), cos, sin)
        v = self.wv(h).view(b, t, KVH, HD)
        self.k_pool.index_put_((blocks, offsets), k.reshape(-1, KVH, HD))
        self.v_pool.index_put_((blocks, offsets), v.reshape(-1, KVH, HD))
        if causal:  # prefill of one sequence: its own keys, causal
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            )
        else:  # decode: gather every sequence's pages
            kc = self.k_pool[tables].reshape(b, -1, KVH, HD).transpose(1, 2)
            vc = self.v_pool[tables].reshape(b, -1, KVH, HD).transpose(1, 2)
            mask = torch.arange(kc.shape[2], device=device)[None, None, None] < lengths[:, None, None, None]
            a = F.scaled_dot_product_attention(q.transpose(1, 2), kc, vc, attn_mask=mask, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = RMSNorm(D)
        self.output = nn.Linear(D, V, bias=False)
        inv = 1.0 / (500000 ** (torch.arange(0, HD, 2).float() / HD))
        ang = torch.outer(torch.arange(4096).float(), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().to(torch.bfloat16), persistent=False)
        self.register_buffer("sin", ang.sin().to(torch.bfloat16), persistent=False)

    def forward(self, idx, pos, blocks, offsets, tables=None, lengths=None, causal=False):
        cos, sin = self.cos[pos].unsqueeze(-2), self.sin[pos].unsqueeze(-2)
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, blocks, offsets, tables, lengths, causal)
        return self.output(self.norm(x[:, -1]))


with torch.device(device):
    model = Decoder().to(torch.bfloat16).eval()
model.requires_grad_(False)
with torch.no_grad():
    for layer in model.layers:
        for name in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            setattr(layer, name, Int4Linear(getattr(layer, name)))
    model.output = Int8Head(model.output)
    for layer in model.layers:
        layer.k_pool = torch.zeros(NBLK, BS, KVH, HD, dtype=torch.bfloat16, device=device)
        layer.v_pool = torch.zeros(NBLK, BS, KVH, HD, dtype=torch.bfloat16, device=device)
torch.cuda.empty_cache()
report("int4 group-32 layers, int8 head, paged KV pools")


class Engine:
    def __init__(self, slots, requests):
        self.slots, self.queue = slots, list(requests)
        self.free = list(range(NBLK))
        self.active, self.done = [], 0

    def blocks_for(self, seq, n):
        while len(seq["blocks"]) * BS < n:
            seq["blocks"].append(self.free.pop())

    @torch.inference_mode()
    def admit(self):
        while self.queue and len(self.active) < self.slots:
            plen, new = self.queue.pop(0)
            seq = {"len": plen, "left": new, "blocks": []}
            self.blocks_for(seq, plen)
            pos = torch.arange(plen, device=device)
            blk = torch.tensor(seq["blocks"], device=device)[pos // BS]
            prompt = torch.randint(0, V, (1, plen), device=device)
            logits = model(prompt, pos[None], blk, pos % BS, causal=True)
            seq["next"] = logits.argmax(-1)
            self.active.append(seq)

    @torch.inference_mode()
    def step(self):
        for s in self.active:
            self.blocks_for(s, s["len"] + 1)
        width = max(len(s["blocks"]) for s in self.active)
        tables = torch.tensor(
            [s["blocks"] + [0] * (width - len(s["blocks"])) for s in self.active], device=device
        )
        pos = torch.tensor([s["len"] for s in self.active], device=device)
        blk = tables[torch.arange(len(self.active), device=device), pos // BS]
        idx = torch.cat([s["next"] for s in self.active])[:, None]
        logits = model(idx, pos[:, None], blk, pos % BS, tables, pos + 1)
        nxt = logits.argmax(-1)
        keep = []
        for i, s in enumerate(self.active):
            s["next"], s["len"], s["left"] = nxt[i : i + 1], s["len"] + 1, s["left"] - 1
            if s["left"] == 0:
                self.free.extend(s["blocks"])
                self.done += 1
            else:
                keep.append(s)
        self.active = keep

    def run(self, until):
        while self.done < until:
            self.step()
            self.admit()


requests = [(128 + (i * 211) % 896, 32 + (i * 53) % 97) for i in range(24)]
engine = Engine(8, requests)
engine.admit()
report("first 8 prefills into paged blocks")

engine.run(24)
print(f"24 sequences done, {len(engine.free)} free blocks")
report("continuous batching, 8 slots, until 24 done")

engine = Engine(32, [(64 + (i * 97) % 384, 16 + (i * 29) % 48) for i in range(64)])
engine.admit()
engine.run(64)
print(f"64 sequences done, {len(engine.free)} free blocks")
report("32 slots of shorter requests, 64 done")
