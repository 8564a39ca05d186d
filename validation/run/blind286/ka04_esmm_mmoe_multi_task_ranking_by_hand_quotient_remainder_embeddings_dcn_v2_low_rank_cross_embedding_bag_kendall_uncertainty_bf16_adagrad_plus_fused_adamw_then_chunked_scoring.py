"""A multi-task ads ranking model (CTR and CVR) written by hand the way recommendation teams build it in
plain PyTorch: ESMM over the whole impression space (pCTCVR = pCTR * pCVR, Ma et al. 2018) on top of an
MMoE (8 shared experts, one softmax gate per task, `einsum` of gates over stacked expert outputs),
its input the concatenation of: 26 categorical fields of 32-d embeddings -- the 6 largest (hashed to
20M..60M ids) through the quotient-remainder trick (Shi et al. 2020: two small tables indexed by
`id // m` and `id % m`, m = 8,192, combined by elementwise product), the other 20 as plain
`nn.Embedding` tables of 50k..2M rows -- a 50-item behaviour history pooled by `nn.EmbeddingBag`
(mode "mean", padding_idx 0) over a 3M-item table, and 13 log1p dense features; a DCN-v2 cross
network (3 low-rank layers, rank 64: x0 * (U (V^T x) + b) + x) before the experts. Losses: binary cross
entropy of pCTR against clicks and of pCTCVR against conversions (computed in fp32 outside autocast,
`F.binary_cross_entropy` refuses autocast), combined by Kendall et al.'s learned uncertainty weights
(`exp(-s) * L + s`). bf16 autocast; two optimizers: dense Adagrad (lr 0.05) for every embedding
table, fused AdamW for the rest. Phase 1: 12 steps at batch 16,384 (seeded synthetic logs: Zipf-like
ids from `torch.rand ** 3`, clicks and conversions from a hidden logit). Phase 2: no_grad bf16
scoring of 1,048,576 candidate impressions in chunks of 131,072, pCTCVR kept and `topk(1,000)`.
2 phases."""

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2864)
dev = "cuda"
D, M_QR, HIST, ITEMS = 32, 8192, 50, 3_000_000
BIG = [20_000_000, 24_000_000, 30_000_000, 36_000_000, 48_000_000, 60_000_000]
SMALL = [50_000 + 100_000 * i for i in range(20)]
SMALL[-1] = 2_000_000
VOCAB = BIG + SMALL


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class QREmbedding(nn.Module):
    def __init__(self, num, dim, m):
        super().__init__()
        self.m = m
        self.q = nn.Embedding(math.ceil(num / m), dim)
        self.r = nn.Embedding(m, dim)
        nn.init.uniform_(self.q.weight, -0.05, 0.05)
        nn.init.uniform_(self.r.weight, -0.05, 0.05)

    def forward(self, ids):
        return self.q(torch.div(ids, self.m, rounding_mode="floor")) * self.r(torch.remainder(ids, self.m))


class CrossV2(nn.Module):
    def __init__(self, d, rank=64, layers=3):
        super().__init__()
        self.v = nn.ModuleList(nn.Linear(d, rank, bias=False) for _ in range(layers))
        self.u = nn.ModuleList(nn.Linear(rank, d) for _ in range(layers))

    def forward(self, x0):
        x = x0
        for v, u in zip(self.v, self.u, strict=False):
            x = x0 * u(v(x)) + x
        return x


