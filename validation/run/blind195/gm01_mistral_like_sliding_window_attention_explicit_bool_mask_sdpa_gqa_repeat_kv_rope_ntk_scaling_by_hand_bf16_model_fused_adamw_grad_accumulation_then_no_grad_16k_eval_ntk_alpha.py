"""A Mistral-like decoder with sliding-window attention written by hand, trained on 8k-token sequences and
evaluated at 16k with NTK-aware RoPE scaling.

Model: vocabulary 32,000, width 1,024, 8 pre-norm blocks (RMSNorm by hand), 16 query heads of 64 and 4
key/value heads (grouped-query attention, K and V expanded with repeat_interleave as HF's repeat_kv does),
rotary position embeddings computed by hand (cos/sin tables for the whole sequence, rotate_half), a
SwiGLU MLP of 2,816, untied lm_head. Sliding-window attention through F.scaled_dot_product_attention with
an explicit boolean mask (query i sees keys i-4095 .. i; the mask is built once per sequence length on the
device). The model is cast to bfloat16 (`model.bfloat16()`); fused AdamW (lr 3e-4, betas 0.9/0.95,
weight decay 0.1 on matrices only); gradient accumulation of 4 micro-batches of 1 x 8,192 tokens (loss /
4), clip_grad_norm_ 1.0, set_to_none zero_grad.

Phases: the first optimizer step (4 micro-batches); 2 more steps; evaluation under no_grad at 16,384
tokens with NTK-aware scaling (base 10,000 * alpha ** (d / (d - 2)), alpha 2) and the window mask
rebuilt, loss in fp32 via float() logits; then a chunked prefill of 16,384 tokens in 4 chunks of 4,096
with a rolling key/value cache of the last 4,096 positions (the window), under inference_mode,
keeping only the last token's logits. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19501)
if SMALL:
    VOCAB, D, LAYERS, HEADS, KV_HEADS, FFN = 512, 64, 2, 4, 2, 128
    SEQ, EVAL_SEQ, WINDOW, ACCUM, STEPS, CHUNK = 256, 512, 128, 2, 1, 128
else:
    VOCAB, D, LAYERS, HEADS, KV_HEADS, FFN = 32000, 1024, 8, 16, 4, 2816
    SEQ, EVAL_SEQ, WINDOW, ACCUM, STEPS, CHUNK = 8192, 16384, 4096, 4, 2, 4096
HEAD_DIM = D // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.type_as(x)


def rope_tables(seq, offset=0, base=10000.0, alpha=1.0):
    base = base * alpha ** (HEAD_DIM / (HEAD_DIM - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, HEAD_DIM, 2, device=device, dtype=torch.float32) / HEAD_DIM))
    t = torch.arange(offset, offset + seq, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def window_mask(q_len, k_len, window):
    # query i (absolute position k_len - q_len + i) sees keys j with pos - window < j <= pos
    qpos = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    kpos = torch.arange(k_len, device=device)[None, :]
    return (kpos <= qpos) & (kpos > qpos - window)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, D, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            if cache.get("k") is not None:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k[:, :, -WINDOW:], v[:, :, -WINDOW:]
        rep = HEADS // KV_HEADS
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm(D)
        self.attn = Attention()
        self.mlp_norm = RMSNorm(D)
        self.gate = nn.Linear(D, FFN, bias=False)
        self.up = nn.Linear(D, FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class SlidingWindowLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, cos, sin, mask, caches=None):
        x = self.embed(idx)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, mask, None if caches is None else caches[i])
        return self.lm_head(self.norm(x))


model = SlidingWindowLM().to(device).bfloat16()
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")

cos, sin = rope_tables(SEQ)
train_mask = window_mask(SEQ, SEQ, WINDOW)


def train_step():
    total = 0.0
    for _ in range(ACCUM):
        tokens = torch.randint(0, VOCAB, (1, SEQ + 1), device=device)
        logits = model(tokens[:, :-1], cos, sin, train_mask)
        loss = F.cross_entropy(logits.view(-1, VOCAB), tokens[:, 1:].reshape(-1)) / ACCUM
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
cos, sin = rope_tables(EVAL_SEQ, alpha=2.0)
mask = window_mask(EVAL_SEQ, EVAL_SEQ, WINDOW)
with torch.no_grad():
    tokens = torch.randint(0, VOCAB, (1, EVAL_SEQ + 1), device=device)
    logits = model(tokens[:, :-1], cos, sin, mask)
    eval_loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
print(f"eval loss at {EVAL_SEQ} tokens {eval_loss.item():.4f} ppl {math.exp(min(eval_loss.item(), 20)):.1f}")
del logits, mask
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

caches = [{} for _ in range(LAYERS)]
with torch.inference_mode():
    prompt = torch.randint(0, VOCAB, (1, EVAL_SEQ), device=device)
    for start in range(0, EVAL_SEQ, CHUNK):
        c, s = rope_tables(CHUNK, offset=start, alpha=2.0)
        k_len = min(start, WINDOW) + CHUNK
        m = window_mask(CHUNK, k_len, WINDOW)
        logits = model(prompt[:, start : start + CHUNK], c, s, m, caches)[:, -1]
    next_token = logits.argmax(-1)
print(f"prefill done, next token {next_token.item()}, cache {caches[0]['k'].shape[2]} positions")
if device == "cuda":
    print(f"prefill allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
