"""A session-based recommender over ragged click sequences, packed without padding: 16,384 sessions
of 1 to 63 clicks (lengths from torch.randint, concatenated into one 1-D item stream), item
embeddings of 256 from a 200,000-item table, a per-click MLP, and session vectors pooled with
torch.segment_reduce (reduce "mean" for the representation, "max" for a second view, both with
backward) over the lengths; item popularity from torch.bincount and duplicate clicks collapsed by
unique_consecutive(return_counts=True) before the loss; in-batch sampled softmax over the unique
next items (torch.unique(return_inverse, return_counts)); fp32, AdamW, 4 steps; then an eval pass
scoring all sessions against the whole catalogue in chunks with topk 100; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11803)
S, MAXLEN, NITEMS, D, STEPS, CHUNK = (64, 8, 1000, 32, 2, 16) if SMALL else (16384, 64, 200000, 256, 4, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"


class SessionEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(NITEMS, D)
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.out = nn.Linear(2 * D, D)
        self.pop = nn.Linear(1, D)

    def forward(self, items, lengths, counts):
        h = self.mlp(self.emb(items)) + self.pop(counts.float().log1p().unsqueeze(-1))
        mean = torch.segment_reduce(h, "mean", lengths=lengths, unsafe=True)
        mx = torch.segment_reduce(h, "max", lengths=lengths, unsafe=True)
        return self.out(torch.cat([mean, mx], -1))


model = SessionEncoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def batch():
    lengths = torch.randint(1, MAXLEN, (S,), device=device)
    total = int(lengths.sum())
    items = torch.randint(0, NITEMS, (total,), device=device)
    items = torch.where(torch.rand(total, device=device) < 0.2, items.roll(1), items)
    nxt = torch.randint(0, NITEMS, (S,), device=device)
    return items, lengths, nxt


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    items, lengths, nxt = batch()
    pop = torch.bincount(items, minlength=NITEMS)
    dedup, rep = torch.unique_consecutive(items, return_counts=True)
    seg = torch.repeat_interleave(torch.arange(S, device=device), lengths)
    seg_dedup = seg[torch.cumsum(rep, 0) - 1]
    new_len = torch.bincount(seg_dedup, minlength=S)
    sess = model(dedup, new_len, pop[dedup])
    uniq, inv, cnt = torch.unique(nxt, return_inverse=True, return_counts=True)
    logits = sess @ model.emb(uniq).T - cnt.float().log()
    loss = F.cross_entropy(logits, inv)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} clicks {items.numel()} dedup {dedup.numel()} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del items, lengths, nxt, pop, dedup, rep, seg, seg_dedup, new_len, sess, uniq, inv, cnt, logits, loss

model.eval()
with torch.no_grad():
    items, lengths, nxt = batch()
    pop = torch.bincount(items, minlength=NITEMS)
    sess = model(items, lengths, pop[items])
    hits = 0
    for i in range(0, S, CHUNK):
        top = (sess[i : i + CHUNK] @ model.emb.weight.T).topk(100, -1).indices
        hits += int((top == nxt[i : i + CHUNK, None]).any(-1).sum())
if device == "cuda":
    print(
        f"eval hit@100 {hits / S:.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