def mlp(*dims):
    layers = []
    for a, b in itertools.pairwise(dims):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class ESMM_MMoE(nn.Module):
    def __init__(self, n_exp=8):
        super().__init__()
        self.embs = nn.ModuleList(
            [QREmbedding(v, D, M_QR) for v in BIG] + [nn.Embedding(v, D) for v in SMALL]
        )
        self.hist = nn.EmbeddingBag(ITEMS, D, mode="mean", padding_idx=0)
        d_in = D * (len(VOCAB) + 1) + 13
        self.cross = CrossV2(d_in)
        self.experts = nn.ModuleList(nn.Sequential(mlp(d_in, 512, 256), nn.ReLU()) for _ in range(n_exp))
        self.gates = nn.ModuleList(nn.Linear(d_in, n_exp) for _ in range(2))
        self.towers = nn.ModuleList(mlp(256, 128, 1) for _ in range(2))

    def forward(self, cat, hist, dense):
        e = [emb(cat[:, i]) for i, emb in enumerate(self.embs)]
        x = torch.cat([*e, self.hist(hist), torch.log1p(dense)], 1)
        x = self.cross(x)
        ex = torch.stack([m(x) for m in self.experts], 1)  # (B, 8, 256)
        outs = []
        for gate, tower in zip(self.gates, self.towers, strict=False):
            g = F.softmax(gate(x), dim=-1)
            outs.append(tower(torch.einsum("be,bed->bd", g, ex)).squeeze(-1))
        return outs


vocab_t = torch.tensor(VOCAB, device=dev, dtype=torch.float64)


def batch(b):
    cat = (torch.rand(b, len(VOCAB), device=dev, dtype=torch.float64) ** 3 * vocab_t).long()
    hist = (torch.rand(b, HIST, device=dev) ** 2 * ITEMS).long()
    hist = hist * (torch.rand(b, HIST, device=dev) < 0.7)  # padded slots -> padding_idx 0
    dense = torch.rand(b, 13, device=dev) * 100
    z = (cat[:, :4] % 97).float().sum(1) / 200 - 2 + 0.01 * dense[:, 0]
    click = (torch.rand(b, device=dev) < torch.sigmoid(z)).float()
    conv = click * (torch.rand(b, device=dev) < torch.sigmoid(z - 1.5)).float()
    return cat, hist, dense, click, conv


model = ESMM_MMoE().to(dev)
log_vars = nn.Parameter(torch.zeros(2, device=dev))
emb_params = [p for n_, p in model.named_parameters() if n_.startswith(("embs.", "hist."))]
dense_params = [p for n_, p in model.named_parameters() if not n_.startswith(("embs.", "hist."))] + [log_vars]
opt_emb = torch.optim.Adagrad(emb_params, lr=0.05)
opt_dense = torch.optim.AdamW(dense_params, lr=1e-3, weight_decay=1e-5, fused=True)
print("parameters", sum(p.numel() for p in model.parameters()))
for _step in range(12):
    cat, hist, dense, click, conv = batch(16384)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ctr_logit, cvr_logit = model(cat, hist, dense)
    p_ctr = torch.sigmoid(ctr_logit.float())
    p_ctcvr = p_ctr * torch.sigmoid(cvr_logit.float())
    l_ctr = F.binary_cross_entropy(p_ctr, click)
    l_ctcvr = F.binary_cross_entropy(p_ctcvr.clamp(1e-7, 1 - 1e-7), conv)
    loss = torch.exp(-log_vars[0]) * l_ctr + log_vars[0] + torch.exp(-log_vars[1]) * l_ctcvr + log_vars[1]
    loss.backward()
    opt_emb.step()
    opt_dense.step()
    opt_emb.zero_grad(set_to_none=True)
    opt_dense.zero_grad(set_to_none=True)
print("ctr", round(l_ctr.item(), 4), "ctcvr", round(l_ctcvr.item(), 4))
report("train_esmm_mmoe_qr_embeddings_adagrad_fused_adamw")

del loss, p_ctr, p_ctcvr, ctr_logit, cvr_logit, l_ctr, l_ctcvr
model.eval()
scores = []
with torch.no_grad():
    for _ in range(8):
        cat, hist, dense, _c, _v = batch(131072)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            a, b = model(cat, hist, dense)
        scores.append(torch.sigmoid(a.float()) * torch.sigmoid(b.float()))
    scores = torch.cat(scores)
    top = scores.topk(1000)
print("scored", scores.numel(), round(top.values.mean().item(), 5))
report("no_grad_chunked_scoring_1m_candidates")
