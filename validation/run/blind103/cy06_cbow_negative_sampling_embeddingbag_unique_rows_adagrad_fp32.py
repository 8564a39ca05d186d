"""word2vec CBOW with negative sampling on the GPU in fp32: vocabulary 500,000, 300 dimensions; each
batch is 4,096 target words whose context windows (2 to 10 words, Zipf-distributed ids) are built on
the host as one flat id list with bag offsets and copied to the GPU, the context averaged by
nn.EmbeddingBag(mode="mean"), 20 negatives per target drawn on the GPU by torch.randint from a
seeded CUDA torch.Generator; the loss is -log sigmoid of the positive score and of the negated
negative scores; a hand-written lazy Adagrad updates only the rows the batch touched (torch.unique
of the ids, index_select of the dense gradients, index_add_ into the squared-gradient sums and the
weights); 3 steps; then the 10 nearest words of 1,024 queries by cosine over the whole table in
chunks of 100,000; 5 phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10306)
rng = random.Random(10306)
V, D, B, K, Q, CHUNK = (1000, 16, 64, 5, 8, 300) if SMALL else (500000, 300, 4096, 20, 1024, 100000)
LR = 0.05
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator(device=device)
gen.manual_seed(1234)


def zipf_id():
    return min(int(rng.paretovariate(1.1)) - 1, V - 1)


def batch():
    flat, offsets, targets = [], [], []
    for _ in range(B):
        offsets.append(len(flat))
        flat.extend(zipf_id() for _ in range(rng.randint(2, 10)))
        targets.append(zipf_id())
    return torch.tensor(flat).to(device), torch.tensor(offsets).to(device), torch.tensor(targets).to(device)


ctx_emb = nn.EmbeddingBag(V, D, mode="mean").to(device)
out_emb = nn.Embedding(V, D).to(device)
nn.init.uniform_(ctx_emb.weight, -0.5 / D, 0.5 / D)
nn.init.zeros_(out_emb.weight)
acc = {w: torch.full_like(w, 0.1) for w in (ctx_emb.weight, out_emb.weight)}


@torch.no_grad()
def lazy_adagrad(w, ids):
    rows = torch.unique(ids)
    g = w.grad.index_select(0, rows)
    acc[w].index_add_(0, rows, g * g)
    w.index_add_(0, rows, -LR * g / (acc[w].index_select(0, rows).sqrt() + 1e-10))
    return rows.numel()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    flat, offsets, targets = batch()
    negs = torch.randint(0, V, (B, K), device=device, generator=gen)
    h = ctx_emb(flat, offsets)
    pos = (h * out_emb(targets)).sum(-1)
    neg = torch.bmm(out_emb(negs), h.unsqueeze(-1)).squeeze(-1)
    loss = -(F.logsigmoid(pos).mean() + F.logsigmoid(-neg).sum(-1).mean())
    loss.backward()
    n_ctx = lazy_adagrad(ctx_emb.weight, flat)
    n_out = lazy_adagrad(out_emb.weight, torch.cat([targets, negs.flatten()]))
    ctx_emb.weight.grad = None
    out_emb.weight.grad = None
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} rows {n_ctx}/{n_out}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del h, pos, neg, loss
with torch.no_grad():
    queries = torch.tensor([zipf_id() for _ in range(Q)]).to(device)
    qv = F.normalize(ctx_emb.weight[queries], dim=-1)
    best_s, best_i = [], []
    for start in range(0, V, CHUNK):
        s = qv @ F.normalize(ctx_emb.weight[start : start + CHUNK], dim=-1).T
        top = s.topk(10, dim=-1)
        best_s.append(top.values)
        best_i.append(top.indices + start)
    sims = torch.cat(best_s, dim=1)
    nearest = torch.cat(best_i, dim=1).gather(1, sims.topk(10, dim=-1).indices)
if device == "cuda":
    print(
        f"neighbours {tuple(nearest.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
