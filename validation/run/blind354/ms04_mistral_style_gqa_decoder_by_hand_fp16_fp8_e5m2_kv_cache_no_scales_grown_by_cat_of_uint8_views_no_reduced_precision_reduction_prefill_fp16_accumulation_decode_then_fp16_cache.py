"""A Mistral-style decoder written by hand (16 layers of 3,072, 24 query and 8 key/value heads of 128,
SwiGLU MLP 8,192, vocabulary 32,000; 1.8B parameters) in pure fp16, decoding with a KV cache stored in
float8_e5m2 without scales (the fp8_e5m2 cache of serving engines: a plain cast in, a plain cast out).
Every layer's cache grows by one token per step with `torch.cat` of uint8 views of the fp8 tensors
(the bytes are appended, then viewed back as float8_e5m2), and attention dequantizes the whole cache
to fp16 each step before SDPA with `enable_gqa=True`. The cuBLAS flags are set by hand as a user
comparing precision does: the prefill with `allow_fp16_reduced_precision_reduction = False`, then the
decode with `allow_fp16_accumulation = True` (fp16 accumulation in cuBLAS), then both back to their
defaults with an fp16 cache for comparison.

Phases: 0 the fp16 model; 1 prefill of 16 x 1,024 without reduced-precision reductions; 2 64 greedy
steps with the fp8 cache and fp16 accumulation; 3 prefill of 32 x 512 and 64 steps with the fp8 cache;
4 the same batch with an fp16 cache (flags at their defaults). Seeded."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(354_04)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, L, H, KVH, FF = 512, 256, 2, 4, 2, 512
    B, T, STEPS = 2, 64, 8
else:
    V, D, L, H, KVH, FF = 32000, 3072, 16, 24, 8, 8192
    B, T, STEPS = 16, 1024, 64
HD = D // H
FP8 = torch.float8_e5m2


def report(tag):
    if cuda:
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.q, self.kv, self.o = (
            nn.Linear(D, D, bias=False),
            nn.Linear(D, 2 * KVH * HD, bias=False),
            nn.Linear(D, D, bias=False),
        )
        self.gate_up, self.down = nn.Linear(D, 2 * FF, bias=False), nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin, cache, fp8):
        b, t, _ = x.shape
        h = self.n1(x)
        q = rope(self.q(h).view(b, t, H, HD).transpose(1, 2), cos, sin)
        k, v = self.kv(h).view(b, t, 2, KVH, HD).permute(2, 0, 3, 1, 4)
        k = rope(k, cos, sin)
        if fp8:
            k8, v8 = k.to(FP8).view(torch.uint8), v.to(FP8).view(torch.uint8)
            if cache:
                k8, v8 = (
                    torch.cat([cache[0].view(torch.uint8), k8], 2),
                    torch.cat([cache[1].view(torch.uint8), v8], 2),
                )
            cache[:] = [k8.view(FP8), v8.view(FP8)]
            k_all, v_all = cache[0].to(torch.float16), cache[1].to(torch.float16)
        else:
            if cache:
                k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            cache[:] = [k, v]
            k_all, v_all = k, v
        a = F.scaled_dot_product_attention(q, k_all, v_all, is_causal=t > 1, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        gate, up = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        inv = 1.0 / (1_000_000 ** (torch.arange(0, HD, 2).float() / HD))
        ang = torch.outer(torch.arange(4096).float(), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().half(), persistent=False)
        self.register_buffer("sin", ang.sin().half(), persistent=False)

    def forward(self, idx, start, caches, fp8):
        t = idx.shape[1]
        cos, sin = self.cos[start : start + t], self.sin[start : start + t]
        x = self.tok(idx)
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, cos, sin, cache, fp8)
        return self.head(self.norm(x[:, -1]))


with torch.device(device):
    model = Decoder().half().eval()
model.requires_grad_(False)
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters, fp16")
report("fp16 decoder")


@torch.inference_mode()
def prefill(b, t, fp8):
    caches = [[] for _ in range(L)]
    prompt = torch.randint(0, V, (b, t), device=device)
    nxt = model(prompt, 0, caches, fp8).argmax(-1, keepdim=True)
    return caches, nxt


@torch.inference_mode()
def decode(caches, nxt, start, steps, fp8):
    out = [nxt]
    for i in range(steps):
        nxt = model(nxt, start + i, caches, fp8).argmax(-1, keepdim=True)
        out.append(nxt)
    return torch.cat(out, 1)


torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
caches, nxt = prefill(B, T, fp8=True)
report("prefill 16 x 1024, fp8 e5m2 cache, no reduced-precision reduction")

torch.backends.cuda.matmul.allow_fp16_accumulation = True
tokens = decode(caches, nxt, T, STEPS, fp8=True)
print(f"cache per layer {caches[0][0].numel() * 2 / 2**20:.0f} MiB, tokens {tuple(tokens.shape)}")
del caches, nxt, tokens
report("64 steps, fp8 cache, fp16 accumulation")

caches, nxt = prefill(2 * B, T // 2, fp8=True)
tokens = decode(caches, nxt, T // 2, STEPS, fp8=True)
del caches, nxt, tokens
report("32 x 512 prefill and 64 steps, fp8 cache")

torch.backends.cuda.matmul.allow_fp16_accumulation = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
caches, nxt = prefill(2 * B, T // 2, fp8=False)
tokens = decode(caches, nxt, T // 2, STEPS, fp8=False)
print(f"fp16 cache per layer {caches[0][0].numel() * 4 / 2**20:.0f} MiB")
del caches, nxt, tokens
report("32 x 512 prefill and 64 steps, fp16 cache")
