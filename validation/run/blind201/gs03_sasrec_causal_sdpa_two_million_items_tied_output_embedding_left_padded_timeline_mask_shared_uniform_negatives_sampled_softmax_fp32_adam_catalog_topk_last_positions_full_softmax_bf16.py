"""SASRec (Kang & McAuley 2018) over a 2,000,000-item catalog: a sampled softmax, then full-catalog scoring.

Model: item embedding nn.Embedding(2,000,001, 128, padding_idx=0) scaled by sqrt(128), learned positions
(200), dropout 0.2; 2 pre-LN blocks, each causal self-attention with 2 heads through
F.scaled_dot_product_attention(is_causal=True) and a point-wise feed-forward 128-128-128 (ReLU, dropout),
the padded timeline zeroed after every block as the reference does; a final LayerNorm. The output layer is
the item embedding itself (tied): a score is the dot product of a hidden state with an item's embedding.

Data: 256 users' last 200 interactions, left-padded with id 0 (lengths 20 to 200, drawn on the host), the
target at each position the next item. Loss: a sampled softmax against 4,096 uniform negatives shared by the
whole batch (the positive's logit first, cross-entropy with label 0), padded positions ignored. fp32,
torch.optim.Adam (lr 1e-3, betas (0.9, 0.98)).

Phases: the first step; 5 more steps; evaluation under inference_mode: the last position's hidden state
of 2,048 users (chunks of 512) scored against every item, already-seen items masked with scatter_ to -inf,
top-10 and a hit rate; then 3 steps of full-softmax cross-entropy over the whole catalog for the last 4
positions of 128 users under bf16 autocast (the logits cast to fp32 for the loss). 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(20103)
if SMALL:
    N_ITEMS, D, L, B, N_NEG, STEPS = 3000, 32, 20, 8, 64, 1
    EVAL_USERS, EVAL_CHUNK, FULL_B, LAST = 32, 16, 4, 2
else:
    N_ITEMS, D, L, B, N_NEG, STEPS = 2_000_000, 128, 200, 256, 4096, 5
    EVAL_USERS, EVAL_CHUNK, FULL_B, LAST = 2048, 512, 128, 4
HEADS, BLOCKS, DROPOUT = 2, 2, 0.2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        gb = 1e9
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated() / gb:.3f} GB,",
            f"reserved {torch.cuda.memory_reserved() / gb:.3f} GB",
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D, eps=1e-8)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D, eps=1e-8)
        self.ff = nn.Sequential(
            nn.Linear(D, D), nn.ReLU(), nn.Dropout(DROPOUT), nn.Linear(D, D), nn.Dropout(DROPOUT)
        )

    def forward(self, x, timeline):
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(
            q, k, v, dropout_p=DROPOUT if self.training else 0.0, is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        x = x + self.ff(self.ln2(x))
        return x * timeline


class SASRec(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(N_ITEMS + 1, D, padding_idx=0)
        self.pos = nn.Embedding(L, D)
        self.drop = nn.Dropout(DROPOUT)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.ln = nn.LayerNorm(D, eps=1e-8)

    def forward(self, seq):
        timeline = (seq != 0).unsqueeze(-1).to(self.item.weight.dtype)
        x = self.item(seq) * D**0.5 + self.pos(torch.arange(seq.shape[1], device=seq.device))
        x = self.drop(x) * timeline
        for blk in self.blocks:
            x = blk(x, timeline)
        return self.ln(x)


def host_sequences(b):
    """Left-padded item sequences as a data loader yields them: input ids and next-item targets."""
    lengths = torch.randint(20 if not SMALL else 2, L + 1, (b,))
    seq = torch.randint(1, N_ITEMS + 1, (b, L + 1))
    pad = torch.arange(L + 1) < (L + 1 - lengths - 1).unsqueeze(1)
    seq[pad] = 0
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


model = SASRec().to(device)
print(f"SASRec: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))


def sampled_step():
    seq, tgt = (t.to(device) for t in host_sequences(B))
    opt.zero_grad(set_to_none=True)
    h = model(seq)
    neg = torch.randint(1, N_ITEMS + 1, (N_NEG,), device=device)
    pos_logit = (h * model.item(tgt)).sum(-1, keepdim=True)
    neg_logit = h @ model.item(neg).T
    logits = torch.cat([pos_logit, neg_logit], -1)
    labels = torch.zeros_like(tgt)
    labels[tgt == 0] = -100
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {sampled_step():.4f}")
report("first step")
for _ in range(STEPS):
    loss = sampled_step()
print(f"step {STEPS} loss {loss:.4f}")
report("train")

model.eval()
hits = 0
with torch.inference_mode():
    seq_all, tgt_all = host_sequences(EVAL_USERS)
    for start in range(0, EVAL_USERS, EVAL_CHUNK):
        seq = seq_all[start : start + EVAL_CHUNK].to(device)
        target = tgt_all[start : start + EVAL_CHUNK, -1].to(device)
        h = model(seq)[:, -1]
        scores = h @ model.item.weight.T
        scores[:, 0] = float("-inf")
        scores.scatter_(1, seq, float("-inf"))
        top = scores.topk(10, dim=1).indices
        hits += (top == target[:, None]).any(1).sum().item()
print(f"HR@10 {hits / EVAL_USERS:.4f}")
del scores, top, h
report("catalog scoring")

model.train()
for s in range(3):
    seq, tgt = (t.to(device) for t in host_sequences(FULL_B))
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        h = model(seq)[:, -LAST:]
        logits = h @ model.item.weight.T
    loss = F.cross_entropy(logits.float().view(-1, N_ITEMS + 1), tgt[:, -LAST:].reshape(-1))
    loss.backward()
    opt.step()
    print(f"full softmax step {s} loss {loss.item():.4f}")
if device == "cuda":
    print(f"allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
