"""Weight-only int8 inference of a Llama-style decoder written by hand: int8 weights with bf16
per-channel scales, each linear dequantising its weight on the fly before `F.linear`, a
preallocated KV cache, SDPA attention; 16 layers of width 4096, a 1,024-token prompt at batch 4,
then 32 greedy decode steps, under `inference_mode`; 3 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5003)
D, HID, L, HEADS, V = (64, 128, 2, 4, 100) if SMALL else (4096, 11008, 16, 32, 32000)
B, PROMPT, NEW = (1, 16, 4) if SMALL else (4, 1024, 32)
device = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.bfloat16 if device == "cuda" else torch.float32


def quantized(rows, cols):
    w = torch.randn(rows, cols, device=device, dtype=dt) * 0.02
    scale = w.abs().amax(1).float() / 127
    q = (w / scale[:, None].to(dt)).round().clamp(-127, 127).to(torch.int8)
    return q, scale.to(dt)


def linear(x, qw):
    q, scale = qw
    return F.linear(x, q.to(dt) * scale[:, None])


emb = torch.randn(V, D, device=device, dtype=dt) * 0.02
layers = [
    dict(qkv=quantized(3 * D, D), o=quantized(D, D), up=quantized(2 * HID, D), down=quantized(D, HID))
    for _ in range(L)
]
head = quantized(V, D)
cache = torch.zeros(L, 2, B, HEADS, PROMPT + NEW, D // HEADS, device=device, dtype=dt)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def forward(ids, pos):
    x = emb[ids]
    t = ids.shape[1]
    for i, layer in enumerate(layers):
        h = F.rms_norm(x, (D,))
        q, k, v = linear(h, layer["qkv"]).view(B, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        cache[i, 0, :, :, pos : pos + t] = k
        cache[i, 1, :, :, pos : pos + t] = v
        keys, values = cache[i, 0, :, :, : pos + t], cache[i, 1, :, :, : pos + t]
        a = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
        x = x + linear(a.transpose(1, 2).reshape(B, t, D), layer["o"])
        g, u = linear(F.rms_norm(x, (D,)), layer["up"]).chunk(2, -1)
        x = x + linear(F.silu(g) * u, layer["down"])
    return linear(F.rms_norm(x[:, -1:], (D,)), head)


with torch.inference_mode():
    ids = torch.randint(0, V, (B, PROMPT), device=device)
    nxt = forward(ids, 0).argmax(-1)
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    for step in range(NEW):
        nxt = forward(nxt, PROMPT + step).argmax(-1)
    if device == "cuda":
        print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
