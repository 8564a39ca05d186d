"""DIFF Transformer (Ye et al. 2024, "Differential Transformer") written from the paper's
multihead_diffattn.py: each head computes two softmax attention maps from the two halves of its
queries and keys and subtracts them, weighted by a re-parameterized lambda
(exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init, lambda_init = 0.8 - 0.6 exp(-0.3 (depth - 1))), the
values having twice the head dimension; the head outputs go through a per-head RMSNorm (nn.RMSNorm,
the paper's "subln") and are scaled by (1 - lambda_init). Rotary embeddings by hand (complex-free
cos/sin, rotate_half), pre-RMSNorm blocks with SwiGLU, untied head.

Phases: (1) model built (fp32 weights, 12 layers, d 1024, 8 differential heads) and a fused AdamW;
(2) first training step at batch 8 x 1024 tokens under bf16 autocast with the explicit attention
(matmul, additive causal mask, softmax in fp32, view as (B, H, 2, T, T)); (3) two more steps with
gradient clipping; (4) decoding with a static KV cache (preallocated (B, 2H, L, d) and (B, H, L, 2d)
buffers filled with index_copy_), the differential attention as two SDPA calls on the same values,
prefill of 256 tokens then 64 greedy steps at batch 16 under inference_mode with bf16 autocast."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(30502)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, D, LAYERS, HEADS, SEQ, BATCH = 32000, 1024, 12, 8, 1024, 8
HD = D // HEADS // 2  # 64: each differential head has two 64-wide queries/keys and a 128-wide value
GEN_B, PROMPT, NEW = 16, 256, 64


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def rope_tables(length, dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, device=device).float() / dim))
    t = torch.arange(length, device=device).float()
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class DiffAttention(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.q_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, D, bias=False)
        self.out_proj = nn.Linear(D, D, bias=False)
        self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * depth)
        self.lambda_q1 = nn.Parameter(torch.randn(HD) * 0.1)
        self.lambda_k1 = nn.Parameter(torch.randn(HD) * 0.1)
        self.lambda_q2 = nn.Parameter(torch.randn(HD) * 0.1)
        self.lambda_k2 = nn.Parameter(torch.randn(HD) * 0.1)
        self.subln = nn.RMSNorm(2 * HD, eps=1e-5)

    def lam(self):
        l1 = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dim=-1).float())
        l2 = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dim=-1).float())
        return l1 - l2 + self.lambda_init

    def project(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, 2 * HEADS, HD).transpose(1, 2)
        k = self.k_proj(x).view(B, T, 2 * HEADS, HD).transpose(1, 2)
        v = self.v_proj(x).view(B, T, HEADS, 2 * HD).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(self, attn, B, T):
        attn = self.subln(attn) * (1 - self.lambda_init)
        return self.out_proj(attn.transpose(1, 2).reshape(B, T, D))

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q, k, v = self.project(x, cos, sin)
        w = torch.matmul(q * HD**-0.5, k.transpose(-1, -2))
        w = torch.nan_to_num(w)
        w = w + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).type_as(w)
        w = w.view(B, HEADS, 2, T, T)
        w = w[:, :, 0] - self.lam() * w[:, :, 1]
        return self.finish(torch.matmul(w, v), B, T)

    def decode(self, x, cos, sin, cache_k, cache_v, pos):
        B, T, _ = x.shape
        q, k, v = self.project(x, cos, sin)
        idx = torch.arange(pos, pos + T, device=x.device)
        cache_k.index_copy_(2, idx, k.to(cache_k.dtype))  # rope's fp32 tables promote q and k
        cache_v.index_copy_(2, idx, v.to(cache_v.dtype))
        keys, values = cache_k[:, :, : pos + T], cache_v[:, :, : pos + T]
        q1, q2 = q.view(B, HEADS, 2, T, HD).unbind(2)
        k1, k2 = keys.view(B, HEADS, 2, pos + T, HD).unbind(2)
        causal = T > 1
        a1 = F.scaled_dot_product_attention(q1, k1, values, is_causal=causal)
        a2 = F.scaled_dot_product_attention(q2, k2, values, is_causal=causal)
        return self.finish(a1 - self.lam().to(a2.dtype) * a2, B, T)


class Block(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.norm1 = nn.RMSNorm(D, eps=1e-5)
        self.attn = DiffAttention(depth)
        self.norm2 = nn.RMSNorm(D, eps=1e-5)
        hidden = int(8 * D / 3) // 64 * 64
        self.w1 = nn.Linear(D, hidden, bias=False)
        self.w3 = nn.Linear(D, hidden, bias=False)
        self.w2 = nn.Linear(hidden, D, bias=False)

    def mlp(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.norm1(x), cos, sin, mask)
        return x + self.mlp(self.norm2(x))

    def decode(self, x, cos, sin, ck, cv, pos):
        x = x + self.attn.decode(self.norm1(x), cos, sin, ck, cv, pos)
        return x + self.mlp(self.norm2(x))


class DiffLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Block(i) for i in range(LAYERS))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_tables(T, HD)
        mask = torch.triu(torch.full((T, T), float("-inf"), device=ids.device), 1)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(self.norm(x))


model = DiffLM().to(device)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.98),
    fused=device == "cuda",
)
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
report("built")


def train_step():
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    return loss


loss = train_step()
optimizer.step()
optimizer.zero_grad(set_to_none=True)
print(f"step 0 loss {loss.item():.4f}")
report("first step")

for step in (1, 2):
    loss = train_step()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} grad norm {norm.item():.3f}")
del loss
report("two more steps")

# (4) static KV cache decode
model.eval()
L = PROMPT + NEW
cos_all, sin_all = rope_tables(L, HD)
cdt = torch.bfloat16 if device == "cuda" else torch.float32
caches = [
    (
        torch.zeros(GEN_B, 2 * HEADS, L, HD, device=device, dtype=cdt),
        torch.zeros(GEN_B, HEADS, L, 2 * HD, device=device, dtype=cdt),
    )
    for _ in range(LAYERS)
]
prompt = torch.randint(0, VOCAB, (GEN_B, PROMPT), device=device)
out = torch.empty(GEN_B, NEW, dtype=torch.long, device=device)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    tokens, pos = prompt, 0
    for t in range(NEW):
        T = tokens.shape[1]
        cos, sin = cos_all[pos : pos + T], sin_all[pos : pos + T]
        x = model.embed(tokens)
        for layer, (ck, cv) in zip(model.layers, caches, strict=True):
            x = layer.decode(x, cos, sin, ck, cv, pos)
        logits = model.head(model.norm(x[:, -1:]))
        tokens = logits.argmax(-1)
        out[:, t] = tokens[:, 0]
        pos += T
print(f"decoded {tuple(out.shape)} first row {out[0, :8].tolist()}")
report("static kv cache decode")
