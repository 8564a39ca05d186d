"""A DLRM as facebookresearch/dlrm's dlrm_s_pytorch.py writes it, on random Criteo-shaped data: 13
dense features through a bottom MLP 13-512-256-64, 26 categorical features, each its own
nn.EmbeddingBag(n, 64, mode="sum", sparse=True) with Criteo-Kaggle-like row counts capped at
4,000,000 (18,771,904 rows in all, 4.8 GB fp32), fed as the reference's lS_i/lS_o lists
(1-D indices of a multi-hot bag per sample, 1 to 4 ids, and offsets from the bag lengths); the dot
interaction (torch.bmm of the 27 feature vectors with their transpose, the strictly lower triangle
taken by tril_indices, concatenated with the bottom MLP's output) and a top MLP 415-512-256-1 with a
sigmoid, BCELoss. fp32; the embedding tables' sparse gradients stepped by torch.optim.SGD (lr 0.1)
and the MLPs by torch.optim.Adam (lr 1e-3), batch 8,192, 3 steps (each its own phase), then
evaluation at batch 65,536 under no_grad over two batches with a hand-written accuracy; 5 phases."""

import os

import numpy as np
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16101)
np.random.seed(16101)
CRITEO = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
]  # fmt: skip
if SMALL:
    CAP, D, B, EVAL_B, STEPS = 1000, 8, 64, 128, 3
    BOT, TOP = [13, 32, 8], [None, 32, 1]
else:
    CAP, D, B, EVAL_B, STEPS = 4_000_000, 64, 8192, 65536, 3
    BOT, TOP = [13, 512, 256, 64], [None, 512, 256, 1]
ROWS = [min(n, CAP) for n in CRITEO]
device = "cuda" if torch.cuda.is_available() else "cpu"


class DLRM_Net(nn.Module):
    def create_mlp(self, ln, sigmoid_layer):
        layers = nn.ModuleList()
        for i in range(0, len(ln) - 1):
            n, m = ln[i], ln[i + 1]
            LL = nn.Linear(int(n), int(m), bias=True)
            mean, std_dev = 0.0, np.sqrt(2 / (m + n))
            W = np.random.normal(mean, std_dev, size=(m, n)).astype(np.float32)
            bt = np.random.normal(mean, np.sqrt(1 / m), size=m).astype(np.float32)
            LL.weight.data = torch.tensor(W, requires_grad=True)
            LL.bias.data = torch.tensor(bt, requires_grad=True)
            layers.append(LL)
            layers.append(nn.Sigmoid() if i == sigmoid_layer else nn.ReLU())
        return torch.nn.Sequential(*layers)

    def create_emb(self, m, ln):
        emb_l = nn.ModuleList()
        for n in ln:
            EE = nn.EmbeddingBag(n, m, mode="sum", sparse=True, device=device)
            with torch.no_grad():
                EE.weight.uniform_(-np.sqrt(1 / n), np.sqrt(1 / n))
            emb_l.append(EE)
        return emb_l

    def __init__(self, m_spa, ln_emb, ln_bot, ln_top):
        super().__init__()
        self.emb_l = self.create_emb(m_spa, ln_emb)
        self.bot_l = self.create_mlp(ln_bot, -1)
        self.top_l = self.create_mlp(ln_top, len(ln_top) - 2)

    def apply_emb(self, lS_o, lS_i):
        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            sparse_offset_group_batch = lS_o[k]
            E = self.emb_l[k]
            V = E(sparse_index_group_batch, sparse_offset_group_batch, per_sample_weights=None)
            ly.append(V)
        return ly

    def interact_features(self, x, ly):
        (batch_size, d) = x.shape
        T = torch.cat([x, *ly], dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        offset = 0
        li = torch.tensor([i for i in range(ni) for j in range(i + offset)], device=x.device)
        lj = torch.tensor([j for i in range(nj) for j in range(i + offset)], device=x.device)
        Zflat = Z[:, li, lj]
        R = torch.cat([x, Zflat], dim=1)
        return R

    def forward(self, dense_x, lS_o, lS_i):
        x = self.bot_l(dense_x)
        ly = self.apply_emb(lS_o, lS_i)
        z = self.interact_features(x, ly)
        p = self.top_l(z)
        return p


def random_batch(n):
    dense_x = torch.log(torch.rand(n, 13, device=device) * 1000 + 1)
    lS_o, lS_i = [], []
    for rows in ROWS:
        lengths = torch.randint(1, 5, (n,), device=device)
        offsets = torch.zeros(n, dtype=torch.long, device=device)
        offsets[1:] = torch.cumsum(lengths, 0)[:-1]
        # power-law ids: the popular rows are drawn far more often, as in click logs
        ids = (torch.rand(int(lengths.sum()), device=device) ** 3 * rows).long()
        lS_o.append(offsets)
        lS_i.append(ids)
    T = (torch.rand(n, 1, device=device) < 0.25).float()
    return dense_x, lS_o, lS_i, T


num_int = (len(ROWS) + 1) * len(ROWS) // 2 + BOT[-1]
TOP[0] = num_int
dlrm = DLRM_Net(D, ROWS, BOT, TOP).to(device)
loss_fn = torch.nn.BCELoss(reduction="mean")
sparse_params = [p for n, p in dlrm.named_parameters() if n.startswith("emb_l")]
dense_params = [p for n, p in dlrm.named_parameters() if not n.startswith("emb_l")]
optimizer_sparse = torch.optim.SGD(sparse_params, lr=0.1)
optimizer_dense = torch.optim.Adam(dense_params, lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

dlrm.train()
for step in range(STEPS):
    X, lS_o, lS_i, T = random_batch(B)
    Z = dlrm(X, lS_o, lS_i)
    E = loss_fn(Z, T)
    optimizer_sparse.zero_grad()
    optimizer_dense.zero_grad()
    E.backward()
    optimizer_sparse.step()
    optimizer_dense.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {E.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del X, lS_o, lS_i, T, Z, E
dlrm.eval()
test_accu, test_samp = 0, 0
with torch.no_grad():
    for _ in range(2):
        X, lS_o, lS_i, T = random_batch(EVAL_B)
        Z = dlrm(X, lS_o, lS_i)
        test_accu += (Z.round() == T).sum().item()
        test_samp += T.shape[0]
if device == "cuda":
    print(
        f"eval acc {test_accu / test_samp:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
