"""A MusicGen-like language model over neural-codec tokens by hand, on random codes and random text states.

Tokens: 4 EnCodec-like codebooks of 2,048 codes at 50 frames a second, in MusicGen's delay pattern
(codebook k shifted right by k steps, the holes filled with a special token 2,048; labels -100 there).
Model: the four codebooks' embeddings (2,049 x 1,024) summed, sinusoidal positions, 24 pre-LN decoder
layers of 1,024 (16 heads; causal self-attention by F.scaled_dot_product_attention(is_causal=True);
cross-attention to projected T5-base-sized text states (768 -> 1,024, 64 tokens with a key padding mask
as a boolean attn_mask); GELU MLP 4,096), a final LayerNorm and four Linear heads to 2,048 codes;
cross-entropy per codebook.
Phase 1: batch 16 x 10 s (500 frames + 3 delay steps), bf16 autocast, fused AdamW, clip_grad_norm_,
3 steps.
Phase 2: generation under inference_mode and bf16 autocast with classifier-free guidance (conditional
and null-text rows in one batch of 2 x 8, guidance scale 3), per-layer key/value caches preallocated
for 256 steps and written in place, the cross-attention keys/values computed once, top-k 250 sampling
by torch.topk and torch.multinomial, the delay pattern's holes forced, 256 steps.
Phase 3: right-padded clips of 4 to 10 s (lengths from a seeded Python random) with a boolean mask
combining causality and key padding for self-attention, every layer under torch.utils.checkpoint
(non-reentrant), fp32 without autocast, single-tensor Adam (foreach=False), batch 8, 2 steps.
3 phases after the model's."""

