"""A click-through-rate model for a Criteo-like table written by hand: 13 dense (log-transformed count)
features and 26 categorical features with hashed cardinalities from 3 to 2,000,000 (7.05M rows in all),
indices drawn on the device with a power-law skew (card * u^3) as real click logs have.

DCN-v2 (Wang et al. 2021), stacked structure: one nn.Embedding(card, 16) per categorical feature
(sparse=False), concatenated with the dense features into x0 of width 429; three full-rank cross layers
x_{l+1} = x0 * (W_l x_l + b_l) + x_l; then a deep MLP 429 -> 1024 -> 1024 -> 512 (ReLU, BatchNorm1d) and a
logit; binary cross-entropy with logits. fp32, AdamW foreach (lr 1e-3, weight decay 1e-5), batch 32,768.

Phases: the first step; 3 more steps; evaluation of 262,144 rows in chunks of 65,536 under
torch.inference_mode, the click probabilities moved to the host; then the DCN and its optimizer are
deleted, gc.collect() + torch.cuda.empty_cache(), and a wide-and-deep model is trained 3 steps: the deep
side with 26 nn.Embedding(card, 16, sparse=True) tables and an MLP 429 -> 1024 -> 512 -> 256 -> 1 (Adam,
lr 1e-3), the wide side an nn.EmbeddingBag(2^20, 1, mode="sum", sparse=True) over the 26 hashed features
plus 10 hashed feature crosses per row (36 indices per bag, offsets); all sparse tables stepped by
torch.optim.SparseAdam (lr 1e-3). 4 phases."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19204)
CARDS = [
    1460,
    583,
    2_000_000,
    800_000,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    1_500_000,
    3194,
    27,
    14992,
    1_000_000,
    10,
    5461,
    2173,
    4,
    1_200_000,
    18,
    15,
    286181,
    105,
    142572,
]
if SMALL:
    CARDS = [min(c, 1000) for c in CARDS]
    B, STEPS, EVAL_ROWS, EVAL_CHUNK, WIDE_BUCKETS = 128, 1, 512, 256, 4096
else:
    B, STEPS, EVAL_ROWS, EVAL_CHUNK, WIDE_BUCKETS = 32768, 3, 262144, 65536, 2**20
N_DENSE = 13
EMB = 16
D0 = N_DENSE + EMB * len(CARDS)
CROSSES = [(2, 3), (2, 11), (3, 15), (11, 20), (6, 9), (0, 1), (23, 25), (12, 14), (4, 7), (15, 20)]
device = "cuda" if torch.cuda.is_available() else "cpu"


def make_batch(n):
    dense = torch.log1p(torch.rand(n, N_DENSE, device=device) * 1000)
    cats = torch.stack([(c * torch.rand(n, device=device) ** 3).long().clamp_(max=c - 1) for c in CARDS], 1)
    y = (torch.rand(n, device=device) < 0.25).float()
    return dense, cats, y


class CrossLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x0, x):
        return x0 * self.lin(x) + x


class DCNv2(nn.Module):
    def __init__(self, n_cross=3):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(c, EMB) for c in CARDS)
        for e in self.embs:
            nn.init.uniform_(e.weight, -0.05, 0.05)
        self.cross = nn.ModuleList(CrossLayer(D0) for _ in range(n_cross))
        self.deep = nn.Sequential(
            nn.Linear(D0, 1024),
            nn.BatchNorm1d(1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.BatchNorm1d(1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.BatchNorm1d(512),
            nn.ReLU(),
        )
        self.logit = nn.Linear(512, 1)

    def forward(self, dense, cats):
        x0 = torch.cat([dense] + [e(cats[:, i]) for i, e in enumerate(self.embs)], 1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.logit(self.deep(x)).squeeze(1)


model = DCNv2().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5, foreach=True)
print(f"DCN-v2 params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def dcn_step(net, optimizer):
    dense, cats, y = make_batch(B)
    loss = F.binary_cross_entropy_with_logits(net(dense, cats), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


model.train()
print(f"step 0 loss {dcn_step(model, opt):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss = dcn_step(model, opt)
    print(f"step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
preds = []
with torch.inference_mode():
    for _ in range(EVAL_ROWS // EVAL_CHUNK):
        dense, cats, _ = make_batch(EVAL_CHUNK)
        preds.append(torch.sigmoid(model(dense, cats)).cpu())
preds = torch.cat(preds)
print(f"eval rows {preds.numel()} mean ctr {preds.mean():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, opt, preds
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
    print(
        f"after empty_cache allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )


class WideAndDeep(nn.Module):
    def __init__(self):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(c, EMB, sparse=True) for c in CARDS)
        self.wide = nn.EmbeddingBag(WIDE_BUCKETS, 1, mode="sum", sparse=True)
        nn.init.zeros_(self.wide.weight)
        self.deep = nn.Sequential(
            nn.Linear(D0, 1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Linear(256, 1),
        )

    def wide_indices(self, cats):
        feats = [(cats[:, i] * 1_000_003 + i * 7919) % WIDE_BUCKETS for i in range(len(CARDS))]
        feats += [
            (cats[:, a] * 2_654_435_761 + cats[:, b] * 40_503 + 13 * j) % WIDE_BUCKETS
            for j, (a, b) in enumerate(CROSSES)
        ]
        idx = torch.stack(feats, 1)
        offsets = torch.arange(0, idx.numel(), idx.shape[1], device=idx.device)
        return idx.flatten(), offsets

    def forward(self, dense, cats):
        x0 = torch.cat([dense] + [e(cats[:, i]) for i, e in enumerate(self.embs)], 1)
        idx, offsets = self.wide_indices(cats)
        return (self.deep(x0) + self.wide(idx, offsets)).squeeze(1)


wd = WideAndDeep().to(device)
sparse_params = [p for n, p in wd.named_parameters() if n.startswith(("embs", "wide"))]
dense_params = [p for n, p in wd.named_parameters() if n.startswith("deep")]
opt_sparse = torch.optim.SparseAdam(sparse_params, lr=1e-3)
opt_dense = torch.optim.Adam(dense_params, lr=1e-3)
wd.train()
for step in range(3):
    dense, cats, y = make_batch(B)
    loss = F.binary_cross_entropy_with_logits(wd(dense, cats), y)
    opt_sparse.zero_grad()
    opt_dense.zero_grad()
    loss.backward()
    opt_sparse.step()
    opt_dense.step()
    print(f"wide&deep step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"wide&deep allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
