"""Mult-VAE for collaborative filtering (Liang et al. 2018, written after the paper's
notebook): 41,140 items (the Million Song Dataset's size after filtering), users' click sets drawn
by `multinomial` without replacement from a power-law popularity (128 items a user), the
L2-normalised binary rows as a sparse COO batch whose values take the input dropout, the first
encoder layer as the sparse-dense product `x @ W` with its dense gradient, tanh, the Gaussian
posterior as `torch.distributions.Normal` with `rsample` and `kl_divergence` against the standard
normal, annealed by beta, the multinomial log-likelihood of the log_softmax against the one-hot
rows (`scatter_`); fp32, Adam, batch 1,024, 4 steps; then the fold-in evaluation under no_grad:
100 of each user's items in, 28 held out, the input as CSR (`to_sparse_csr`) through the same
product, the seen items (the CSR's `to_dense()`) masked by `masked_fill(-inf)`, top-100 by
`topk`, NDCG@100 and Recall@20 by `gather` over the held-out one-hot, 3 batches of 2,000 users;
6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14002)
N_ITEMS, B, R, EB, N_EVAL, R_IN = (500, 16, 12, 32, 64, 9) if SMALL else (41140, 1024, 128, 2000, 6000, 100)
HID, LAT = (32, 8) if SMALL else (600, 200)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class MultVAE(nn.Module):
    def __init__(self, n_items, hid, lat, dropout=0.5):
        super().__init__()
        self.enc_w = nn.Parameter(torch.empty(n_items, hid))
        self.enc_b = nn.Parameter(torch.zeros(hid))
        nn.init.xavier_uniform_(self.enc_w)
        self.enc_out = nn.Linear(hid, 2 * lat)
        self.dec = nn.Sequential(nn.Linear(lat, hid), nn.Tanh(), nn.Linear(hid, n_items))
        self.dropout = dropout
        self.lat = lat

    def encode(self, x):
        h = torch.tanh(x @ self.enc_w + self.enc_b)
        mu, logvar = self.enc_out(h).chunk(2, dim=-1)
        return mu, logvar

    def forward(self, x):
        mu, logvar = self.encode(x)
        q = Normal(mu, torch.exp(0.5 * logvar))
        z = q.rsample() if self.training else mu
        return self.dec(z), q


def user_items(n, r):
    return torch.multinomial(popularity.expand(n, -1), r, replacement=False)


def sparse_rows(items, values, n):
    rows = torch.arange(n, device=device).repeat_interleave(items.shape[1])
    return torch.sparse_coo_tensor(torch.stack([rows, items.flatten()]), values, (n, N_ITEMS))


popularity = (torch.arange(1, N_ITEMS + 1, device=device, dtype=torch.float) ** -0.8).unsqueeze(0)
model = MultVAE(N_ITEMS, HID, LAT).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
total_anneal, anneal_cap = 200000, 0.2
update_count = 0
for step in range(STEPS):
    items = user_items(B, R)
    ones = torch.ones(B * R, device=device)
    vals = F.dropout(ones / R**0.5, p=model.dropout, training=True)
    x = sparse_rows(items, vals, B)
    logits, q = model(x)
    target = torch.zeros(B, N_ITEMS, device=device).scatter_(1, items, 1.0)
    neg_ll = -(F.log_softmax(logits, dim=1) * target).sum(1).mean()
    kl = kl_divergence(q, Normal(torch.zeros_like(q.loc), torch.ones_like(q.scale))).sum(1).mean()
    anneal = min(anneal_cap, update_count / total_anneal)
    loss = neg_ll + anneal * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    update_count += 1
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, q, target, loss, neg_ll, kl, x
model.eval()
discount = 1.0 / torch.log2(torch.arange(2, 102, device=device, dtype=torch.float))
ndcgs, recalls = [], []
with torch.no_grad():
    for _s in range(0, N_EVAL, EB):
        items = user_items(EB, R)
        fold_in, held = items[:, :R_IN], items[:, R_IN:]
        x_in = sparse_rows(fold_in, torch.full((EB * R_IN,), R_IN**-0.5, device=device), EB)
        x_csr = x_in.to_sparse_csr()
        seen = x_csr.to_dense() > 0
        logits, _ = model(x_csr)
        logits = logits.masked_fill(seen, float("-inf"))
        heldout = torch.zeros(EB, N_ITEMS, device=device).scatter_(1, held, 1.0)
        _, top = torch.topk(logits, 100, dim=1)
        hits = heldout.gather(1, top)
        dcg = (hits * discount).sum(1)
        n_held = heldout.sum(1)
        idcg = discount.cumsum(0)[n_held.clamp(max=100).long() - 1]
        ndcgs.append(dcg / idcg)
        recalls.append(hits[:, :20].sum(1) / torch.clamp(n_held, max=20))
    ndcg = torch.cat(ndcgs).mean()
    recall = torch.cat(recalls).mean()
if device == "cuda":
    print(
        f"ndcg@100 {ndcg.item():.4f} recall@20 {recall.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
