"""Supervised fine-tuning with sequence packing written by hand, as people do it without a packing
library: a Llama-style decoder (8 layers, 2,048 wide, 16 heads, SwiGLU of 5,632, RMSNorm, RoPE,
vocabulary 32,000, fp32 parameters, untied head) and prompt/response examples of random lengths
packed greedily on the host into rows of 2,048 tokens (the rest of a row padded); every document's
position ids restart at 0 (RoPE's cos and sin gathered by position id), a block-diagonal causal
mask of (B, 1, T, T) booleans built from the document ids keeps attention inside a document
(F.scaled_dot_product_attention with attn_mask), and the labels are -100 on every prompt token,
on each document's last token and on padding. bf16 autocast, AdamW (foreach), clipping, gradient
accumulation over 4 packed micro-batches of 4 rows; 3 optimizer steps, then the loss on 8 packed
rows under no_grad, then the same examples padded one per row (no packing, a padding mask) under
no_grad for comparison; 6 phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15304)
random.seed(15304)
if SMALL:
    V, D, L, H, FF, B, T, ACC = 512, 64, 2, 4, 160, 2, 128, 2
    PROMPT, RESP = (4, 24), (4, 40)
else:
    V, D, L, H, FF, B, T, ACC = 32000, 2048, 8, 16, 5632, 4, 2048, 4
    PROMPT, RESP = (32, 384), (32, 768)
HD = D // H
device = "cuda" if torch.cuda.is_available() else "cpu"
IGNORE = -100


def rope_tables(max_pos):
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    f = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = RMSNorm(D)
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(D, D, bias=False)
        self.v = nn.Linear(D, D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = RMSNorm(D)
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, H, HD).transpose(1, 2)
        k = self.k(h).view(b, t, H, HD).transpose(1, 2)
        v = self.v(h).view(b, t, H, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        cos, sin = rope_tables(T)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids, position_ids, mask):
        x = self.embed(ids)
        cos = self.cos[position_ids].unsqueeze(1)
        sin = self.sin[position_ids].unsqueeze(1)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(self.norm(x))


def examples(n):
    out = []
    for _ in range(n):
        p, r = random.randint(*PROMPT), random.randint(*RESP)
        out.append((p, r))
    return out


def pack(exs, rows):
    """Greedy first-fit packing on the host: tokens, labels, position ids, document ids."""
    ids = torch.zeros(rows, T, dtype=torch.long)
    labels = torch.full((rows, T), IGNORE, dtype=torch.long)
    pos = torch.zeros(rows, T, dtype=torch.long)
    doc = torch.full((rows, T), -1, dtype=torch.long)
    fill = [0] * rows
    placed = 0
    for n, (p, r) in enumerate(exs):
        length = p + r
        for row in range(rows):
            if fill[row] + length <= T:
                s = fill[row]
                toks = torch.randint(1, V, (length,))
                ids[row, s : s + length] = toks
                labels[row, s + p - 1 : s + length - 1] = toks[p:]
                pos[row, s : s + length] = torch.arange(length)
                doc[row, s : s + length] = n
                fill[row] += length
                placed += 1
                break
    return ids, labels, pos, doc, placed


def block_diagonal_mask(doc):
    t = doc.shape[1]
    same = doc[:, :, None] == doc[:, None, :]
    causal = torch.ones(t, t, dtype=torch.bool, device=doc.device).tril()
    mask = same & causal[None]
    mask |= torch.eye(t, dtype=torch.bool, device=doc.device)[None]  # padding rows attend to themselves
    return mask[:, None]


def to_device(*ts):
    return [t.to(device, non_blocking=True) for t in ts]


model = Decoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def packed_loss(ids, labels, pos, doc):
    ids, labels, pos, doc = to_device(ids, labels, pos, doc)
    mask = block_diagonal_mask(doc)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(ids, pos, mask)
    return F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=IGNORE)


model.train()
for step in range(3):
    for _ in range(ACC):
        ids, labels, pos, doc, _ = pack(examples(6 * B), B)
        loss = packed_loss(ids, labels, pos, doc)
        (loss / ACC).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
exs = examples(12 * B)
with torch.no_grad():
    ids, labels, pos, doc, placed = pack(exs, 2 * B)
    val = packed_loss(ids, labels, pos, doc)
if device == "cuda":
    print(
        f"packed eval docs {placed} loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

# the same examples one per row, right-padded to the longest, with a padding mask
with torch.no_grad():
    longest = max(p + r for p, r in exs[: 2 * B])
    ids = torch.zeros(2 * B, longest, dtype=torch.long)
    labels = torch.full((2 * B, longest), IGNORE, dtype=torch.long)
    keep = torch.zeros(2 * B, longest, dtype=torch.bool)
    for row, (p, r) in enumerate(exs[: 2 * B]):
        toks = torch.randint(1, V, (p + r,))
        ids[row, : p + r] = toks
        labels[row, p - 1 : p + r - 1] = toks[p:]
        keep[row, : p + r] = True
    ids, labels, keep = to_device(ids, labels, keep)
    pos = torch.arange(longest, device=device).expand(2 * B, -1)
    causal = torch.ones(longest, longest, dtype=torch.bool, device=device).tril()
    mask = (causal[None] & keep[:, None, :]) | torch.eye(longest, dtype=torch.bool, device=device)[None]
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(ids, pos, mask[:, None])
    val_pad = F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=IGNORE)
if device == "cuda":
    print(
        f"padded eval loss {val_pad.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
