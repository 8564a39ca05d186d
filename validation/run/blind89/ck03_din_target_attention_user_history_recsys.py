"""Deep Interest Network (DIN) click-through-rate model as recommender users write it: item, category
and user embeddings (2M items, 64-wide), a variable-length behaviour history (up to 200 items,
padded) attended by the candidate item through an activation-unit MLP over [h, t, h-t, h*t] with
a padding mask, Dice activations, an MLP tower, BCE-with-logits; fp32, Adam for the dense part and
SparseAdam for the sparse item table, batch 2,048; 6 steps, then scoring 20,000 candidates for
one user history in chunks under torch.inference_mode; 2 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8903)
if SMALL:
    ITEMS, CATS, USERS, D, HIST, B, STEPS, CAND, CHUNK = 500, 20, 50, 8, 12, 16, 2, 300, 128
else:
    ITEMS, CATS, USERS, D, HIST, B, STEPS, CAND = 2_000_000, 5000, 500_000, 64, 200, 2048, 6, 20000
    CHUNK = 4096
device = "cuda" if torch.cuda.is_available() else "cpu"


class Dice(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bn = nn.BatchNorm1d(n, affine=False, eps=1e-8)
        self.alpha = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        p = torch.sigmoid(self.bn(x2))
        return (p * x2 + (1 - p) * self.alpha * x2).reshape(shape)


class DIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(ITEMS, D, padding_idx=0, sparse=True)
        self.cat = nn.Embedding(CATS, D, padding_idx=0)
        self.user = nn.Embedding(USERS, D)
        e = 2 * D
        self.att = nn.Sequential(
            nn.Linear(4 * e, 80), Dice(80), nn.Linear(80, 40), Dice(40), nn.Linear(40, 1)
        )
        self.tower = nn.Sequential(
            nn.Linear(3 * e + D, 200), Dice(200), nn.Linear(200, 80), Dice(80), nn.Linear(80, 1)
        )

    def forward(self, user, item, cat, hist_item, hist_cat):
        t = torch.cat([self.item(item), self.cat(cat)], -1)  # (b, e)
        h = torch.cat([self.item(hist_item), self.cat(hist_cat)], -1)  # (b, L, e)
        tt = t[:, None].expand_as(h)
        w = self.att(torch.cat([h, tt, h - tt, h * tt], -1)).squeeze(-1)
        w = w.masked_fill(hist_item == 0, float("-inf")).softmax(-1).nan_to_num(0.0)
        interest = torch.einsum("bl,ble->be", w, h)
        x = torch.cat([self.user(user), t, interest, h.sum(1)], -1)
        return self.tower(x).squeeze(-1)


model = DIN().to(device)
sparse = [model.item.weight]
dense = [p for n, p in model.named_parameters() if n != "item.weight"]
opt_dense = torch.optim.Adam(dense, lr=1e-3)
opt_sparse = torch.optim.SparseAdam(sparse, lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b):
    lengths = torch.randint(1, HIST + 1, (b, 1), device=device)
    keep = torch.arange(HIST, device=device)[None] < lengths
    hist_item = torch.randint(1, ITEMS, (b, HIST), device=device) * keep
    hist_cat = torch.randint(1, CATS, (b, HIST), device=device) * keep
    return (
        torch.randint(0, USERS, (b,), device=device),
        torch.randint(1, ITEMS, (b,), device=device),
        torch.randint(1, CATS, (b,), device=device),
        hist_item,
        hist_cat,
        torch.randint(0, 2, (b,), device=device).float(),
    )


model.train()
for _ in range(STEPS):
    *inputs, label = batch(B)
    loss = F.binary_cross_entropy_with_logits(model(*inputs), label)
    opt_dense.zero_grad(set_to_none=True)
    opt_sparse.zero_grad(set_to_none=True)
    loss.backward()
    opt_dense.step()
    opt_sparse.step()
if device == "cuda":
    print(
        f"train loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del inputs, label, loss
model.eval()
with torch.inference_mode():
    user, _, _, hist_item, hist_cat, _ = batch(1)
    cand = torch.randint(1, ITEMS, (CAND,), device=device)
    cand_cat = torch.randint(1, CATS, (CAND,), device=device)
    scores = []
    for i in range(0, CAND, CHUNK):
        n = cand[i : i + CHUNK].shape[0]
        scores.append(
            model(
                user.expand(n),
                cand[i : i + CHUNK],
                cand_cat[i : i + CHUNK],
                hist_item.expand(n, -1),
                hist_cat.expand(n, -1),
            ).sigmoid()
        )
    top = torch.cat(scores).topk(100)
if device == "cuda":
    print(
        f"scored {CAND} top {tuple(top.values.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
