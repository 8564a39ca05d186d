"""A DLRM in the MLPerf style on random Criteo-shaped data, dense embedding gradients and Adagrad everywhere.

Model: 13 dense features through a bottom MLP 13-512-256-128 (ReLU); 26 categorical features, each its own
nn.EmbeddingBag(rows, 128) with row counts from a Criteo-like list capped at 1,500,000 (8,069,296 rows in
all, 4.1 GB fp32). Features 0-19 are multi-hot bags pooled with mode="sum" (features 0-7 weighted by
per_sample_weights, e.g. a recency decay), features 20-25 with mode="mean". The bags' lengths (1 to 6 ids)
are drawn on the host as a data loader would, turned into offsets there, and the flat indices, offsets and
weights are pinned and copied with non_blocking=True. Dot interaction: the 27 vectors stacked (B, 27, 128),
torch.bmm with the transpose, the strictly lower triangle (351 pairs) taken by tril_indices and concatenated
with the bottom output; top MLP 479-1024-1024-512-256-1, BCEWithLogitsLoss.

fp32, torch.optim.Adagrad (lr 0.02, initial_accumulator_value 0, default foreach) over every parameter, the
tables' gradients dense (sparse=False), batch 32,768.

Phases: moving the model to the GPU; the first step; 4 more steps; evaluation under no_grad over two batches
of 131,072 with an AUC by ranks (argsort on the device); 2 steps under bf16 autocast. 5 phases."""

import os
import time

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(20101)
CRITEO = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
]  # fmt: skip
if SMALL:
    CAP, D, B, EVAL_B, STEPS = 1000, 8, 64, 128, 1
    BOT, TOP = [13, 32, D], [32, 16]
else:
    CAP, D, B, EVAL_B, STEPS = 1_500_000, 128, 32768, 131072, 4
    BOT, TOP = [13, 512, 256, D], [1024, 1024, 512, 256]
ROWS = [min(n, CAP) for n in CRITEO]
N_SPARSE = len(ROWS)
WEIGHTED = set(range(8))
MEAN = set(range(20, 26))
MAX_LEN = 6
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        torch.cuda.synchronize()
        peak, reserved = torch.cuda.max_memory_allocated() / 2**20, torch.cuda.memory_reserved() / 2**20
        print(f"{tag}: peak {peak:.1f} MiB, reserved {reserved:.1f} MiB")
        torch.cuda.reset_peak_memory_stats()


def mlp(sizes, last_relu=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.bot = mlp(BOT)
        self.emb = nn.ModuleList(
            nn.EmbeddingBag(n, D, mode="mean" if i in MEAN else "sum") for i, n in enumerate(ROWS)
        )
        for e in self.emb:
            nn.init.uniform_(e.weight, -((1.0 / e.num_embeddings) ** 0.5), (1.0 / e.num_embeddings) ** 0.5)
        n_feat = N_SPARSE + 1
        li, lj = torch.tril_indices(n_feat, n_feat, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = mlp([D + len(li), *TOP, 1], last_relu=False)

    def interact(self, x, ly):
        t = torch.cat([x, *ly], dim=1).view(x.shape[0], -1, D)
        z = torch.bmm(t, t.transpose(1, 2))
        zflat = z[:, self.li, self.lj]
        return torch.cat([x, zflat], dim=1)

    def forward(self, dense, idx, offs, psw):
        x = self.bot(dense)
        ly = []
        for k, e in enumerate(self.emb):
            ly.append(e(idx[k], offs[k], per_sample_weights=psw[k]))
        return self.top(self.interact(x, ly)).squeeze(1)


def host_batch(b):
    """What a Criteo data loader yields: dense floats, per-feature flat ids, offsets and weights, pinned."""
    dense = torch.log1p(torch.rand(b, 13) * 100)
    idx, offs, psw = [], [], []
    for k, n in enumerate(ROWS):
        lengths = torch.randint(1, MAX_LEN + 1, (b,))
        offsets = torch.zeros(b, dtype=torch.long)
        offsets[1:] = torch.cumsum(lengths, 0)[:-1]
        total = int(lengths.sum())
        idx.append(torch.randint(0, n, (total,)))
        offs.append(offsets)
        psw.append(torch.rand(total) if k in WEIGHTED else None)
    labels = (torch.rand(b) < 0.25).float()
    return dense, idx, offs, psw, labels


def to_device(batch):
    dense, idx, offs, psw, labels = batch
    pin = device == "cuda"

    def mv(t):
        if t is None:
            return None
        return (t.pin_memory() if pin else t).to(device, non_blocking=True)

    return mv(dense), [mv(t) for t in idx], [mv(t) for t in offs], [mv(t) for t in psw], mv(labels)


model = DLRM().to(device)
n_params = sum(p.numel() for p in model.parameters())
print(f"DLRM: {n_params / 1e6:.1f} M parameters, {sum(ROWS)} embedding rows")
report("model to device")

opt = torch.optim.Adagrad(model.parameters(), lr=0.02)
loss_fn = nn.BCEWithLogitsLoss()


def train_step(autocast=False):
    dense, idx, offs, psw, labels = to_device(host_batch(B))
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and amp):
        logits = model(dense, idx, offs, psw)
        loss = loss_fn(logits.float(), labels)
    loss.backward()
    opt.step()
    return loss.item()


t0 = time.time()
print(f"step 0 loss {train_step():.4f}")
report("first step")
for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f} ({time.time() - t0:.1f} s)")
report("train")


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, scores.numel() + 1, device=scores.device, dtype=torch.float64)
    n_pos = labels.sum()
    n_neg = labels.numel() - n_pos
    return ((ranks[labels > 0].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


model.eval()
all_scores, all_labels = [], []
with torch.no_grad():
    for _ in range(2):
        dense, idx, offs, psw, labels = to_device(host_batch(EVAL_B))
        all_scores.append(torch.sigmoid(model(dense, idx, offs, psw)))
        all_labels.append(labels)
    print(f"eval auc {auc(torch.cat(all_scores), torch.cat(all_labels)):.4f}")
del all_scores, all_labels
report("eval")

model.train()
for s in range(2):
    loss = train_step(autocast=True)
    print(f"bf16 step {s} loss {loss:.4f}")
if device == "cuda":
    print(f"allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
