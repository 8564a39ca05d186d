"""A Llama-style decoder written by hand: RMSNorm, rotary embeddings (rotate_half over cos/sin
tables), SwiGLU, grouped-query attention with 16 query heads of 128 and 4 key/value heads; d_model
2048, 6 layers, sequence 1500 (not a multiple of 64), batch 4; weights in pure bf16, fused AdamW.
Two training steps with SDPA's enable_gqa=True and is_causal, then one step with K/V repeated by
hand (repeat_interleave, as HF's repeat_kv does), then a KV-cache prefill of 8 prompts of 700 tokens
and 24 greedy decode steps with a query of length 1 against the growing cache (enable_gqa, no mask)
under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14602)
if SMALL:
    D, H, KV, HD, NL, FF, V, L, B, PB, PL, NEW = 256, 4, 2, 64, 2, 512, 1000, 100, 2, 2, 40, 4
else:
    D, H, KV, HD, NL, FF, V, L, B, PB, PL, NEW = 2048, 16, 4, 128, 6, 5632, 32000, 1500, 4, 8, 700, 24
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


def rope_tables(seq, dim, base=10000.0, dev=None):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, device=dev).float() / dim))
    f = torch.outer(torch.arange(seq, device=dev).float(), inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, H * HD, bias=False)
        self.k = nn.Linear(D, KV * HD, bias=False)
        self.v = nn.Linear(D, KV * HD, bias=False)
        self.o = nn.Linear(H * HD, D, bias=False)

    def forward(self, x, cos, sin, mode, cache=None):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, H, HD).transpose(1, 2)
        k = self.k(x).view(b, t, KV, HD).transpose(1, 2)
        v = self.v(x).view(b, t, KV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat((cache[0], k), dim=2)
                v = torch.cat((cache[1], v), dim=2)
            cache[0], cache[1] = k, v
        causal = t > 1
        if mode == "repeat":
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, t, H * HD))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2, self.attn = RMSNorm(D), RMSNorm(D), Attention()
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin, mode, cache=None):
        x = x + self.attn(self.n1(x), cos, sin, mode, cache)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(NL))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)

    def forward(self, idx, cos, sin, mode="gqa", caches=None):
        x = self.emb(idx)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mode, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))


model = Llama().to(device=device, dtype=dtype)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.95), fused=device == "cuda")
cos, sin = rope_tables(L + 64, HD, dev=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(mode):
    idx = torch.randint(0, V, (B, L + 1), device=device)
    logits = model(idx[:, :-1], cos[:L], sin[:L], mode)
    loss = F.cross_entropy(logits.view(-1, V).float(), idx[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
for step in range(2):
    lv = train_step("gqa")
if device == "cuda":
    print(f"enable_gqa loss {lv:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

lv = train_step("repeat")
if device == "cuda":
    print(f"repeat_kv loss {lv:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    caches = [[None, None] for _ in range(NL)]
    prompt = torch.randint(0, V, (PB, PL), device=device)
    logits = model(prompt, cos[:PL], sin[:PL], "gqa", caches)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    del logits
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    out = [nxt]
    for i in range(NEW):
        pos = PL + i
        logits = model(nxt, cos[pos : pos + 1], sin[pos : pos + 1], "gqa", caches)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
    tokens = torch.cat(out, dim=1)
if device == "cuda":
    print(
        f"decode {tuple(tokens.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
