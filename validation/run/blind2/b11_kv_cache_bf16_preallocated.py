"""Hand-written bf16 GQA decoder under inference_mode: prefill, then greedy decode into a preallocated KV
cache (slice assignment, no torch.cat), SDPA over the filled prefix."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, B, PROMPT, NEW = (
    (64, 2, 4, 2, 128, 256, 2, 8, 4)
    if os.environ.get("SMOKE")
    else (2048, 16, 16, 4, 5632, 32000, 32, 768, 64)
)
HEAD_DIM = DIM // HEADS
MAX_LEN = PROMPT + NEW
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.RMSNorm(DIM)
        self.qkv = nn.Linear(DIM, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
        self.o = nn.Linear(DIM, DIM, bias=False)
        self.norm2 = nn.RMSNorm(DIM)
        self.gate_up = nn.Linear(DIM, 2 * FFN, bias=False)
        self.down = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x, k_cache, v_cache, pos):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1
        )
        q = q.view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k_cache[:, :, pos : pos + t] = k.view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v_cache[:, :, pos : pos + t] = v.view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        keys = k_cache[:, :, : pos + t].repeat_interleave(HEADS // KV_HEADS, dim=1)
        values = v_cache[:, :, : pos + t].repeat_interleave(HEADS // KV_HEADS, dim=1)
        attn = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, DIM))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens, caches, pos):
        x = self.embed(tokens)
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = layer(x, kc, vc, pos)
        return self.lm_head(self.norm(x[:, -1:]))


model = Decoder().to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    caches = [
        (
            torch.zeros(B, KV_HEADS, MAX_LEN, HEAD_DIM, device=device, dtype=torch.bfloat16),
            torch.zeros(B, KV_HEADS, MAX_LEN, HEAD_DIM, device=device, dtype=torch.bfloat16),
        )
        for _ in range(LAYERS)
    ]
    prompt = torch.randint(0, VOCAB, (B, PROMPT), device=device)
    if device == "cuda":
        print(f"cache allocated {torch.cuda.memory_allocated()}")
    logits = model(prompt, caches, 0)
    next_tok = logits.argmax(dim=-1)
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

    generated = [next_tok]
    for i in range(NEW - 1):
        logits = model(next_tok, caches, PROMPT + i)
        next_tok = logits.argmax(dim=-1)
        generated.append(next_tok)
    out = torch.cat(generated, dim=1)
if device == "cuda":
    print(f"decode peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
print(out.shape)
