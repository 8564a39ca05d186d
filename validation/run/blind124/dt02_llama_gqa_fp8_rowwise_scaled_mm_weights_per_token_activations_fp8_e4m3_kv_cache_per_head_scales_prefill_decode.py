"""FP8 serving of a Llama-3-8B-shaped decoder written by hand (16 of its 32 layers): every
projection's bf16 weight is quantized once to e4m3 with one scale per output row and freed, each
call quantizes its activations per token and runs `torch._scaled_mm` with rowwise scales and bf16
output; RoPE, grouped-query attention by SDPA (`enable_gqa`), and a preallocated KV cache stored in
float8_e4m3fn with one static scale per layer and KV head taken from the prefill's amax, dequantized
to bf16 on every decode step; greedy decoding of 16 prompts of 1,024 tokens for 48 tokens, then a
second request of 32 prompts of 512 for 24 under the same weights; 5 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12402)
D, LAYERS, HQ, HKV, FFN, VOCAB = (256, 2, 4, 2, 512, 1024) if SMALL else (4096, 16, 32, 8, 14336, 128256)
HD = D // HQ
device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3 = torch.float8_e4m3fn
FMAX = torch.finfo(E4M3).max
bf16 = torch.bfloat16


def quantize_rows(w):
    scale = w.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FMAX
    return (w.float() / scale).clamp(-FMAX, FMAX).to(E4M3), scale.reshape(1, -1).contiguous()


class Fp8RowwiseLinear:
    def __init__(self, i, o):
        w = torch.randn(o, i, device=device, dtype=bf16) * (i**-0.5)
        self.w8, self.ws = quantize_rows(w)
        del w

    def __call__(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xs = x2.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FMAX
        x8 = (x2 / xs).clamp(-FMAX, FMAX).to(E4M3)
        y = torch._scaled_mm(x8, self.w8.t(), scale_a=xs, scale_b=self.ws, out_dtype=bf16)
        return y.reshape(*shape[:-1], -1)


def rope(pos):
    inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=device).float() / HD))
    f = torch.outer(pos.float(), inv)
    return f.cos().to(bf16), f.sin().to(bf16)


def apply_rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Layer:
    def __init__(self):
        self.qkv = Fp8RowwiseLinear(D, (HQ + 2 * HKV) * HD)
        self.o = Fp8RowwiseLinear(HQ * HD, D)
        self.gate_up = Fp8RowwiseLinear(D, 2 * FFN)
        self.down = Fp8RowwiseLinear(FFN, D)
        self.n1 = torch.ones(D, device=device, dtype=bf16)
        self.n2 = torch.ones(D, device=device, dtype=bf16)

    def forward(self, x, cos, sin, cache, start):
        b, t, _ = x.shape
        h = F.rms_norm(x, (D,), self.n1, 1e-5)
        q, k, v = self.qkv(h).split([HQ * HD, HKV * HD, HKV * HD], -1)
        q = apply_rope(q.view(b, t, HQ, HD).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(b, t, HKV, HD).transpose(1, 2), cos, sin)
        v = v.view(b, t, HKV, HD).transpose(1, 2)
        k8, v8, ks, vs = cache
        if start == 0:
            ks.copy_(k.abs().amax(dim=(0, 2, 3)).float().clamp(min=1e-6).view(1, HKV, 1, 1) / FMAX)
            vs.copy_(v.abs().amax(dim=(0, 2, 3)).float().clamp(min=1e-6).view(1, HKV, 1, 1) / FMAX)
        k8[:b, :, start : start + t] = (k / ks).clamp(-FMAX, FMAX).to(E4M3)
        v8[:b, :, start : start + t] = (v / vs).clamp(-FMAX, FMAX).to(E4M3)
        if start == 0:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            kk = (k8[:b, :, : start + t].to(bf16) * ks).to(bf16)
            vv = (v8[:b, :, : start + t].to(bf16) * vs).to(bf16)
            a = F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, HQ * HD))
        g, u = self.gate_up(F.rms_norm(x, (D,), self.n2, 1e-5)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


embed = torch.randn(VOCAB, D, device=device, dtype=bf16) * 0.02
layers = [Layer() for _ in range(LAYERS)]
norm = torch.ones(D, device=device, dtype=bf16)
head = Fp8RowwiseLinear(D, VOCAB)
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def serve(batch, prompt, new, tag):
    smax = prompt + new
    caches = [
        (
            torch.empty(batch, HKV, smax, HD, device=device, dtype=E4M3),
            torch.empty(batch, HKV, smax, HD, device=device, dtype=E4M3),
            torch.empty(1, HKV, 1, 1, device=device),
            torch.empty(1, HKV, 1, 1, device=device),
        )
        for _ in range(LAYERS)
    ]
    ids = torch.randint(0, VOCAB, (batch, prompt), device=device)
    out = []
    with torch.inference_mode():
        pos, t = 0, prompt
        for i in range(new + 1):
            cos, sin = rope(torch.arange(pos, pos + t, device=device))
            x = embed[ids]
            for layer, cache in zip(layers, caches, strict=True):
                x = layer.forward(x, cos, sin, cache, pos)
            logits = head(F.rms_norm(x[:, -1:], (D,), norm, 1e-5)).float()
            ids = logits.argmax(-1)
            out.append(ids)
            pos, t = pos + t, 1
            if i == 0 and device == "cuda":
                print(
                    f"{tag} prefill"
                    f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
                )
                torch.cuda.reset_peak_memory_stats()
        tokens = torch.cat(out, 1)
    if device == "cuda":
        print(
            f"{tag} decode {tuple(tokens.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    return tokens


serve(4 if SMALL else 16, 32 if SMALL else 1024, 4 if SMALL else 48, "a")
serve(4 if SMALL else 32, 16 if SMALL else 512, 4 if SMALL else 24, "b")
