"""Two-tower retrieval with a reranker, written with torch.nn alone: the user tower sums a watch-
history bag of item ids (nn.EmbeddingBag(mode="sum") over 1-D indices with offsets from per-user
lengths and recency per_sample_weights) and averages 8 genre ids (EmbeddingBag(mode="mean") over
a 2-D input), the item tower embeds the item id (nn.Embedding, sparse=True) and averages 6 tag
ids; both end in MLPs and L2 normalisation; in-batch sampled softmax (temperature 0.05) with the
logQ correction of item popularity; a reranker scores (user, item) pairs through nn.Bilinear(128,
128, 64) and an MLP with BCE against one shuffled negative per positive; fp32; SparseAdam for the
item table and AdamW (clip_grad_norm_(foreach=True)) for the rest, the history table included; 3
steps at batch 4,096 over 1,000,000 items; then under inference_mode the catalogue embedded in
chunks of 131,072 into an fp16 index and the top 100 of 8,192 users found chunk by chunk (topk,
cat, topk); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13505)
B, NITEMS, D, CHUNK, NUSERS = (32, 5000, 16, 1024, 64) if SMALL else (4096, 1_000_000, 128, 131_072, 8192)
NGENRE, NTAG = 512, 4096
device = "cuda" if torch.cuda.is_available() else "cpu"


def mlp(d_in, d_out):
    return nn.Sequential(
        nn.Linear(d_in, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, d_out)
    )


class UserTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = nn.EmbeddingBag(NITEMS, D, mode="sum")
        self.genres = nn.EmbeddingBag(NGENRE, 32, mode="mean")
        self.mlp = mlp(D + 32, D)

    def forward(self, hist, offsets, weights, genres):
        h = torch.cat([self.history(hist, offsets, per_sample_weights=weights), self.genres(genres)], 1)
        return F.normalize(self.mlp(h), dim=-1)


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(NITEMS, D, sparse=True)
        self.tags = nn.EmbeddingBag(NTAG, 32, mode="mean")
        self.mlp = mlp(D + 32, D)

    def forward(self, items, tags):
        return F.normalize(self.mlp(torch.cat([self.item(items), self.tags(tags)], 1)), dim=-1)


class Reranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.bil = nn.Bilinear(D, D, 64)
        self.mlp = nn.Sequential(nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, u, i):
        return self.mlp(self.bil(u, i)).squeeze(-1)


def users(n):
    lengths = torch.randint(5, 120, (n,), device=device)
    offsets = torch.cumsum(lengths, 0) - lengths
    total = int(lengths.sum().item())
    hist = torch.randint(0, NITEMS, (total,), device=device)
    pos = torch.arange(total, device=device) - torch.repeat_interleave(offsets, lengths, output_size=total)
    weights = 0.97 ** pos.float()
    genres = torch.randint(0, NGENRE, (n, 8), device=device)
    return hist, offsets, weights, genres


utower, itower, rerank = UserTower().to(device), ItemTower().to(device), Reranker().to(device)
log_pop = torch.log_softmax(-0.8 * torch.log1p(torch.arange(NITEMS, device=device, dtype=torch.float32)), 0)
modules = [utower, itower, rerank]
sparse = [p for m in modules for n, p in m.named_parameters() if n == "item.weight"]
dense = [p for m in modules for n, p in m.named_parameters() if n != "item.weight"]
opt_sparse = torch.optim.SparseAdam(sparse, lr=1e-3)
opt_dense = torch.optim.AdamW(dense, lr=1e-3, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    hist, offsets, weights, genres = users(B)
    items = torch.randint(0, NITEMS, (B,), device=device)
    tags = torch.randint(0, NTAG, (B, 6), device=device)
    u = utower(hist, offsets, weights, genres)
    v = itower(items, tags)
    logits = u @ v.t() / 0.05 - log_pop[items][None]
    retrieval = F.cross_entropy(logits, torch.arange(B, device=device))
    neg = v[torch.randperm(B, device=device)]
    scores = rerank(torch.cat([u, u]), torch.cat([v, neg]))
    labels = torch.cat([torch.ones(B, device=device), torch.zeros(B, device=device)])
    loss = retrieval + F.binary_cross_entropy_with_logits(scores, labels)
    opt_sparse.zero_grad(set_to_none=True)
    opt_dense.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(dense, 1.0, foreach=True)
    opt_sparse.step()
    opt_dense.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

for m in modules:
    m.eval()
with torch.inference_mode():
    index = torch.empty(NITEMS, D, dtype=torch.float16, device=device)
    all_tags = torch.randint(0, NTAG, (NITEMS, 6), device=device)
    for s in range(0, NITEMS, CHUNK):
        ids = torch.arange(s, min(s + CHUNK, NITEMS), device=device)
        index[s : s + CHUNK] = itower(ids, all_tags[s : s + CHUNK]).half()
if device == "cuda":
    print(
        f"index {tuple(index.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    q = utower(*users(NUSERS)).half()
    best_s = torch.full((NUSERS, 100), -1e4, dtype=torch.float16, device=device)
    best_i = torch.zeros(NUSERS, 100, dtype=torch.long, device=device)
    for s in range(0, NITEMS, CHUNK):
        sc, ix = (q @ index[s : s + CHUNK].t()).topk(100, dim=1)
        cat_s, cat_i = torch.cat([best_s, sc], 1), torch.cat([best_i, ix + s], 1)
        best_s, sel = cat_s.topk(100, dim=1)
        best_i = cat_i.gather(1, sel)
if device == "cuda":
    print(
        f"top100 {tuple(best_i.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
