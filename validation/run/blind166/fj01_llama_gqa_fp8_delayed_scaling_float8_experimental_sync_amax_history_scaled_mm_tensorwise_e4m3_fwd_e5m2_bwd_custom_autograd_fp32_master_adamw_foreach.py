"""FP8 training of a small Llama written by hand the way float8_experimental's delayed scaling
(pytorch-labs/float8_experimental, Float8Linear with `sync_float8_amax_and_scale_history`) does it,
with `torch._scaled_mm` alone: every projection of the decoder (q/k/v fused, o, gate/up fused,
down) goes through a custom autograd.Function that casts the bf16 activation and the fp32 master
weight to float8_e4m3fn with per-tensor scales computed from the previous steps (delayed: each
call records this step's amax into a buffer), multiplies them with bf16 output, and in backward
casts the incoming gradient to float8_e5m2 (its own delayed scale and amax buffer) for the two
gradient GEMMs (grad input in bf16, grad weight straight to fp32 through `out_dtype`); after every
backward a sync rolls the 16-step amax histories and sets the next scales. Llama pieces by hand:
RMSNorm, rotary embeddings, grouped-query attention (16 query heads, 4 KV heads, `repeat_kv` as
HF's Llama) through SDPA, SwiGLU; 8 layers of width 1024 (FFN 2816), vocab 32,000, untied head in
bf16 autocast; fp32 master weights, AdamW (foreach) with weight decay, grad-norm clipping at 1.0;
batch 8 x 1,024 tokens, 3 steps (each its own phase) and a no_grad evaluation; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16601)
if SMALL:
    D, LAYERS, HQ, HKV, FFN, VOCAB, B, T = 128, 2, 4, 2, 352, 512, 2, 64
else:
    D, LAYERS, HQ, HKV, FFN, VOCAB, B, T = 1024, 8, 16, 4, 2816, 32000, 8, 1024
HD = D // HQ
HIST = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
E4_MAX, E5_MAX = torch.finfo(E4M3).max, torch.finfo(E5M2).max


def cast_fp8(t, scale, dtype, fmax):
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype)


class Fp8DelayedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, lin):
        with torch.no_grad():
            lin.amax_x.copy_(x.detach().abs().amax().float())
            lin.amax_w.copy_(w.detach().abs().amax().float())
        x8 = cast_fp8(x, lin.scale_x, E4M3, E4_MAX)
        w8 = cast_fp8(w, lin.scale_w, E4M3, E4_MAX)
        inv_x, inv_w = lin.scale_x.reciprocal(), lin.scale_w.reciprocal()
        out = torch._scaled_mm(x8, w8.t(), scale_a=inv_x, scale_b=inv_w, out_dtype=torch.bfloat16)
        ctx.save_for_backward(x8, w8, inv_x, inv_w)
        ctx.lin = lin
        return out

    @staticmethod
    def backward(ctx, g):
        x8, w8, inv_x, inv_w = ctx.saved_tensors
        lin = ctx.lin
        with torch.no_grad():
            lin.amax_g.copy_(g.abs().amax().float())
        g8 = cast_fp8(g, lin.scale_g, E5M2, E5_MAX)
        inv_g = lin.scale_g.reciprocal()
        grad_x = torch._scaled_mm(
            g8, w8.t().contiguous().t(), scale_a=inv_g, scale_b=inv_w, out_dtype=torch.bfloat16
        )
        grad_w = torch._scaled_mm(
            g8.t().contiguous(),
            x8.t().contiguous().t(),
            scale_a=inv_g,
            scale_b=inv_x,
            out_dtype=torch.float32,
        )
        return grad_x, grad_w, None


class Float8Linear(nn.Linear):
    def __init__(self, i, o):
        super().__init__(i, o, bias=False)
        for n in ("x", "w", "g"):
            self.register_buffer(f"amax_{n}", torch.zeros(()))
            self.register_buffer(f"hist_{n}", torch.zeros(HIST))
            self.register_buffer(f"scale_{n}", torch.ones(()))

    def forward(self, x):
        shape = x.shape
        y = Fp8DelayedMatmul.apply(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight, self)
        return y.reshape(*shape[:-1], -1)


@torch.no_grad()
def sync_float8_amax_and_scale_history(model):
    for m in model.modules():
        if isinstance(m, Float8Linear):
            for n, fmax in (("x", E4_MAX), ("w", E4_MAX), ("g", E5_MAX)):
                hist = getattr(m, f"hist_{n}")
                hist.copy_(torch.roll(hist, 1))
                hist[0] = getattr(m, f"amax_{n}")
                getattr(m, f"scale_{n}").copy_(fmax / hist.max().clamp(min=1e-12))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.type_as(x)


def rotary(t):
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
    f = torch.outer(torch.arange(t).float(), inv)
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat([-x2, x1], -1)


def repeat_kv(x, n):
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n, t, d).reshape(b, h * n, t, d)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = Float8Linear(D, (HQ + 2 * HKV) * HD)
        self.o = Float8Linear(HQ * HD, D)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([HQ * HD, HKV * HD, HKV * HD], -1)
        q = q.view(b, t, HQ, HD).transpose(1, 2)
        k = k.view(b, t, HKV, HD).transpose(1, 2)
        v = v.view(b, t, HKV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, HQ // HKV), repeat_kv(v, HQ // HKV)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, HQ * HD))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_up = Float8Linear(D, 2 * FFN)
        self.down = Float8Linear(FFN, D)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, -1)
        return self.down(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(D), RMSNorm(D)
        self.self_attn, self.mlp = Attention(), MLP()

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        cos, sin = rotary(T)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if n.endswith(("o.weight", "down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin = self.cos[:t].to(torch.bfloat16), self.sin[:t].to(torch.bfloat16)
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


model = Llama().to(device)
decay = [p for p in model.parameters() if p.dim() == 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    foreach=True,
)
gen = torch.Generator(device=device).manual_seed(16601)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    tokens = torch.randint(0, VOCAB, (B, T + 1), device=device, generator=gen)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    sync_float8_amax_and_scale_history(model)
    norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} norm {norm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    tokens = torch.randint(0, VOCAB, (B, T + 1), device=device, generator=gen)
    logits = model(tokens[:, :-1])
    nll = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"eval ppl {nll.exp().item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
