"""Pre-training on packed sequences with document masks: a LLaMA-like decoder written by hand.

Model: 12 layers, d_model 1024, 16 query heads and 4 key/value heads (repeated by repeat_interleave),
SwiGLU 2816, RMSNorm, untied lm_head, vocabulary 32,000. Each row of 2048 tokens packs several
documents (lengths drawn from a seeded CPU generator, 64 to 1024 tokens); the attention mask is the
block-diagonal causal mask built from per-token document ids, a (B, 1, T, T) bool tensor passed to
F.scaled_dot_product_attention as attn_mask; rotary positions restart at each document (cos/sin
gathered by the per-token positions). Loss: cross entropy in fp32 plus a z-loss of 1e-4 * logsumexp².

Optimizer: Lion written by hand with torch._foreach ops (sign of the interpolated momentum, decoupled
weight decay 0.1 on matrices, betas 0.9/0.99, lr 3e-4), gradients clipped by
torch.nn.utils.clip_grad_norm_(foreach=True).

Phases: the first step under bf16 autocast at batch 8; 3 more steps; evaluation under no_grad; then the
model cast to bf16 with fp32 master weights kept by hand (bf16 gradients copied into the masters'
.grad, clipping and Lion on the masters, _foreach_copy_ back into the bf16 weights), no autocast, 3
steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2142)
if SMALL:
    VOCAB, D, LAYERS, HEADS, KV, FFN, CTX, BATCH = 512, 128, 2, 4, 2, 352, 128, 2
else:
    VOCAB, D, LAYERS, HEADS, KV, FFN, CTX, BATCH = 32000, 1024, 12, 16, 4, 2816, 2048, 8
HD = D // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
gen = torch.Generator().manual_seed(7)


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, HEADS * HD, bias=False)
        self.kv = nn.Linear(D, 2 * KV * HD, bias=False)
        self.o = nn.Linear(HEADS * HD, D, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, HEADS, HD).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, KV, HD).permute(2, 0, 3, 1, 4)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(HEADS // KV, dim=1)
        v = v.repeat_interleave(HEADS // KV, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D, eps=1e-5)
        self.attn = Attention()
        self.n2 = nn.RMSNorm(D, eps=1e-5)
        self.gate_up = nn.Linear(D, 2 * FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.n1(x), cos, sin, mask)
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        inv_freq = 1.0 / (500000 ** (torch.arange(0, HD, 2).float() / HD))
        freqs = torch.outer(torch.arange(CTX).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_table", emb.cos(), persistent=False)
        self.register_buffer("sin_table", emb.sin(), persistent=False)

    def forward(self, idx, pos, mask):
        cos = self.cos_table[pos].unsqueeze(1).to(self.embed.weight.dtype)
        sin = self.sin_table[pos].unsqueeze(1).to(self.embed.weight.dtype)
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def packed_batch(n):
    """Token ids, per-document positions and the block-diagonal causal mask of n packed rows."""
    doc_ids = torch.empty(n, CTX, dtype=torch.long)
    positions = torch.empty(n, CTX, dtype=torch.long)
    for r in range(n):
        start, d = 0, 0
        while start < CTX:
            length = min(int(torch.randint(CTX // 32, CTX // 2 + 1, (1,), generator=gen)), CTX - start)
            doc_ids[r, start : start + length] = d
            positions[r, start : start + length] = torch.arange(length)
            start, d = start + length, d + 1
    doc_ids, positions = doc_ids.to(device), positions.to(device)
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    causal = torch.ones(CTX, CTX, dtype=torch.bool, device=device).tril()
    mask = (same_doc & causal).unsqueeze(1)
    idx = torch.randint(0, VOCAB, (n, CTX + 1), device=device)
    return idx[:, :-1], idx[:, 1:], positions, mask


def lm_loss(model, n):
    x, y, pos, mask = packed_batch(n)
    logits = model(x, pos, mask).float().view(-1, VOCAB)
    ce = F.cross_entropy(logits, y.reshape(-1))
    z = torch.logsumexp(logits, dim=-1).square().mean()
    return ce + 1e-4 * z


class Lion:
    def __init__(self, params, lr=3e-4, betas=(0.9, 0.99), weight_decay=0.1):
        self.params = list(params)
        self.lr, self.betas, self.wd = lr, betas, weight_decay
        self.exp_avg = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        grads = [p.grad for p in self.params]
        b1, b2 = self.betas
        update = torch._foreach_lerp(self.exp_avg, grads, 1 - b1)
        torch._foreach_sign_(update)
        decayed = [p for p in self.params if p.ndim == 2]
        torch._foreach_mul_(decayed, 1 - self.lr * self.wd)
        torch._foreach_add_(self.params, update, alpha=-self.lr)
        torch._foreach_lerp_(self.exp_avg, grads, 1 - b2)


model = LM().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = Lion(model.parameters())


def amp_step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = lm_loss(model, BATCH)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    model.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {amp_step():.4f}")
report("first step")
for _ in range(3):
    loss = amp_step()
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    print(f"eval loss {lm_loss(model, BATCH).item():.4f}")
report("eval")

# Pure bf16 weights with fp32 masters kept by hand.
model.train()
masters = [p.detach().float() for p in model.parameters()]
del opt
model.bfloat16()
params = list(model.parameters())
opt = Lion(masters)
for step in range(3):
    loss = lm_loss(model, BATCH)
    loss.backward()
    for m, p in zip(masters, params, strict=True):
        m.grad = p.grad.float()
        p.grad = None
    torch.nn.utils.clip_grad_norm_(masters, 1.0, foreach=True)
    opt.step()
    for m in masters:
        m.grad = None
    with torch.no_grad():
        torch._foreach_copy_(params, masters)
    print(f"bf16 step {step} loss {loss.item():.4f}")
report("bf16 masters")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
