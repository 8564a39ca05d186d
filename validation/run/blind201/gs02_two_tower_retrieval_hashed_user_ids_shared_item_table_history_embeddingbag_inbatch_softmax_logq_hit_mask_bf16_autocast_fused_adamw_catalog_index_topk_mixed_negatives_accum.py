"""A two-tower retrieval model (YouTube / Yi et al. 2019 style): in-batch sampled softmax, logQ correction.

Query tower: the user id hashed by the hashing trick ((id * 0x9E3779B1 + field salt) mod 2,000,003 buckets)
into an nn.Embedding(2,000,003, 64); the last 50 watched items (right-padded with id 0) pooled by an
nn.EmbeddingBag(mode="mean", padding_idx=0) that shares its weight with the item tower's item table; 4
context categories (device, country, hour, weekday) in small embeddings; MLP 64+128+4*16 -> 512 -> 256 -> 128.
Item tower: nn.Embedding(2,500,000, 128) item ids (the shared table) + category nn.Embedding(50,000, 32);
MLP 160 -> 512 -> 256 -> 128. Both outputs L2-normalised, temperature 0.05.

Loss: batch 16,384 (query, positive item) pairs; logits = q @ i.T / T minus log Q(item) where Q is a
Zipf-like sampling probability looked up per in-batch item; accidental hits (the same item elsewhere in the
batch) masked to -inf with a (B, B) bool mask; cross-entropy with labels arange(B). Weights fp32, forward
under bf16 autocast, torch.optim.AdamW(fused=True, lr 1e-3, weight decay 1e-6).

Phases: the first step; 5 more steps; building the catalog index (all 2,500,000 item vectors, chunks of
262,144 under inference_mode, kept in bf16) and top-100 retrieval for 8,192 queries in query chunks of
1,024 (full matmul against the index, torch.topk); then 3 steps with mixed negatives (16,384 extra items
drawn uniformly, logQ looked up for every candidate), each step 2 accumulated micro-batches of 8,192.
4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(20102)
if SMALL:
    N_USER_BUCKETS, N_ITEMS, N_CATS, HIST, B, STEPS = 1009, 5000, 100, 8, 64, 1
    INDEX_CHUNK, N_QUERIES, Q_CHUNK, K, N_UNIFORM = 1024, 128, 64, 10, 64
else:
    N_USER_BUCKETS, N_ITEMS, N_CATS, HIST, B, STEPS = 2_000_003, 2_500_000, 50_000, 50, 16384, 5
    INDEX_CHUNK, N_QUERIES, Q_CHUNK, K, N_UNIFORM = 262_144, 8192, 1024, 100, 16384
D_ITEM, D_USER, D_CTX, D_OUT = 128, 64, 16, 128
CTX_SIZES = [8, 200, 24, 7]
TEMP = 0.05
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        peak, alloc, reserved = (
            torch.cuda.max_memory_allocated(),
            torch.cuda.memory_allocated(),
            torch.cuda.memory_reserved(),
        )
        print(f"{tag}: peak {peak} allocated {alloc} reserved {reserved}")
        torch.cuda.reset_peak_memory_stats()


def hash_ids(ids, salt, buckets):
    return (ids * 0x9E3779B1 + salt) % buckets


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(N_ITEMS, D_ITEM, padding_idx=0)
        self.cat = nn.Embedding(N_CATS, 32)
        self.mlp = nn.Sequential(
            nn.Linear(D_ITEM + 32, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, D_OUT)
        )

    def forward(self, item_ids, cat_ids):
        return F.normalize(self.mlp(torch.cat([self.item(item_ids), self.cat(cat_ids)], -1)), dim=-1)


class QueryTower(nn.Module):
    def __init__(self, item_table):
        super().__init__()
        self.user = nn.Embedding(N_USER_BUCKETS, D_USER)
        self.item_table = item_table
        self.ctx = nn.ModuleList(nn.Embedding(n, D_CTX) for n in CTX_SIZES)
        self.mlp = nn.Sequential(
            nn.Linear(D_USER + D_ITEM + D_CTX * len(CTX_SIZES), 512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Linear(256, D_OUT),
        )

    def forward(self, user_ids, history, ctx):
        u = self.user(hash_ids(user_ids, 17, N_USER_BUCKETS))
        h = F.embedding_bag(history, self.item_table.weight, mode="mean", padding_idx=0)
        c = [emb(ctx[:, i]) for i, emb in enumerate(self.ctx)]
        return F.normalize(self.mlp(torch.cat([u, h, *c], -1)), dim=-1)


items = ItemTower().to(device)
queries = QueryTower(items.item).to(device)
params = list({id(p): p for p in list(items.parameters()) + list(queries.parameters())}.values())
print(f"two towers: {sum(p.numel() for p in params) / 1e6:.1f} M parameters")
opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-6, fused=device == "cuda")

# Zipf-like item popularity: the sampling probability used for the logQ correction.
ranks = torch.arange(1, N_ITEMS + 1, device=device, dtype=torch.float32)
item_prob = 1.0 / ranks.pow(0.8)
item_prob /= item_prob.sum()
log_q = item_prob.log()
item_cat = torch.randint(0, N_CATS, (N_ITEMS,), device=device)


def batch(b):
    pos = torch.multinomial(item_prob, b, replacement=True).clamp_(min=1)
    user_ids = torch.randint(0, 50_000_000, (b,), device=device)
    history = torch.multinomial(item_prob, b * HIST, replacement=True).view(b, HIST)
    lengths = torch.randint(1, HIST + 1, (b, 1), device=device)
    history = history.masked_fill(torch.arange(HIST, device=device) >= lengths, 0)
    ctx = torch.stack([torch.randint(0, n, (b,), device=device) for n in CTX_SIZES], 1)
    return user_ids, history, ctx, pos


def inbatch_loss(q, cand_vecs, cand_ids, labels, n_pos):
    logits = (q @ cand_vecs.T).float() / TEMP - log_q[cand_ids]
    hits = cand_ids[None, :] == cand_ids[:n_pos, None]
    hits[torch.arange(n_pos, device=device), labels] = False
    logits = logits.masked_fill(hits, float("-inf"))
    return F.cross_entropy(logits, labels)


def step(b, n_uniform=0, accum=1):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(accum):
        user_ids, history, ctx, pos = batch(b)
        cand = pos
        if n_uniform:
            cand = torch.cat([pos, torch.randint(1, N_ITEMS, (n_uniform,), device=device)])
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            q = queries(user_ids, history, ctx)
            iv = items(cand, item_cat[cand])
            loss = inbatch_loss(q, iv, cand, torch.arange(b, device=device), b) / accum
        loss.backward()
        total += loss.item()
    opt.step()
    return total


print(f"step 0 loss {step(B):.4f} (log B = {math.log(B):.2f})")
report("first step")
for _ in range(STEPS):
    loss = step(B)
print(f"step {STEPS} loss {loss:.4f}")
report("train")

items.eval()
queries.eval()
with torch.inference_mode():
    index = torch.empty(N_ITEMS, D_OUT, dtype=torch.bfloat16, device=device)
    for start in range(0, N_ITEMS, INDEX_CHUNK):
        ids = torch.arange(start, min(start + INDEX_CHUNK, N_ITEMS), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            index[start : start + ids.numel()] = items(ids, item_cat[ids]).to(torch.bfloat16)
    user_ids, history, ctx, pos = batch(N_QUERIES)
    hit = 0
    for start in range(0, N_QUERIES, Q_CHUNK):
        sl = slice(start, start + Q_CHUNK)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            q = queries(user_ids[sl], history[sl], ctx[sl]).to(torch.bfloat16)
        scores = q @ index.T
        top = scores.topk(K, dim=1).indices
        hit += (top == pos[sl, None]).any(1).sum().item()
    print(f"recall@{K} {hit / N_QUERIES:.4f}")
    del index, scores, top
report("index and retrieval")

items.train()
queries.train()
for s in range(3):
    loss = step(B // 2, n_uniform=N_UNIFORM, accum=2)
    print(f"mixed negatives step {s} loss {loss:.4f}")
if device == "cuda":
    print(f"allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
