"""Two-tower retrieval trained with in-batch negatives at a large batch, both towers cast whole to
bfloat16 (model.to(torch.bfloat16), pure bf16 weights and AdamW states): the user tower averages a
padded 2-D watch history of 50 item ids (nn.EmbeddingBag(2,000,000, 64, mode="mean",
padding_idx=0): the pads left out of the mean) and takes the max over 10 padded search-token ids
(EmbeddingBag(500,000, 64, mode="max", padding_idx=0)), plus an age/country nn.Embedding, into an
MLP 192-1024-512-128; the item tower embeds the item id (nn.Embedding(2,000,000, 64)) and the max
over 8 padded tag ids (EmbeddingBag(200,000, 64, mode="max", padding_idx=0)) into an MLP
128-1024-512-128; both L2-normalised. The in-batch softmax: the 16,384 x 16,384 similarity matrix
of bf16 tower outputs upcast to fp32, scaled by a learned temperature, cross-entropy against the
diagonal in both directions (user->item and item->user, averaged). AdamW (lr 1e-3, weight decay
1e-4, foreach), batch 16,384, 3 steps (each its own phase); then under inference_mode the
2,000,000-item catalogue embedded in chunks of 262,144 into one bf16 index, and the top 100 items
of 8,192 users found in 4 chunks of 2,048 users (matmul against the whole index, topk); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16104)
if SMALL:
    NITEMS, NTOK, NTAG, D, B, CHUNK, NUSERS, UCHUNK, K = 5000, 1000, 500, 8, 64, 1024, 128, 32, 10
else:
    NITEMS, NTOK, NTAG, D, B, CHUNK, NUSERS, UCHUNK, K = (
        2_000_000, 500_000, 200_000, 64, 16384, 262_144, 8192, 2048, 100
    )  # fmt: skip
HIST, QTOK, TAGS, OUT = 50, 10, 8, 128
device = "cuda" if torch.cuda.is_available() else "cpu"


def tower_mlp(d_in):
    return nn.Sequential(
        nn.Linear(d_in, 1024), nn.GELU(), nn.Linear(1024, 512), nn.GELU(), nn.Linear(512, OUT)
    )


class UserTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = nn.EmbeddingBag(NITEMS, D, mode="mean", padding_idx=0)
        self.query = nn.EmbeddingBag(NTOK, D, mode="max", padding_idx=0)
        self.age = nn.Embedding(10, D // 2)
        self.country = nn.Embedding(250, D // 2)
        self.mlp = tower_mlp(3 * D)

    def forward(self, hist, query, age, country):
        x = torch.cat([self.history(hist), self.query(query), self.age(age), self.country(country)], -1)
        return F.normalize(self.mlp(x), dim=-1)


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(NITEMS, D)
        self.tags = nn.EmbeddingBag(NTAG, D, mode="max", padding_idx=0)
        self.mlp = tower_mlp(2 * D)

    def forward(self, item, tags):
        return F.normalize(self.mlp(torch.cat([self.item(item), self.tags(tags)], -1)), dim=-1)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = UserTower()
        self.item = ItemTower()
        self.log_temp = nn.Parameter(torch.tensor(2.995))  # 1 / 0.05


def padded(n, width, vocab):
    ids = torch.randint(1, vocab, (n, width), device=device)
    lengths = torch.randint(1, width + 1, (n, 1), device=device)
    return ids.masked_fill(torch.arange(width, device=device) >= lengths, 0)


def user_batch(n):
    return (
        padded(n, HIST, NITEMS),
        padded(n, QTOK, NTOK),
        torch.randint(0, 10, (n,), device=device),
        torch.randint(0, 250, (n,), device=device),
    )


model = TwoTower().to(device).to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
labels = torch.arange(B, device=device)
for step in range(3):
    users = user_batch(B)
    items = torch.randint(1, NITEMS, (B,), device=device)
    tags = padded(B, TAGS, NTAG)
    u = model.user(*users)
    v = model.item(items, tags)
    logits = (u @ v.T).float() * model.log_temp.float().exp()
    loss = 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del users, items, tags, u, v, logits, loss
model.eval()
with torch.inference_mode():
    index = torch.empty(NITEMS, OUT, dtype=torch.bfloat16, device=device)
    for start in range(0, NITEMS, CHUNK):
        ids = torch.arange(start, min(start + CHUNK, NITEMS), device=device)
        index[start : start + len(ids)] = model.item(ids, padded(len(ids), TAGS, NTAG))
    if device == "cuda":
        torch.cuda.synchronize()
        print(f"index peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    top_ids = []
    for _ in range(NUSERS // UCHUNK):
        u = model.user(*user_batch(UCHUNK))
        scores = u @ index.T
        top_ids.append(scores.topk(K, dim=-1).indices)
    top_ids = torch.cat(top_ids)
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"retrieve {tuple(top_ids.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
