"""Three ways a long-context server keeps its KV cache small, written by hand on one Llama-like fp16 decoder
(8 layers, width 2048, 16 query heads over 8 key/value heads, head 128, RoPE, RMSNorm, SwiGLU 5,632, vocab
32,000, untied lm_head), no training; every length is fixed so that no shape depends on values.

1. Set-up: the model built on the host in fp32, `.half()` then `.to("cuda")`, eval().
2. SnapKV prefill: 4 prompts of 8,192 tokens through every layer with `F.scaled_dot_product_attention`
   (is_causal, GQA by `enable_gqa=True`); per layer, the last 32 queries (observation window) score every
   earlier key explicitly (fp32 softmax with a causal mask on the window), the votes are summed over the
   window and over each key/value group's query heads, smoothed by `F.max_pool1d(kernel 7, stride 1, pad 3)`,
   and the 992 best prefix positions (topk, then sorted) are gathered with `torch.gather` from keys and
   values and concatenated with the window's 32: a 1,024-token cache per layer instead of 8,192.
3. Decoding on the compressed caches: 64 greedy steps for the 4 rows, the caches grown by `torch.cat`, the
   new tokens' positions continuing at 8,192.
4. An int8 quantized cache: 8 prompts of 2,048 tokens prefilled, keys and values quantized per token and
   head (absmax / 127, fp16 scales) into preallocated int8 caches of 2,048 + 64 positions written by slice
   assignment; 64 greedy steps, each dequantizing the filled prefix of every layer to fp16 for SDPA.
5. StreamingLLM: 16 rows, a prompt of 1,020 tokens, keys cached before rotary; 4 attention-sink tokens plus a
   rolling window of 1,020 recent tokens: each of 64 decode steps drops the oldest non-sink position
   (`torch.cat` of the sinks and the tail), and the cached keys are re-rotated with their cache positions
   0..1,023 before attention.

Phases: set-up | SnapKV prefill + compression | decode on compressed cache | int8 cache prefill + decode |
attention sinks rolling decode. 5 phases."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34102)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    LAYERS, D, HQ, HKV, FF = 2, 256, 4, 2, 512
    SNAP_B, SNAP_S, WIN, KEEP, SNAP_NEW = 2, 256, 8, 64, 4
    Q8_B, Q8_S, Q8_NEW = 2, 128, 4
    SINK_B, SINK_S, SINKS, ROLL, SINK_NEW = 2, 60, 4, 60, 6
else:
    LAYERS, D, HQ, HKV, FF = 8, 2048, 16, 8, 5632
    SNAP_B, SNAP_S, WIN, KEEP, SNAP_NEW = 4, 8192, 32, 1024, 64
    Q8_B, Q8_S, Q8_NEW = 8, 2048, 64
    SINK_B, SINK_S, SINKS, ROLL, SINK_NEW = 16, 1020, 4, 1020, 64
V = 32000
DH = D // HQ
GROUP = HQ // HKV


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


def rope(x, pos):
    """Rotate-half RoPE (base 10,000) of x (B, H, S, DH) at positions pos (S,) or (B, S)."""
    inv = 1.0 / (10000 ** (torch.arange(0, DH, 2, device=x.device, dtype=torch.float32) / DH))
    ang = pos.float().unsqueeze(-1) * inv
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    if pos.dim() == 2:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype) * self.weight


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.q = nn.Linear(D, HQ * DH, bias=False)
        self.k = nn.Linear(D, HKV * DH, bias=False)
        self.v = nn.Linear(D, HKV * DH, bias=False)
        self.o = nn.Linear(HQ * DH, D, bias=False)
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def qkv(self, x):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, HQ, DH).transpose(1, 2)
        k = self.k(h).view(b, s, HKV, DH).transpose(1, 2)
        v = self.v(h).view(b, s, HKV, DH).transpose(1, 2)
        return q, k, v

    def finish(self, x, attn):
        b, _, s, _ = attn.shape
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, HQ * DH))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)

    def logits_last(self, x):
        return self.lm_head(self.norm(x[:, -1:])).float()


model = Model().half().to(device).eval()
report("fp16 model")


def snapkv_select(q, k, v):
    """SnapKV: keep the KEEP - WIN prefix positions the observation window votes for, plus the window."""
    b, _, s, _ = q.shape
    obs = q[:, :, -WIN:].float()
    keys = k.repeat_interleave(GROUP, dim=1).float()
    scores = obs @ keys.transpose(-1, -2) / DH**0.5
    causal = torch.ones(WIN, WIN, dtype=torch.bool, device=q.device).tril()
    scores[..., -WIN:] = scores[..., -WIN:].masked_fill(~causal, float("-inf"))
    votes = scores.softmax(-1)[..., : s - WIN].sum(2)
    votes = votes.view(b, HKV, GROUP, s - WIN).sum(2)
    votes = F.max_pool1d(votes, kernel_size=7, stride=1, padding=3)
    idx = votes.topk(KEEP - WIN, dim=-1).indices.sort(-1).values
    idx = idx.unsqueeze(-1).expand(-1, -1, -1, DH)
    k_keep = torch.cat([k[:, :, : s - WIN].gather(2, idx), k[:, :, -WIN:]], 2)
    v_keep = torch.cat([v[:, :, : s - WIN].gather(2, idx), v[:, :, -WIN:]], 2)
    return k_keep, v_keep


with torch.inference_mode():
    ids = torch.randint(0, V, (SNAP_B, SNAP_S), device=device)
    pos = torch.arange(SNAP_S, device=device)
    x = model.embed(ids)
    caches = []
    for layer in model.layers:
        q, k, v = layer.qkv(x)
        q, k = rope(q, pos), rope(k, pos)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        caches.append(snapkv_select(q, k, v))
        x = layer.finish(x, attn)
        del q, k, v, attn
    nxt = model.logits_last(x).argmax(-1)
    del x
print("compressed cache per layer", tuple(caches[0][0].shape))
report("snapkv prefill and compression")

with torch.inference_mode():
    out = [nxt]
    for t in range(SNAP_NEW):
        p = torch.full((1,), SNAP_S + t, device=device)
        x = model.embed(nxt)
        for i, layer in enumerate(model.layers):
            q, k, v = layer.qkv(x)
            q, k = rope(q, p), rope(k, p)
            ck, cv = caches[i]
            ck, cv = torch.cat([ck, k], 2), torch.cat([cv, v], 2)
            caches[i] = (ck, cv)
            x = layer.finish(x, F.scaled_dot_product_attention(q, ck, cv, enable_gqa=True))
        nxt = model.logits_last(x).argmax(-1)
        out.append(nxt)
    tokens = torch.cat(out, 1)
    del caches, out
print("snapkv decode", tuple(tokens.shape))
report("decode on compressed cache")


def quantize(t):
    """Per-token, per-head absmax int8 with fp16 scales."""
    scale = t.abs().amax(-1, keepdim=True).float().clamp(min=1e-6) / 127.0
    return (t.float() / scale).round().clamp(-127, 127).to(torch.int8), scale.half()


with torch.inference_mode():
    cap = Q8_S + Q8_NEW
    kq = [torch.zeros(Q8_B, HKV, cap, DH, dtype=torch.int8, device=device) for _ in model.layers]
    vq = [torch.zeros(Q8_B, HKV, cap, DH, dtype=torch.int8, device=device) for _ in model.layers]
    ks = [torch.ones(Q8_B, HKV, cap, 1, dtype=torch.float16, device=device) for _ in model.layers]
    vs = [torch.ones(Q8_B, HKV, cap, 1, dtype=torch.float16, device=device) for _ in model.layers]
    ids = torch.randint(0, V, (Q8_B, Q8_S), device=device)
    pos = torch.arange(Q8_S, device=device)
    x = model.embed(ids)
    for i, layer in enumerate(model.layers):
        q, k, v = layer.qkv(x)
        q, k = rope(q, pos), rope(k, pos)
        kq[i][:, :, :Q8_S], ks[i][:, :, :Q8_S] = quantize(k)
        vq[i][:, :, :Q8_S], vs[i][:, :, :Q8_S] = quantize(v)
        x = layer.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
        del q, k, v
    nxt = model.logits_last(x).argmax(-1)
    out = [nxt]
    for t in range(Q8_NEW - 1):
        n = Q8_S + t
        p = torch.full((1,), n, device=device)
        x = model.embed(nxt)
        for i, layer in enumerate(model.layers):
            q, k, v = layer.qkv(x)
            q, k = rope(q, p), rope(k, p)
            kq[i][:, :, n : n + 1], ks[i][:, :, n : n + 1] = quantize(k)
            vq[i][:, :, n : n + 1], vs[i][:, :, n : n + 1] = quantize(v)
            kd = kq[i][:, :, : n + 1].half() * ks[i][:, :, : n + 1]
            vd = vq[i][:, :, : n + 1].half() * vs[i][:, :, : n + 1]
            x = layer.finish(x, F.scaled_dot_product_attention(q, kd, vd, enable_gqa=True))
            del kd, vd
        nxt = model.logits_last(x).argmax(-1)
        out.append(nxt)
    tokens = torch.cat(out, 1)
    del kq, vq, ks, vs, out
print("int8 kv decode", tuple(tokens.shape))
report("int8 quantized kv cache")

with torch.inference_mode():
    ids = torch.randint(0, V, (SINK_B, SINK_S), device=device)
    pos = torch.arange(SINK_S, device=device)
    x = model.embed(ids)
    caches = []
    for layer in model.layers:
        q, k, v = layer.qkv(x)
        caches.append((k, v))
        x = layer.finish(
            x, F.scaled_dot_product_attention(rope(q, pos), rope(k, pos), v, is_causal=True, enable_gqa=True)
        )
        del q
    nxt = model.logits_last(x).argmax(-1)
    out = [nxt]
    budget = SINKS + ROLL
    for _ in range(SINK_NEW):
        x = model.embed(nxt)
        for i, layer in enumerate(model.layers):
            q, k, v = layer.qkv(x)
            ck, cv = caches[i]
            ck, cv = torch.cat([ck, k], 2), torch.cat([cv, v], 2)
            if ck.shape[2] > budget:
                ck = torch.cat([ck[:, :, :SINKS], ck[:, :, SINKS + 1 :]], 2)
                cv = torch.cat([cv[:, :, :SINKS], cv[:, :, SINKS + 1 :]], 2)
            caches[i] = (ck, cv)
            n = ck.shape[2]
            kpos = torch.arange(n, device=device)
            attn = F.scaled_dot_product_attention(rope(q, kpos[-1:]), rope(ck, kpos), cv, enable_gqa=True)
            x = layer.finish(x, attn)
        nxt = model.logits_last(x).argmax(-1)
        out.append(nxt)
    tokens = torch.cat(out, 1)
print("attention sinks decode", tuple(tokens.shape), "cache", tuple(caches[0][0].shape))
report("streamingllm sinks rolling window")
