"""BitNet b1.58-style training of a LLaMA-like decoder written by hand.

BitLinear (no bias): RMSNorm of its input (no affine), activations quantized to int8 per token by absmax
(x * 127 / max|x|, round, clamp -128..127, rescale), weights quantized to ternary {-1, 0, +1} by absmean
(w / mean|w|, round, clamp -1..1, rescale), both with the straight-through estimator as
x + (x_q - x).detach(); latent weights fp32. Every projection of the blocks (q, k, v, o, gate, up, down) is
a BitLinear; embeddings, the final RMSNorm and the lm_head are full precision.

Model: 12 layers, d_model 1024, 16 heads, SwiGLU MLP 2816, vocabulary 32,000, rotary embeddings applied
by hand (cos/sin tables, rotate_half), SDPA with is_causal, untied lm_head. Batch 8 x 1024 tokens.

Training: bf16 autocast, AdamW foreach (lr 1.5e-3, betas 0.9/0.95, weight decay 0.1 on matrices), each
block under torch.utils.checkpoint(use_reentrant=False), clipping at 1.0.

Phases: the first step; 3 more steps; evaluation loss under inference_mode; then a second run: the same
model without checkpointing under fp16 autocast with torch.amp.GradScaler at batch 4 (unscale_, clip,
step, update), 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2044)
if SMALL:
    VOCAB, D, LAYERS, HEADS, FFN, CTX, BATCH = 512, 128, 2, 4, 352, 64, 2
else:
    VOCAB, D, LAYERS, HEADS, FFN, CTX, BATCH = 32000, 1024, 12, 16, 2816, 1024, 8
HD = D // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def activation_quant(x):
    scale = 127.0 / x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
    return (x * scale).round().clamp(-128, 127) / scale


def weight_quant(w):
    scale = 1.0 / w.abs().mean().clamp(min=1e-5)
    return (w * scale).round().clamp(-1, 1) / scale


class BitLinear(nn.Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out, bias=False)

    def forward(self, x):
        x = F.rms_norm(x, (x.shape[-1],), eps=1e-6)
        x_q = x + (activation_quant(x) - x).detach()
        w = self.weight
        w_q = w + (weight_quant(w) - w).detach()
        return F.linear(x_q, w_q)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.RMSNorm(D, eps=1e-6)
        self.q = BitLinear(D, D)
        self.k = BitLinear(D, D)
        self.v = BitLinear(D, D)
        self.o = BitLinear(D, D)
        self.mlp_norm = nn.RMSNorm(D, eps=1e-6)
        self.gate = BitLinear(D, FFN)
        self.up = BitLinear(D, FFN)
        self.down = BitLinear(FFN, D)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, HEADS, HD).transpose(1, 2)
        k = self.k(h).view(b, t, HEADS, HD).transpose(1, 2)
        v = self.v(h).view(b, t, HEADS, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class BitLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(D, eps=1e-6)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        freqs = torch.outer(torch.arange(CTX).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.use_checkpoint = True

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.embed(idx)
        for blk in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(blk, x, cos, sin, use_reentrant=False)
            else:
                x = blk(x, cos, sin)
        return self.lm_head(self.norm(x))


model = BitLM().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
groups = [
    {"params": [p for p in model.parameters() if p.ndim == 2], "weight_decay": 0.1},
    {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0},
]
opt = torch.optim.AdamW(groups, lr=1.5e-3, betas=(0.9, 0.95), foreach=True)


def lm_loss(idx):
    logits = model(idx[:, :-1])
    return F.cross_entropy(logits.view(-1, VOCAB).float(), idx[:, 1:].reshape(-1))


def bf16_step():
    idx = torch.randint(0, VOCAB, (BATCH, CTX + 1), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = lm_loss(idx)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {bf16_step():.4f}")
report("first step")
for _ in range(3):
    loss = bf16_step()
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    idx = torch.randint(0, VOCAB, (BATCH, CTX + 1), device=device)
    print(f"eval loss {lm_loss(idx).item():.4f}")
report("eval")

model.train()
model.use_checkpoint = False
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(3):
    idx = torch.randint(0, VOCAB, (BATCH // 2, CTX + 1), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = lm_loss(idx)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"fp16 step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
