"""A two-tower retrieval model written from Yi et al. 2019 (sampling-bias-corrected in-batch softmax)
and Yang et al. 2020 (mixed negative sampling): a query tower over a hashed user-id embedding
(2M x 64, sparse gradients), a sum EmbeddingBag of the last 50 watched items with recency
per_sample_weights and padding_idx, and 32 dense features; an item tower over an item-id embedding
(1M x 64, sparse), a category embedding and 16 dense features; MLPs 512-256-128 with L2-normalised
outputs; streaming frequency estimation in two hashed arrays (last step seen and the estimated gap,
updated by index ops) giving log Q, in-batch logits of 8,192 plus 8,192 uniform corpus negatives,
both logQ-corrected, accidental hits masked; fp32 with TF32 matmuls, SparseAdam for the two id
tables, Adagrad for the rest; 3 training steps, then the whole corpus embedded in chunks under no_grad
and 4,096 queries retrieved by chunked matmul and topk (recall@100); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12305)
torch.backends.cuda.matmul.allow_tf32 = True
N_USERS = 4096 if SMALL else 2_000_000
N_ITEMS = 8192 if SMALL else 1_000_000
N_CATS = 64 if SMALL else 2000
HIST = 50
DIM = 64
B = 128 if SMALL else 8192
M = 128 if SMALL else 8192
HASH = 4096 if SMALL else 1 << 20
TEMP = 0.05
device = "cuda" if torch.cuda.is_available() else "cpu"


def tower_mlp(d_in):
    return nn.Sequential(nn.Linear(d_in, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128))


class QueryTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(N_USERS, DIM, sparse=True)
        self.hist = nn.EmbeddingBag(N_ITEMS + 1, DIM, mode="sum", padding_idx=0)
        self.mlp = tower_mlp(2 * DIM + 32)

    def forward(self, user, hist, recency, dense):
        x = torch.cat([self.user(user), self.hist(hist, per_sample_weights=recency), dense], 1)
        return F.normalize(self.mlp(x), dim=-1)


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(N_ITEMS + 1, DIM, sparse=True)
        self.cat = nn.Embedding(N_CATS, 16)
        self.mlp = tower_mlp(DIM + 16 + 16)

    def forward(self, item, cat, dense):
        return F.normalize(self.mlp(torch.cat([self.item(item), self.cat(cat), dense], 1)), dim=-1)


class StreamingFrequency:
    def __init__(self, size, alpha=0.01):
        self.a = torch.zeros(size, dtype=torch.long, device=device)
        self.b = torch.full((size,), 100.0, device=device)
        self.alpha = alpha
        self.size = size

    def update_and_logq(self, ids, step):
        h = (ids * 2654435761) % self.size
        gap = (step - self.a[h]).float()
        self.b[h] = (1 - self.alpha) * self.b[h] + self.alpha * gap
        self.a[h] = step
        return -torch.log(self.b[h])


query, item = QueryTower().to(device), ItemTower().to(device)
item_cat = torch.randint(0, N_CATS, (N_ITEMS + 1,), device=device)
item_dense = torch.randn(N_ITEMS + 1, 16, device=device)
sparse_params = [query.user.weight, item.item.weight]
dense_params = [p for m in (query, item) for p in m.parameters() if all(p is not s for s in sparse_params)]
sparse_opt = torch.optim.SparseAdam(sparse_params, lr=1e-3)
dense_opt = torch.optim.Adagrad(dense_params, lr=0.05, initial_accumulator_value=0.1)
freq = StreamingFrequency(HASH)
log_uniform = torch.tensor(1.0 / N_ITEMS, device=device).log()
if device == "cuda":
    print(f"towers {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, 4):
    user = torch.randint(0, N_USERS, (B,), device=device)
    lengths = torch.randint(1, HIST + 1, (B, 1), device=device)
    hist = torch.randint(1, N_ITEMS + 1, (B, HIST), device=device)
    hist = hist.masked_fill(torch.arange(HIST, device=device)[None] >= lengths, 0)
    recency = 0.95 ** torch.arange(HIST, device=device, dtype=torch.float32).expand(B, HIST).contiguous()
    qdense = torch.randn(B, 32, device=device)
    pos = (torch.rand(B, device=device) ** 3 * N_ITEMS).long() + 1
    neg = torch.randint(1, N_ITEMS + 1, (M,), device=device)
    cands = torch.cat([pos, neg])
    q = query(user, hist, recency, qdense)
    c = item(cands, item_cat[cands], item_dense[cands])
    logits = q @ c.T / TEMP
    logq = torch.cat([freq.update_and_logq(pos, step), log_uniform.expand(M)])
    logits = logits - logq[None]
    hits = pos[:, None] == cands[None]
    hits[:, :B].fill_diagonal_(False)
    logits = logits.masked_fill(hits, float("-inf"))
    loss = F.cross_entropy(logits, torch.arange(B, device=device))
    sparse_opt.zero_grad()
    dense_opt.zero_grad()
    loss.backward()
    sparse_opt.step()
    dense_opt.step()
    if device == "cuda":
        print(
            f"train {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del q, c, logits, loss, hits

query.eval()
item.eval()
CHUNK = 1024 if SMALL else 131072
with torch.no_grad():
    index = torch.empty(N_ITEMS + 1, 128, device=device)
    for s in range(0, N_ITEMS + 1, CHUNK):
        ids = torch.arange(s, min(s + CHUNK, N_ITEMS + 1), device=device)
        index[s : s + len(ids)] = item(ids, item_cat[ids], item_dense[ids])
if device == "cuda":
    print(f"index {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

NQ = 256 if SMALL else 4096
with torch.no_grad():
    user = torch.randint(0, N_USERS, (NQ,), device=device)
    hist = torch.randint(1, N_ITEMS + 1, (NQ, HIST), device=device)
    recency = torch.ones(NQ, HIST, device=device)
    q = query(user, hist, recency, torch.randn(NQ, 32, device=device))
    target = torch.randint(1, N_ITEMS + 1, (NQ,), device=device)
    best_s = torch.full((NQ, 100), float("-inf"), device=device)
    best_i = torch.zeros(NQ, 100, dtype=torch.long, device=device)
    for s in range(0, N_ITEMS + 1, 4 * CHUNK):
        scores = q @ index[s : s + 4 * CHUNK].T
        top = scores.topk(min(100, scores.shape[1]), dim=1)
        merged_s = torch.cat([best_s, top.values], 1)
        merged_i = torch.cat([best_i, top.indices + s], 1)
        keep = merged_s.topk(100, dim=1)
        best_s, best_i = keep.values, merged_i.gather(1, keep.indices)
    recall = (best_i == target[:, None]).any(1).float().mean()
if device == "cuda":
    print(
        f"retrieve recall@100 {recall.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
