"""Draft-and-rescore generation with two quantized decoders, no training: a small draft model (4 layers,
width 1024, 8 heads) in W8A8 int8 through `torch._int_mm` (weights per output channel, activations per
token, int32 results dequantized to bf16) samples 8 candidate continuations of 32 tokens for each of
16 prompts of 1024 tokens (the prompts' KV cache computed once and `repeat_interleave`d to 128 rows,
grown by `torch.cat`, temperature sampling with `torch.multinomial`); a larger target model (12 layers,
width 2048, 16 query over 8 key/value heads with `enable_gqa=True`, GELU MLP 8192) in fp8 through the
public `torch.nn.functional.scaled_mm` (PyTorch 2.10's API): float8_e4m3fn weights with RowWise scales
per output channel against per-token RowWise activation scales, bf16 output with a bf16 bias, and an
lm_head whose activations are float8_e5m2 with a TensorWise scale against TensorWise e4m3 weights
(use_fast_accum=True, float32 output) scores every candidate, and the best one per prompt is kept.

Phases: 0 both models built in bf16 and quantized module by module (bf16 weights freed); 1 the
target's fp8 prefill of the 16 prompts under `sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION])`;
2 the int8 draft: prompt prefill, cache expansion to 128 rows and 32 sampled steps (attention under
`sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION])`); 3 the fp8 target rescoring the 128 candidates in
4 chunks of 32 sequences of 1056 tokens (log-probabilities of the 32 sampled tokens only)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(3374)
dev = "cuda"
V, NP, PLEN, NCAND, NEW, CHUNK = 32000, 16, 1024, 8, 32, 32
E4M3 = torch.finfo(torch.float8_e4m3fn).max
E5M2 = torch.finfo(torch.float8_e5m2).max


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Fp8RowwiseLinear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3
        self.register_buffer("w8", (w / scale).to(torch.float8_e4m3fn))
        self.register_buffer("w_scale", scale.t().contiguous())
        self.register_buffer("bias", lin.bias.detach().to(torch.bfloat16))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        a_scale = flat.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / E4M3
        a8 = (flat.float() / a_scale).to(torch.float8_e4m3fn)
        y = F.scaled_mm(
            a8,
            self.w8.t(),
            a_scale,
            F.ScalingType.RowWise,
            self.w_scale,
            F.ScalingType.RowWise,
            bias=self.bias,
            output_dtype=torch.bfloat16,
        )
        return y.view(*x.shape[:-1], -1)


class Fp8TensorwiseHead(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        scale = w.abs().amax().clamp(min=1e-12) / E4M3
        self.register_buffer("w8", (w / scale).to(torch.float8_e4m3fn))
        self.register_buffer("w_scale", scale.reshape(()).float())

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        a_scale = (flat.abs().amax().float().clamp(min=1e-12) / E5M2).reshape(())
        a8 = (flat.float() / a_scale).to(torch.float8_e5m2)
        y = F.scaled_mm(
            a8,
            self.w8.t(),
            a_scale,
            F.ScalingType.TensorWise,
            self.w_scale,
            F.ScalingType.TensorWise,
            output_dtype=torch.float32,
            use_fast_accum=True,
        )
        return y.view(*x.shape[:-1], -1)


class Int8Linear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.register_buffer("w8", (w / scale[:, None]).round().to(torch.int8))
        self.register_buffer("w_scale", scale.to(torch.bfloat16))
        self.register_buffer("bias", lin.bias.detach().to(torch.bfloat16))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        a_scale = flat.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / 127.0
        a8 = (flat.float() / a_scale).round().to(torch.int8)
        acc = torch._int_mm(a8, self.w8.t())
        y = (acc.float() * a_scale).to(torch.bfloat16) * self.w_scale + self.bias
        return y.view(*x.shape[:-1], -1)


class Block(nn.Module):
    def __init__(self, d, hq, hkv, ff):
        super().__init__()
        self.hq, self.hkv, self.dh = hq, hkv, d // hq
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, (hq + 2 * hkv) * self.dh)
        self.o = nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def quantize(self, kind):
        for name in ("qkv", "o", "fc1", "fc2"):
            setattr(self, name, kind(getattr(self, name)))

    def forward(self, x, cache=None, backends=None):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.hq * self.dh, self.hkv * self.dh, self.hkv * self.dh], -1)
        q = q.view(b, s, self.hq, self.dh).transpose(1, 2)
        k = k.view(b, s, self.hkv, self.dh).transpose(1, 2)
        v = v.view(b, s, self.hkv, self.dh).transpose(1, 2)
        if cache is not None and cache.get("k") is not None:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        if cache is not None:
            cache["k"], cache["v"] = k, v
        with sdpa_kernel(backends):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, enable_gqa=self.hq != self.hkv)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x)), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self, layers, d, hq, hkv, ff, backends):
        super().__init__()
        self.backends = backends
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Embedding(PLEN + NEW, d)
        self.blocks = nn.ModuleList(Block(d, hq, hkv, ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, V, bias=False)

    def hidden(self, ids, start=0, caches=None):
        x = self.emb(ids) + self.pos(torch.arange(start, start + ids.shape[1], device=dev))
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i], self.backends)
        return self.norm(x)


def quantized(model, kind, head_kind):
    model.to(dev, torch.bfloat16)
    for blk in model.blocks:
        blk.quantize(kind)
    if head_kind is not None:
        model.head = head_kind(model.head)
    return model.eval()


target = quantized(
    Decoder(12, 2048, 16, 8, 8192, [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]),
    Fp8RowwiseLinear,
    Fp8TensorwiseHead,
)
draft = quantized(
    Decoder(4, 1024, 8, 8, 4096, [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]), Int8Linear, None
)
prompts = torch.randint(0, V, (NP, PLEN), device=dev)
report("bf16 models quantized to fp8 rowwise and int8")

with torch.inference_mode():
    h = target.hidden(prompts)
    first = target.head(h[:, -1:]).log_softmax(-1)
    del h
print("target prefill next-token logprob", tuple(first.shape))
report("fp8 target prefill scaled_mm rowwise")

with torch.inference_mode():
    caches = [{} for _ in draft.blocks]
    h = draft.hidden(prompts, 0, caches)
    logits = draft.head(h[:, -1:])
    del h
    for c in caches:
        c["k"] = c["k"].repeat_interleave(NCAND, dim=0)
        c["v"] = c["v"].repeat_interleave(NCAND, dim=0)
    logits = logits.repeat_interleave(NCAND, dim=0)
    sampled = []
    for t in range(NEW):
        nxt = torch.multinomial((logits[:, -1].float() / 0.8).softmax(-1), 1)
        sampled.append(nxt)
        if t + 1 < NEW:
            logits = draft.head(draft.hidden(nxt, PLEN + t, caches))
    cand = torch.cat(sampled, dim=1)
    del caches, logits
print("candidates", tuple(cand.shape))
report("int8 draft int_mm sampling with kv cache")

with torch.inference_mode():
    seqs = torch.cat([prompts.repeat_interleave(NCAND, dim=0), cand], dim=1)
    scores = []
    for chunk in seqs.split(CHUNK):
        h = target.hidden(chunk[:, :-1])[:, PLEN - 1 :]
        lp = target.head(h).log_softmax(-1)
        scores.append(lp.gather(-1, chunk[:, PLEN:, None]).squeeze(-1).sum(-1))
        del h, lp
    best = torch.cat(scores).view(NP, NCAND).argmax(-1)
    chosen = cand.view(NP, NCAND, NEW)[torch.arange(NP, device=dev), best]
print("chosen", tuple(chosen.shape), best[:4].tolist())
report("fp8 target rescoring of candidates")