import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21506)
rng = random.Random(21506)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
K, CARD, RATE = 4, 2048, 50
SPECIAL = CARD
D, HEADS, FFN, LAYERS, TEXT_D, TEXT_LEN = (
    (1024, 16, 4096, 24, 768, 64) if not SMALL else (64, 4, 128, 2, 32, 8)
)
B1, SEC1, GEN_B, GEN_STEPS, B3 = (16, 10, 8, 256, 8) if not SMALL else (2, 1, 2, 8, 2)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def sinusoids(length, dim, offset=0):
    pos = torch.arange(offset, offset + length, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    return torch.cat([torch.cos(pos * freq), torch.sin(pos * freq)], dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.cq = nn.Linear(D, D, bias=False)
        self.ckv = nn.Linear(D, 2 * D, bias=False)
        self.co = nn.Linear(D, D, bias=False)
        self.fc1 = nn.Linear(D, FFN, bias=False)
        self.fc2 = nn.Linear(FFN, D, bias=False)

    def heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, HEADS, D // HEADS).transpose(1, 2)

    def merge(self, x):
        b, h, t, d = x.shape
        return x.transpose(1, 2).reshape(b, t, h * d)

    def forward(self, x, text, text_mask, self_mask=None):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        if self_mask is None:
            a = F.scaled_dot_product_attention(self.heads(q), self.heads(k), self.heads(v), is_causal=True)
        else:
            a = F.scaled_dot_product_attention(
                self.heads(q), self.heads(k), self.heads(v), attn_mask=self_mask
            )
        x = x + self.o(self.merge(a))
        ck, cv = self.ckv(text).chunk(2, dim=-1)
        a = F.scaled_dot_product_attention(
            self.heads(self.cq(self.ln2(x))), self.heads(ck), self.heads(cv), attn_mask=text_mask
        )
        x = x + self.co(self.merge(a))
        return x + self.fc2(F.gelu(self.fc1(self.ln3(x))))

    def step(self, x, cache_k, cache_v, t, ck, cv):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        cache_k[:, :, t : t + 1] = self.heads(k)
        cache_v[:, :, t : t + 1] = self.heads(v)
        a = F.scaled_dot_product_attention(self.heads(q), cache_k[:, :, : t + 1], cache_v[:, :, : t + 1])
        x = x + self.o(self.merge(a))
        a = F.scaled_dot_product_attention(self.heads(self.cq(self.ln2(x))), ck, cv)
        x = x + self.co(self.merge(a))
        return x + self.fc2(F.gelu(self.fc1(self.ln3(x))))


class CodecLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeds = nn.ModuleList(nn.Embedding(CARD + 1, D) for _ in range(K))
        self.text_proj = nn.Linear(TEXT_D, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.heads = nn.ModuleList(nn.Linear(D, CARD, bias=False) for _ in range(K))

    def embed(self, codes, offset=0):  # codes (B, K, T)
        x = sum(e(codes[:, k]) for k, e in enumerate(self.embeds))
        return x + sinusoids(codes.shape[-1], D, offset).to(x.dtype)

    def forward(self, codes, text, text_mask, self_mask=None, ckpt=False):
        x = self.embed(codes)
        text = self.text_proj(text)
        for layer in self.layers:
            if ckpt:
                x = checkpoint(layer, x, text, text_mask, self_mask, use_reentrant=False)
            else:
                x = layer(x, text, text_mask, self_mask)
        x = self.ln(x)
        return torch.stack([h(x) for h in self.heads], dim=1)  # (B, K, T, CARD)


def delayed(codes):
    """(B, K, T) -> (B, K, T + K - 1) in the delay pattern, and the labels with -100 in the holes."""
    b, k, t = codes.shape
    out = torch.full((b, k, t + k - 1), SPECIAL, dtype=codes.dtype, device=codes.device)
    for i in range(k):
        out[:, i, i : i + t] = codes[:, i]
    labels = out.masked_fill(out == SPECIAL, -100)
    return out, labels


def text_batch(b):
    text = torch.randn(b, TEXT_LEN, TEXT_D, device=device)
    lengths = torch.randint(8, TEXT_LEN + 1, (b,), device=device)
    keep = torch.arange(TEXT_LEN, device=device)[None] < lengths[:, None]
    return text, keep[:, None, None, :]  # (B, 1, 1, TEXT_LEN) boolean


def lm_loss(logits, labels):
    return F.cross_entropy(
        logits[:, :, :-1].reshape(-1, CARD).float(), labels[:, :, 1:].reshape(-1), ignore_index=-100
    )


model = CodecLM().to(device)
print(f"codec lm parameters {sum(p.numel() for p in model.parameters())}")
report("model")

# phase 1: bf16 autocast, fused AdamW
opt = torch.optim.AdamW(
    model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)
model.train()
for step in range(3):
    codes, labels = delayed(torch.randint(0, CARD, (B1, K, SEC1 * RATE), device=device))
    text, text_mask = text_batch(B1)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        logits = model(codes, text, text_mask)
    loss = lm_loss(logits, labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.4f} grad norm {norm.item():.3f}")
    del logits, loss
report("codec lm bf16 fused adamw")

# phase 2: classifier-free guided generation with a KV cache
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    text, text_mask = text_batch(GEN_B)
    text = torch.cat([model.text_proj(text), torch.zeros(GEN_B, TEXT_LEN, D, device=device)])
    hd = D // HEADS
    cache_dtype = torch.bfloat16 if amp else torch.float32
    cross = []
    for layer in model.layers:
        ck, cv = layer.ckv(text).chunk(2, dim=-1)
        cross.append((layer.heads(ck), layer.heads(cv)))
    caches = [
        (
            torch.empty(2 * GEN_B, HEADS, GEN_STEPS, hd, device=device, dtype=cache_dtype),
            torch.empty(2 * GEN_B, HEADS, GEN_STEPS, hd, device=device, dtype=cache_dtype),
        )
        for _ in model.layers
    ]
    tokens = torch.full((GEN_B, K, GEN_STEPS + 1), SPECIAL, dtype=torch.long, device=device)
    for t in range(GEN_STEPS):
        cur = tokens[:, :, t : t + 1].repeat(2, 1, 1)
        x = model.embed(cur, offset=t)
        for layer, (ck, cv), (kc, vc) in zip(model.layers, cross, caches, strict=True):
            x = layer.step(x, kc, vc, t, ck, cv)
        x = model.ln(x)
        logits = torch.stack([h(x[:, 0]) for h in model.heads], dim=1).float()  # (2B, K, CARD)
        cond, uncond = logits.chunk(2)
        guided = uncond + 3.0 * (cond - uncond)
        top, idx = guided.topk(250, dim=-1)
        choice = torch.multinomial(F.softmax(top, dim=-1).view(-1, 250), 1).view(GEN_B, K, 1)
        nxt = idx.gather(-1, choice).squeeze(-1)
        for k in range(K):
            if t + 1 <= k:
                nxt[:, k] = SPECIAL
        tokens[:, :, t + 1] = nxt
print(f"generated tokens {tuple(tokens.shape)}")
del text, cross, caches, tokens, x, logits, guided, top, idx, nxt
report("cfg kv cache top-k generation")

# phase 3: padded variable-length clips, explicit masks, checkpointing, fp32 single-tensor Adam
del opt
opt = torch.optim.Adam(model.parameters(), lr=5e-5, foreach=False)
model.train()
for step in range(2):
    lengths = [rng.randint(4 * RATE if not SMALL else 10, SEC1 * RATE) for _ in range(B3)]
    codes, labels = delayed(torch.randint(0, CARD, (B3, K, SEC1 * RATE), device=device))
    total = codes.shape[-1]
    pos = torch.arange(total, device=device)
    valid = pos[None] < torch.tensor(lengths, device=device)[:, None] + K - 1  # (B, T)
    labels = labels.masked_fill(~valid[:, None], -100)
    self_mask = (pos[None, :] <= pos[:, None])[None, None] & valid[:, None, None, :]
    text, text_mask = text_batch(B3)
    logits = model(codes, text, text_mask, self_mask=self_mask, ckpt=True)
    loss = lm_loss(logits, labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"fp32 step {step} lengths {lengths} loss {loss.item():.4f}")
    del logits, loss
report("padded mask checkpoint fp32 single-tensor adam")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
