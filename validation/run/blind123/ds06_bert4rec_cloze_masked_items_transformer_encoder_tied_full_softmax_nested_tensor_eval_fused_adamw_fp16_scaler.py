"""BERT4Rec written from the paper: item sequences of up to 200 over a catalogue of 60,000 items
(left-padded, padding id 0, mask id 60,001), learned positions, nn.TransformerEncoder of 2
post-norm GELU layers (width 256, 4 heads, dropout 0.1) with a key padding mask, the Cloze
objective (20% of the real items masked, at least the last one), the masked positions gathered
before an output projection tied to the item embedding plus a bias, full softmax cross-entropy over
the catalogue; fp16 autocast with GradScaler (unscale, clip 5.0), fused AdamW with decoupled
weight decay off for biases and LayerNorms, linear warm-up by LambdaLR; 3 training steps of 256
sequences, then next-item ranking of 1,024 users in fp32 under model.eval and no_grad (the encoder's
fast path over a nested tensor from the padding mask), the history masked out of the scores, topk 10
and NDCG@10; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12306)
N_ITEMS = 500 if SMALL else 60000
PAD, MASK = 0, N_ITEMS + 1
VOCAB = N_ITEMS + 2
MAXLEN = 32 if SMALL else 200
D, HEADS, LAYERS = (64, 2, 2) if SMALL else (256, 4, 2)
B = 16 if SMALL else 256
N_EVAL = 32 if SMALL else 1024
device = "cuda" if torch.cuda.is_available() else "cpu"


class BERT4Rec(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_emb = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos_emb = nn.Embedding(MAXLEN, D)
        self.norm = nn.LayerNorm(D)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS)
        self.out_bias = nn.Parameter(torch.zeros(VOCAB))
        self.head = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D))

    def forward(self, seq):
        pad = seq == PAD
        pos = torch.arange(seq.shape[1], device=seq.device)
        x = self.drop(self.norm(self.item_emb(seq) + self.pos_emb(pos)[None]))
        return self.encoder(x, src_key_padding_mask=pad)

    def scores(self, h):
        return self.head(h) @ self.item_emb.weight.T + self.out_bias


def make_batch(n):
    lengths = torch.randint(5, MAXLEN + 1, (n, 1), device=device)
    seq = torch.randint(1, N_ITEMS + 1, (n, MAXLEN), device=device)
    seq = seq.masked_fill(torch.arange(MAXLEN, device=device).flip(0)[None] >= lengths, PAD)
    return seq


model = BERT4Rec().to(device)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-3, fused=device == "cuda",
)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    seq = make_batch(B)
    real = seq != PAD
    cloze = (torch.rand(seq.shape, device=device) < 0.2) & real
    cloze[:, -1] = True
    labels = seq[cloze]
    inp = seq.masked_fill(cloze, MASK)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        h = model(inp)
        logits = model.scores(h[cloze])
        loss = F.cross_entropy(logits.float(), labels)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    if device == "cuda":
        print(
            f"train {step} masked {labels.numel()} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del h, logits, loss

model.eval()
ndcg = []
with torch.no_grad():
    for s in range(0, N_EVAL, 256):
        seq = make_batch(min(256, N_EVAL - s))
        target = seq[:, -1].clone()
        inp = torch.cat([seq[:, 1:-1], torch.full_like(seq[:, :1], MASK), torch.full_like(seq[:, :1], PAD)], 1)
        inp = torch.roll(inp, 1, dims=1)
        h = model(inp)
        sc = model.scores(h[:, -1])
        sc[:, PAD] = float("-inf")
        sc[:, MASK] = float("-inf")
        sc.scatter_(1, seq[:, :-1], float("-inf"))
        sc.scatter_(1, target[:, None], model.scores(h[:, -1]).gather(1, target[:, None]))
        top = sc.topk(10, dim=1).indices
        hit = (top == target[:, None]).float()
        ndcg.append((hit / torch.log2(torch.arange(2, 12, device=device).float())).sum(1))
    ndcg = torch.cat(ndcg).mean()
if device == "cuda":
    print(
        f"rank ndcg@10 {ndcg.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
