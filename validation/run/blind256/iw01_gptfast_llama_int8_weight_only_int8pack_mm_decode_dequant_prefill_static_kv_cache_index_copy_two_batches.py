"""gpt-fast-style int8 weight-only inference of a hand-written Llama (8 layers of width 2048, GQA with
16 query and 4 key/value heads, SwiGLU 5632, vocabulary 32000, RoPE), built in bf16 on the GPU. Every
projection and the output head are quantized per output row to int8 one layer at a time (the bf16
weight freed as its int8 copy and bf16 scales are made). Forward: with more than 16 tokens
(prefill) the weight is dequantized for `F.linear` and the result scaled (gpt-fast's
`WeightOnlyInt8Linear`), with 16 or fewer (decode) `torch._weight_int8pack_mm`. A static bf16 KV
cache per layer written with `index_copy_` at `input_pos`, attention by SDPA over the whole cache with
a boolean causal mask row. Prefill of 4 prompts of 512 tokens then 48 greedy decode steps; then the
caches are rebuilt for 8 prompts of 256 and 32 steps. 5 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(25601)
V, D, L, H, KVH, FF = 32000, 2048, 8, 16, 4, 5632
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


class KVCache(nn.Module):
    def __init__(self, b, s):
        super().__init__()
        shape = (b, KVH, s, HD)
        self.register_buffer("k", torch.zeros(shape, dtype=torch.bfloat16, device="cuda"))
        self.register_buffer("v", torch.zeros(shape, dtype=torch.bfloat16, device="cuda"))

    def update(self, pos, k, v):
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wqkv = nn.Linear(D, (H + 2 * KVH) * HD, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.cache = None

    def forward(self, x, freqs, mask, pos):
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).split([D, KVH * HD, KVH * HD], -1)
        q = rope(q.view(b, t, H, HD), freqs).transpose(1, 2)
        k = rope(k.view(b, t, KVH, HD), freqs).transpose(1, 2)
        v = v.view(b, t, KVH, HD).transpose(1, 2)
        k, v = self.cache.update(pos, k, v)
        k = k.repeat_interleave(H // KVH, 1)
        v = v.repeat_interleave(H // KVH, 1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(b, t, D))


class FFN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.ffn = Attention(), FFN()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)

    def forward(self, x, freqs, mask, pos):
        x = x + self.attn(self.n1(x), freqs, mask, pos)
        return x + self.ffn(self.n2(x))


def rope(x, freqs):
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    f = freqs.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack(
        [xs[..., 0] * f[..., 0] - xs[..., 1] * f[..., 1], xs[..., 1] * f[..., 0] + xs[..., 0] * f[..., 1]], -1
    )
    return out.flatten(3).type_as(x)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm(D)
        self.output = nn.Linear(D, V, bias=False)
        self.max_seq = 0

    def setup_caches(self, b, s):
        self.max_seq = s
        for layer in self.layers:
            layer.attn.cache = None
        for layer in self.layers:
            layer.attn.cache = KVCache(b, s)
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device="cuda").float() / HD))
        ang = torch.outer(torch.arange(s, device="cuda").float(), inv)
        self.freqs = torch.stack([ang.cos(), ang.sin()], -1).to(torch.bfloat16)
        self.causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device="cuda"))

    def forward(self, idx, pos):
        mask = self.causal[None, None, pos]
        freqs = self.freqs[pos]
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, freqs, mask, pos)
        return self.output(self.norm(x))


class WeightOnlyInt8Linear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach()
        scales = w.abs().amax(1).float().clamp(min=1e-6) / 127
        self.register_buffer("weight", (w.float() / scales[:, None]).round().clamp(-128, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(torch.bfloat16))

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if x2.size(0) <= 16:
            y = torch._weight_int8pack_mm(x2, self.weight, self.scales)
        else:
            y = F.linear(x2, self.weight.to(x.dtype)) * self.scales
        return y.reshape(*shape[:-1], -1)


def quantize(model):
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, nn.Linear):
                setattr(mod, name, WeightOnlyInt8Linear(child))
                del child


@torch.inference_mode()
def generate(model, b, t, steps):
    model.setup_caches(b, t + steps)
    prompt = torch.randint(0, V, (b, t), device="cuda")
    logits = model(prompt, torch.arange(t, device="cuda"))
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    del logits
    report(f"prefill {b}x{t}")
    out = [nxt]
    pos = torch.tensor([t], device="cuda")
    for _ in range(steps - 1):
        logits = model(nxt, pos)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
        pos += 1
    return torch.cat(out, 1)


with torch.device("cuda"):
    model = Transformer().to(torch.bfloat16).eval()
for p in model.parameters():
    p.requires_grad_(False)
report("bf16 model")
quantize(model)
report(f"int8 weights ({math.ceil(sum(b.numel() for b in model.buffers()) / 1e6)}M buffer elements)")
gen = generate(model, 4, 512, 48)
report(f"decode {tuple(gen.shape)}")
gen = generate(model, 8, 256, 32)
report(f"decode {tuple(gen.shape)}")
