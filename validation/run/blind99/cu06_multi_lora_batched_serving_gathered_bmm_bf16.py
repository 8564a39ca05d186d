"""Multi-tenant LoRA serving (Punica/S-LoRA style) over a hand-written Llama-like decoder (16
layers, 2,048 wide, 16 heads with 4 KV heads, SwiGLU, RoPE, a 32,000 vocabulary), bf16 under
torch.inference_mode: 8 rank-16 adapters on q, v and the MLP's down projection stacked in tensors,
each request of a batch of 12 picking its adapter by an index gathered per layer (bmm of the
gathered A and B), prefill of right-aligned prompts of 200 to 640 tokens (host-built lengths) into a
preallocated KV cache, then 48 greedy decode steps writing the cache with index_copy_; 3 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9906)
if SMALL:
    DIM, LAYERS, HEADS, KV, FF, VOCAB, RANK, ADAPTERS = 64, 2, 4, 2, 128, 256, 4, 3
    LENGTHS, NEW = [12, 20, 7, 16], 5
else:
    DIM, LAYERS, HEADS, KV, FF, VOCAB, RANK, ADAPTERS = 2048, 16, 16, 4, 5632, 32000, 16, 8
    LENGTHS, NEW = [200, 640, 512, 333, 480, 256, 600, 210, 384, 450, 300, 520], 48
HD = DIM // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


def w(*shape, scale=0.02):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


base = []
adapters = []
for _ in range(LAYERS):
    base.append(
        {
            "ln1": torch.ones(DIM, device=device, dtype=dtype),
            "ln2": torch.ones(DIM, device=device, dtype=dtype),
            "q": w(DIM, DIM),
            "k": w(KV * HD, DIM),
            "v": w(KV * HD, DIM),
            "o": w(DIM, DIM),
            "gate": w(FF, DIM),
            "up": w(FF, DIM),
            "down": w(DIM, FF),
        }
    )
    adapters.append(
        {
            "q": (w(ADAPTERS, DIM, RANK), w(ADAPTERS, RANK, DIM)),
            "v": (w(ADAPTERS, DIM, RANK), w(ADAPTERS, RANK, KV * HD)),
            "down": (w(ADAPTERS, FF, RANK), w(ADAPTERS, RANK, DIM)),
        }
    )
embed = w(VOCAB, DIM)
lm_head = w(VOCAB, DIM)
final_norm = torch.ones(DIM, device=device, dtype=dtype)


def lora(x, pair, idx):
    a, b = pair
    return torch.bmm(torch.bmm(x, a[idx]), b[idx]) * 2.0


def rope(x, pos):
    half = HD // 2
    inv = 1.0 / (10000 ** (torch.arange(half, device=device, dtype=torch.float32) / half))
    ang = pos[..., None].float() * inv
    cos, sin = ang.cos()[:, None].to(x.dtype), ang.sin()[:, None].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def forward(ids, pos, idx, cache, slot, mask):
    x = embed[ids]
    for layer, (p, ad) in enumerate(zip(base, adapters, strict=True)):
        h = F.rms_norm(x, (DIM,), p["ln1"])
        b, n, _ = h.shape
        q = (F.linear(h, p["q"]) + lora(h, ad["q"], idx)).view(b, n, HEADS, HD).transpose(1, 2)
        k = F.linear(h, p["k"]).view(b, n, KV, HD).transpose(1, 2)
        v = (F.linear(h, p["v"]) + lora(h, ad["v"], idx)).view(b, n, KV, HD).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        kc, vc = cache[layer]
        kc.index_copy_(2, slot, k)
        vc.index_copy_(2, slot, v)
        a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, enable_gqa=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, n, DIM), p["o"])
        h = F.rms_norm(x, (DIM,), p["ln2"])
        m = F.silu(F.linear(h, p["gate"])) * F.linear(h, p["up"])
        x = x + F.linear(m, p["down"]) + lora(m, ad["down"], idx)
    return F.linear(F.rms_norm(x[:, -1:], (DIM,), final_norm), lm_head)


B = len(LENGTHS)
width = max(LENGTHS)
total = width + NEW
ids = torch.zeros(B, width, dtype=torch.long)
starts = torch.tensor([width - n for n in LENGTHS])
for i, n in enumerate(LENGTHS):
    ids[i, width - n :] = torch.randint(3, VOCAB, (n,))
adapter_idx = torch.tensor([i % ADAPTERS for i in range(B)], device=device)
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    cache = [
        (
            torch.zeros(B, KV, total, HD, device=device, dtype=dtype),
            torch.zeros(B, KV, total, HD, device=device, dtype=dtype),
        )
        for _ in range(LAYERS)
    ]
    ids_d = ids.to(device)
    starts_d = starts.to(device)
    cols = torch.arange(total, device=device)
    valid = cols[None, :] >= starts_d[:, None]
    pos = (torch.arange(width, device=device)[None, :] - starts_d[:, None]).clamp(min=0)
    causal = cols[None, :width, None] >= cols[None, None, :]
    mask = (causal & valid[:, None, :] & (cols[None, None, :] < width))[:, None]
    logits = forward(ids_d, pos, adapter_idx, cache, torch.arange(width, device=device), mask)
    nxt = logits.argmax(-1)
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    out = [nxt]
    for step in range(NEW - 1):
        at = width + step
        m = (valid & (cols[None, :] <= at))[:, None, None, :]
        p = (at - starts_d)[:, None]
        logits = forward(nxt, p, adapter_idx, cache, torch.tensor([at], device=device), m)
        nxt = logits.argmax(-1)
        out.append(nxt)
    tokens = torch.cat(out, dim=1)
    print(f"decoded {tuple(tokens.shape)} checksum {int(tokens.sum().item()) % 9973}")
    if device == "cuda":
        print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
