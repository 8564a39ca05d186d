"""A Music Transformer (Huang et al. 2018) written by hand on the MIDI performance-event vocabulary of the
Magenta / Oore et al. encoding: 128 note-on, 128 note-off, 100 time-shift and 32 velocity events = 388
tokens plus pad and end (390). Decoder-only, 6 layers, d_model 512, 8 heads of 64, feed-forward 2048
(ReLU), post-LN as in the paper, dropout 0.1. Self-attention uses learned relative position embeddings
E_r (max_len x d_head per layer, shared by the heads) and the memory-efficient "skewing" procedure:
S_rel = skew(Q @ E_r^T) (pad one column on the left, reshape to (L + 1, L), drop the first row), added to
Q @ K^T before the causal mask (masked_fill with -inf) and softmax; all by hand, no SDPA.

Training in fp32 on batches of 8 x 1,024 events (random tokens made on the device), cross-entropy with
label smoothing 0.1 ignoring the pad token, AdamW (foreach, lr 1e-4, betas (0.9, 0.98)), a Noam-style
LambdaLR warm-up and gradient clipping at 1.0. Phases: the first step; 2 more steps; evaluation under
torch.no_grad on 4 x 2,048-event sequences (loss and perplexity); then sampling with a per-layer KV cache:
a 256-event primer (prefill with the skewed relative attention), 64 new events by top-k (k = 32,
temperature 1.0) where each new query's relative logits are q @ E_r[-t:]^T. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19101)
if SMALL:
    B, L, LAYERS, D, HEADS, FF, EVAL_B, EVAL_L, PRIMER, NEW, STEPS = 2, 64, 2, 64, 4, 128, 1, 128, 16, 8, 1
else:
    B, L, LAYERS, D, HEADS, FF, EVAL_B, EVAL_L, PRIMER, NEW, STEPS = (
        8,
        1024,
        6,
        512,
        8,
        2048,
        4,
        2048,
        256,
        64,
        2,
    )
VOCAB = 390
PAD = 388
MAX_LEN = max(L, EVAL_L, PRIMER + NEW)
device = "cuda" if torch.cuda.is_available() else "cpu"


def skew(rel):
    # rel: (b, h, n, n) logits of each query against relative positions -(n-1)..0
    b, h, n, _ = rel.shape
    padded = F.pad(rel, (1, 0))
    padded = padded.reshape(b, h, n + 1, n)
    return padded[:, :, 1:, :]


class RelativeGlobalAttention(nn.Module):
    def __init__(self, d, heads, max_len, dropout=0.1):
        super().__init__()
        self.h = heads
        self.dh = d // heads
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, d)
        self.wv = nn.Linear(d, d)
        self.fc = nn.Linear(d, d)
        self.E = nn.Parameter(torch.randn(max_len, self.dh) * 0.02)
        self.drop = nn.Dropout(dropout)
        self.max_len = max_len

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.h, self.dh).transpose(1, 2)

    def forward(self, x, cache=None):
        b, n, d = x.shape
        q = self.split(self.wq(x))
        k = self.split(self.wk(x))
        v = self.split(self.wv(x))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        t = k.shape[2]
        e = self.E[self.max_len - t :]
        qe = torch.matmul(q, e.transpose(0, 1))
        if n == t:
            srel = skew(qe)
        else:
            # single new query at position t - 1: its relative logits are the last row
            srel = qe
        logits = (torch.matmul(q, k.transpose(-2, -1)) + srel) / math.sqrt(self.dh)
        if n > 1:
            mask = torch.triu(torch.ones(n, t, dtype=torch.bool, device=x.device), diagonal=t - n + 1)
            logits = logits.masked_fill(mask, float("-inf"))
        attn = self.drop(F.softmax(logits, dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, d)
        return self.fc(out)


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, ff, max_len, dropout=0.1):
        super().__init__()
        self.attn = RelativeGlobalAttention(d, heads, max_len, dropout)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d))
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cache=None):
        x = self.ln1(x + self.drop(self.attn(x, cache)))
        return self.ln2(x + self.drop(self.ff(x)))


class MusicTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.layers = nn.ModuleList([DecoderLayer(D, HEADS, FF, MAX_LEN) for _ in range(LAYERS)])
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(D, VOCAB)

    def forward(self, tokens, caches=None):
        x = self.drop(self.embed(tokens) * math.sqrt(D))
        for i, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[i])
        return self.out(x)


model = MusicTransformer().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, foreach=True)
warmup = 4000
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min((s + 1) ** -0.5, (s + 1) * warmup**-1.5) * warmup**0.5
)
criterion = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)


def train_step():
    seq = torch.randint(0, 388, (B, L + 1), device=device)
    inp, tgt = seq[:, :-1], seq[:, 1:]
    logits = model(inp)
    loss = criterion(logits.reshape(-1, VOCAB), tgt.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    seq = torch.randint(0, 388, (EVAL_B, EVAL_L + 1), device=device)
    logits = model(seq[:, :-1])
    eval_loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1), ignore_index=PAD)
print(f"eval loss {eval_loss.item():.4f} ppl {math.exp(eval_loss.item()):.1f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del logits


def top_k_sample(logits, k=32, temperature=1.0):
    logits = logits / temperature
    vals, idx = torch.topk(logits, k, dim=-1)
    probs = F.softmax(vals, dim=-1)
    choice = torch.multinomial(probs, 1)
    return idx.gather(-1, choice)


with torch.no_grad():
    primer = torch.randint(0, 388, (EVAL_B, PRIMER), device=device)
    caches = [dict() for _ in range(LAYERS)]
    logits = model(primer, caches)
    generated = [top_k_sample(logits[:, -1])]
    for _ in range(NEW - 1):
        logits = model(generated[-1], caches)
        generated.append(top_k_sample(logits[:, -1]))
    events = torch.cat([primer, *generated], dim=1).cpu()
print(f"sampled {tuple(events.shape)} distinct events {events.unique().numel()}")
if device == "cuda":
    print(f"sampling peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
