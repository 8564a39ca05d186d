"""gpt-fast-style int4 weight-only inference of a hand-written Llama (6 layers of width 3072, 24 query
heads and 8 key/value heads of 128, SwiGLU 8192, vocabulary 32768), built in bf16 on the GPU. Each
decoder projection is quantized asymmetrically per group of 128 along k to 4 bits (bf16 scales and
zeros, gpt-fast's `group_quantize_tensor`), packed two to a byte and converted by
`torch._convert_weight_to_int4pack(.., 8)` (8 inner k-tiles), then run by `torch._weight_int4pack_mm`;
the output head stays bf16. The static KV cache is float8_e4m3fn with fixed per-head scales: new
keys and values are divided by the scale and cast, then written by `index_copy_` through uint8 views
of the cache and of the new values (as vLLM keeps fp8 caches), and the whole cache is
dequantized to bf16 for SDPA at every call. Prefill of 2 prompts of 1024 then 64 greedy decode steps;
then 16 prompts of 128 and 32 steps. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(25602)
V, D, L, H, KVH, FF, GROUP = 32768, 3072, 6, 24, 8, 8192, 128
HD = D // H


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


class Fp8KVCache(nn.Module):
    def __init__(self, b, s):
        super().__init__()
        shape = (b, KVH, s, HD)
        self.register_buffer("k", torch.zeros(shape, dtype=torch.float8_e4m3fn, device="cuda"))
        self.register_buffer("v", torch.zeros(shape, dtype=torch.float8_e4m3fn, device="cuda"))
        self.register_buffer("k_scale", torch.full((1, KVH, 1, 1), 0.05, device="cuda"))
        self.register_buffer("v_scale", torch.full((1, KVH, 1, 1), 0.02, device="cuda"))

    def update(self, pos, k, v):
        # index_copy_ has no float8 kernel on CUDA: the cache is written through uint8 views
        k8 = (k / self.k_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        v8 = (v / self.v_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        self.k.view(torch.uint8).index_copy_(2, pos, k8.view(torch.uint8))
        self.v.view(torch.uint8).index_copy_(2, pos, v8.view(torch.uint8))
        k_all = (self.k.to(torch.bfloat16) * self.k_scale).to(torch.bfloat16)
        v_all = (self.v.to(torch.bfloat16) * self.v_scale).to(torch.bfloat16)
        return k_all, v_all


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.wq = nn.Linear(D, D, bias=False)
        self.wk = nn.Linear(D, KVH * HD, bias=False)
        self.wv = nn.Linear(D, KVH * HD, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)
        self.cache = None

    def forward(self, x, cos, sin, mask, pos):
        b, t, _ = x.shape
        h = self.n1(x)
        q = rope(self.wq(h).view(b, t, H, HD).transpose(1, 2), cos, sin)
        k = rope(self.wk(h).view(b, t, KVH, HD).transpose(1, 2), cos, sin)
        v = self.wv(h).view(b, t, KVH, HD).transpose(1, 2)
        k, v = self.cache.update(pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, D))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm(D)
        self.output = nn.Linear(D, V, bias=False)

    def setup_caches(self, b, s):
        for layer in self.layers:
            layer.cache = None
        for layer in self.layers:
            layer.cache = Fp8KVCache(b, s)
        inv = 1.0 / (500000 ** (torch.arange(0, HD, 2, device="cuda").float() / HD))
        ang = torch.outer(torch.arange(s, device="cuda").float(), inv)
        ang = torch.cat([ang, ang], -1)
        self.cos, self.sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        self.causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device="cuda"))

    def forward(self, idx, pos):
        mask = self.causal[None, None, pos]
        cos, sin = self.cos[pos], self.sin[pos]
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, pos)
        return self.output(self.norm(x[:, -1:]))


class WeightOnlyInt4Linear(nn.Module):
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
        self.register_buffer("weight", torch._convert_weight_to_int4pack(packed, 8))
        sz = torch.cat([scales.reshape(n, k // GROUP, 1), zeros.reshape(n, k // GROUP, 1)], 2)
        self.register_buffer("scales_and_zeros", sz.transpose(0, 1).contiguous().to(torch.bfloat16))
        self.n = n

    def forward(self, x):
        shape = x.shape
        y = torch._weight_int4pack_mm(
            x.reshape(-1, shape[-1]).contiguous(), self.weight, GROUP, self.scales_and_zeros
        )
        return y.reshape(*shape[:-1], self.n)


@torch.inference_mode()
def generate(model, b, t, steps):
    model.setup_caches(b, t + steps)
    prompt = torch.randint(0, V, (b, t), device="cuda")
    nxt = model(prompt, torch.arange(t, device="cuda"))[:, -1].argmax(-1, keepdim=True)
    report(f"prefill {b}x{t}")
    out = [nxt]
    pos = torch.tensor([t], device="cuda")
    for _ in range(steps - 1):
        nxt = model(nxt, pos)[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
        pos += 1
    return torch.cat(out, 1)


with torch.device("cuda"):
    model = Transformer().to(torch.bfloat16).eval()
model.requires_grad_(False)
report("bf16 model")
for layer in model.layers:
    for name in ("wq", "wk", "wv", "wo", "w1", "w3", "w2"):
        setattr(layer, name, WeightOnlyInt4Linear(getattr(layer, name)))
report("int4 weights")
gen = generate(model, 2, 1024, 64)
report(f"decode {tuple(gen.shape)}")
gen = generate(model, 16, 128, 32)
report(f"decode {tuple(gen.shape)}")
