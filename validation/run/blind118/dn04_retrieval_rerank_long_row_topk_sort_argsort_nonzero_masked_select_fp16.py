"""Two-stage dense retrieval with hard-negative mining, as a search team writes it: a 2-layer
query tower (fp16 weights) against a 1,000,000 x 256 fp16 document index; stage one scores 512
queries against the whole index in one matmul and takes topk 1,000 along rows of 1,000,000; the
candidates are re-sorted with torch.sort (descending, stable) and argsort of a recency-adjusted
score; boolean masks over the score matrix (threshold) feed nonzero and masked_select to collect
every (query, doc) pair above it, and boolean indexing picks hard negatives for a contrastive
update of the tower (fp16 weights, fp32 loss, SGD, 3 steps); then an inference pass with a full
argsort of one 1,000,000-long row per query chunk of 64; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11805)
NDOC, D, Q, K, STEPS, CH = (5000, 32, 16, 50, 2, 8) if SMALL else (1_000_000, 256, 512, 1000, 3, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.float16 if device == "cuda" else torch.float32

index = F.normalize(torch.randn(NDOC, D, device=device), dim=-1).to(dt)
age_days = torch.rand(NDOC, device=device) * 365
tower = nn.Sequential(nn.Linear(D, 1024), nn.GELU(), nn.Linear(1024, D)).to(device=device, dtype=dt)
opt = torch.optim.SGD(tower.parameters(), lr=1e-2)
if device == "cuda":
    print(f"index {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    raw = torch.randn(Q, D, device=device, dtype=dt)
    q = F.normalize(tower(raw), dim=-1)
    with torch.no_grad():
        scores = q @ index.T
        top_s, top_i = scores.topk(K, dim=-1)
        adj = top_s.float() - 1e-4 * age_days[top_i]
        order = adj.argsort(dim=-1, descending=True)
        rer_i = top_i.gather(1, order)
        s_sorted, _ = torch.sort(adj, dim=-1, descending=True, stable=True)
        mask = scores > 0.2
        pairs = mask.nonzero()
        vals = scores.masked_select(mask)
        hard = (top_s > 0.15) & (top_s < s_sorted[:, :1].half())
        neg_ids = top_i[hard]
        pos_ids = rer_i[:, 0]
    pos = index[pos_ids]
    neg = index[neg_ids[: 8 * Q]]
    logits = torch.cat([(q * pos).sum(-1, keepdim=True), q @ neg.T], 1).float() / 0.05
    loss = F.cross_entropy(logits, torch.zeros(Q, dtype=torch.long, device=device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} pairs {pairs.size(0)} vals {vals.numel()} negs {neg_ids.numel()}"
            f" loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del (
        raw,
        q,
        scores,
        top_s,
        top_i,
        adj,
        order,
        rer_i,
        s_sorted,
        mask,
        pairs,
        vals,
        hard,
        neg_ids,
        pos_ids,
        pos,
        neg,
    )
    del logits, loss

with torch.no_grad():
    raw = torch.randn(Q, D, device=device, dtype=dt)
    q = F.normalize(tower(raw), dim=-1)
    ranks = []
    for i in range(0, Q, CH):
        s = q[i : i + CH] @ index.T
        ranks.append(s.argsort(dim=-1, descending=True)[:, :10])
    ranks = torch.cat(ranks)
if device == "cuda":
    print(
        f"full rank {tuple(ranks.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
