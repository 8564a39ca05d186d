"""RETRO-style retrieval-enhanced decoder (Borgeaud et al. 2022) trained on random tokens.

Model: a pre-LN decoder of 12 layers (d 768, 12 heads, MLP 3072 with GELU, vocabulary 32,000, RoPE-free
learned positions, untied lm_head). Every sequence of 2048 tokens is cut into 32 chunks of 64 tokens;
each chunk comes with 2 retrieved neighbours of 128 tokens (neighbour + continuation), random here.
A 2-layer bidirectional neighbour encoder (d 768) embeds the neighbours and cross-attends to the
decoder's activations of their chunk (taken at the first retrieval layer). Chunked cross-attention
(CCA) layers 6, 9 and 11 shift the sequence by chunk-1 tokens, let every chunk's 64 queries attend to
the 256 encoded neighbour tokens of its chunk (SDPA without a mask), and shift back.

Phases: the first optimizer step (bf16 autocast, fused AdamW, batch 4); 2 more steps; evaluation loss
under no_grad at batch 8; then a second model trained under fp16 autocast with GradScaler, every
decoder block checkpointed (non-reentrant) and a foreach Adam. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2071)
if SMALL:
    VOCAB, D, HEADS, LAYERS, SEQ, CHUNK, K, R, BATCH = 512, 128, 4, 4, 256, 32, 2, 32, 2
    CCA_LAYERS = (2, 3)
else:
    VOCAB, D, HEADS, LAYERS, SEQ, CHUNK, K, R, BATCH = 32000, 768, 12, 12, 2048, 64, 2, 128, 4
    CCA_LAYERS = (6, 9, 11)
NCHUNK = SEQ // CHUNK
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Attention(nn.Module):
    def __init__(self, causal):
        super().__init__()
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.o = nn.Linear(D, D)
        self.causal = causal

    def forward(self, x, ctx=None):
        b, t, _ = x.shape
        ctx = x if ctx is None else ctx
        s = ctx.shape[1]
        q = self.q(x).view(b, t, HEADS, D // HEADS).transpose(1, 2)
        k, v = self.kv(ctx).view(b, s, 2, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.o(a.transpose(1, 2).reshape(b, t, D))


def mlp():
    return nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))


class EncoderLayer(nn.Module):
    """Bidirectional self-attention over a neighbour, cross-attention to its chunk, MLP."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention(causal=False)
        self.cross = Attention(causal=False)
        self.mlp = mlp()

    def forward(self, e, chunk_h):
        e = e + self.attn(self.ln1(e))
        e = e + self.cross(self.ln2(e), chunk_h)
        return e + self.mlp(self.ln3(e))


class NeighbourEncoder(nn.Module):
    def __init__(self, tok_emb):
        super().__init__()
        self.tok_emb = tok_emb
        self.pos = nn.Embedding(R, D)
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(2)])
        self.ln = nn.LayerNorm(D)

    def forward(self, neighbours, h):
        # neighbours: (B, NCHUNK, K, R) token ids; h: (B, SEQ, D) decoder activations
        b = neighbours.shape[0]
        e = self.tok_emb(neighbours.view(b * NCHUNK * K, R)) + self.pos.weight
        chunk_h = (
            h.view(b, NCHUNK, 1, CHUNK, D).expand(b, NCHUNK, K, CHUNK, D).reshape(b * NCHUNK * K, CHUNK, D)
        )
        for layer in self.layers:
            e = layer(e, chunk_h)
        return self.ln(e).view(b, NCHUNK, K * R, D)


class DecoderBlock(nn.Module):
    def __init__(self, cca):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention(causal=True)
        self.mlp = mlp()
        self.cca = Attention(causal=False) if cca else None
        self.ln_cca = nn.LayerNorm(D) if cca else None

    def chunked_cross_attention(self, h, enc):
        b = h.shape[0]
        # shift by CHUNK - 1 so that token i only sees neighbours of chunks it has fully seen
        shifted = F.pad(h[:, CHUNK - 1 :], (0, 0, 0, CHUNK - 1))
        q = shifted.reshape(b * NCHUNK, CHUNK, D)
        out = self.cca(q, enc.reshape(b * NCHUNK, K * R, D)).view(b, SEQ, D)
        return F.pad(out, (0, 0, CHUNK - 1, 0))[:, :SEQ]

    def forward(self, h, enc):
        h = h + self.attn(self.ln1(h))
        if self.cca is not None:
            h = h + self.chunked_cross_attention(self.ln_cca(h), enc)
        return h + self.mlp(self.ln2(h))


class Retro(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, D)
        self.pos_emb = nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList([DecoderBlock(i in CCA_LAYERS) for i in range(LAYERS)])
        self.encoder = NeighbourEncoder(self.tok_emb)
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.use_checkpoint = False

    def forward(self, idx, neighbours):
        h = self.tok_emb(idx) + self.pos_emb.weight
        enc = None
        for i, blk in enumerate(self.blocks):
            if i == CCA_LAYERS[0]:
                enc = self.encoder(neighbours, h)
            if self.use_checkpoint and self.training:
                h = checkpoint(blk, h, enc, use_reentrant=False)
            else:
                h = blk(h, enc)
        return self.head(self.ln_f(h))


def batch(n):
    idx = torch.randint(0, VOCAB, (n, SEQ + 1), device=device)
    neighbours = torch.randint(0, VOCAB, (n, NCHUNK, K, R), device=device)
    return idx[:, :-1], idx[:, 1:], neighbours


def loss_fn(model, n, dtype):
    x, y, nb = batch(n)
    with torch.autocast("cuda", dtype=dtype, enabled=amp):
        logits = model(x, nb)
    return F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))


model = Retro().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=amp)

model.train()
for step in range(3):
    loss = loss_fn(model, BATCH, torch.bfloat16)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
with torch.no_grad():
    eval_loss = loss_fn(model, 2 * BATCH, torch.bfloat16).item()
print(f"eval loss {eval_loss:.4f}")
report("eval")

del model, opt
model = Retro().to(device)
model.use_checkpoint = True
opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
model.train()
for step in range(2):
    loss = loss_fn(model, BATCH, torch.float16)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"fp16 checkpointed step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("fp16 checkpointed")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
