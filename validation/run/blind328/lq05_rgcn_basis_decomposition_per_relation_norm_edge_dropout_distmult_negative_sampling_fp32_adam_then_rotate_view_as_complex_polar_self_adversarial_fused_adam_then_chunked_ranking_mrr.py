"""Knowledge-graph link prediction by hand on a synthetic graph of 40,000 entities, 100 relations and
400,000 training triples (plus 1,000 test triples), all tensors on the GPU.

Phases: R-GCN (Schlichtkrull et al. 2018) encoder with basis decomposition (10 bases, 200 dims, 2
layers, inverse relations added): every node's projection onto every basis (an einsum to (N, 10, 200)),
gathered by source and mixed by the per-edge relation coefficients, normalised by 1 / c(i, r) from a
bincount over dst * R + rel, summed into nodes by index_add_, plus a self-loop weight; edge dropout
keeps a fixed half of the edges chosen by randperm each step; DistMult decoder scored against 10
negatives per positive (head or tail corrupted by torch.randint and torch.where), BCE with logits,
fp32 Adam with clip_grad_norm, 15 full-graph steps of 16,384 positives. Then RotatE (Sun et al. 2019):
entity embeddings of 2 x 500 reals read as complex by torch.view_as_complex, relations as phases
turned into unit complex numbers by torch.polar, distance |h * r - t| summed over dimensions,
self-adversarial negative sampling (softmax of the negatives' scores, detached) with 256 corrupted
tails per positive, fused Adam, 40 steps of 1,024 positives. Then tail ranking of the test triples
against every entity under inference_mode: DistMult by one matmul, RotatE in 256-query x 2,048-entity
chunks, MRR and hits@10. 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3285)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N, R, E, NTEST, D, NB, POS, CD, RPOS, RNEG, QCH, ECH = (
        2000,
        10,
        20000,
        64,
        32,
        4,
        512,
        32,
        64,
        16,
        32,
        512,
    )
else:
    N, R, E, NTEST, D, NB, POS, CD, RPOS, RNEG, QCH, ECH = (
        40_000,
        100,
        400_000,
        1000,
        200,
        10,
        16_384,
        500,
        1024,
        256,
        256,
        2048,
    )
NNEG, GAMMA_R, ADV_T = 10, 12.0, 1.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# triples: heads drawn, tails near a relation-specific offset of the head (some structure)
heads = torch.randint(0, N, (E + NTEST,), device=device)
rels = torch.randint(0, R, (E + NTEST,), device=device)
shift = torch.randint(0, N, (R,), device=device)
tails = (heads + shift[rels] + torch.randint(0, 50, (E + NTEST,), device=device)) % N
train_h, train_r, train_t = heads[:E], rels[:E], tails[:E]
test_h, test_r, test_t = heads[E:], rels[E:], tails[E:]

# message-passing graph with inverse relations
src = torch.cat([train_h, train_t])
dst = torch.cat([train_t, train_h])
etype = torch.cat([train_r, train_r + R])
R2 = 2 * R
key = dst * R2 + etype
norm = 1.0 / torch.bincount(key, minlength=N * R2)[key].float()


class RGCNLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.bases = nn.Parameter(torch.randn(NB, D, D) / D**0.5)
        self.coef = nn.Parameter(torch.randn(R2, NB) / NB**0.5)
        self.self_loop = nn.Linear(D, D, bias=False)

    def forward(self, x, s, d, et, nm):
        per_basis = torch.einsum("nd,bde->nbe", x, self.bases)
        msg = torch.einsum("eb,ebd->ed", self.coef[et], per_basis[s]) * nm[:, None]
        return torch.zeros_like(x).index_add_(0, d, msg) + self.self_loop(x)


class RGCNDistMult(nn.Module):
    def __init__(self):
        super().__init__()
        self.ent = nn.Embedding(N, D)
        self.layers = nn.ModuleList([RGCNLayer(), RGCNLayer()])
        self.rel = nn.Parameter(torch.randn(R, D) / D**0.5)

    def encode(self, s, d, et, nm):
        x = self.ent.weight
        for i, layer in enumerate(self.layers):
            x = layer(x, s, d, et, nm)
            if i == 0:
                x = F.dropout(F.relu(x), 0.2, self.training)
        return x

    def score(self, z, h, r, t):
        return (z[h] * self.rel[r] * z[t]).sum(-1)


model = RGCNDistMult().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
n_edges = src.numel()
for step in range(15):
    keep = torch.randperm(n_edges, device=device)[: n_edges // 2]
    z = model.encode(src[keep], dst[keep], etype[keep], norm[keep] * 2)
    b = torch.randint(0, E, (POS,), device=device)
    h, r, t = train_h[b], train_r[b], train_t[b]
    hn, tn, rn = h.repeat_interleave(NNEG), t.repeat_interleave(NNEG), r.repeat_interleave(NNEG)
    corrupt_head = torch.rand(POS * NNEG, device=device) < 0.5
    rand_ent = torch.randint(0, N, (POS * NNEG,), device=device)
    hn = torch.where(corrupt_head, rand_ent, hn)
    tn = torch.where(corrupt_head, tn, rand_ent)
    logits = torch.cat([model.score(z, h, r, t), model.score(z, hn, rn, tn)])
    labels = torch.cat([torch.ones(POS, device=device), torch.zeros(POS * NNEG, device=device)])
    loss = F.binary_cross_entropy_with_logits(logits, labels) + 1e-2 * model.rel.square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print(f"rgcn distmult loss {loss.item():.4f}")
report("rgcn_distmult_fp32")


class RotatE(nn.Module):
    def __init__(self):
        super().__init__()
        self.rng = (GAMMA_R + 2.0) / CD
        self.ent = nn.Parameter(torch.empty(N, CD * 2).uniform_(-self.rng, self.rng))
        self.rel = nn.Parameter(torch.empty(R, CD).uniform_(-self.rng, self.rng))

    def entities(self, idx):
        return torch.view_as_complex(self.ent[idx].view(*idx.shape, CD, 2))

    def rotation(self, r):
        phase = self.rel[r] / (self.rng / torch.pi)
        return torch.polar(torch.ones_like(phase), phase)

    def distance(self, h, r, t_emb):
        hr = self.entities(h) * self.rotation(r)
        return (hr.unsqueeze(-2) - t_emb).abs().sum(-1)


rot = RotatE().to(device)
opt2 = torch.optim.Adam(rot.parameters(), lr=1e-3, fused=True)
for step in range(40):
    b = torch.randint(0, E, (RPOS,), device=device)
    h, r, t = train_h[b], train_r[b], train_t[b]
    neg_t = torch.randint(0, N, (RPOS, RNEG), device=device)
    pos_d = rot.distance(h, r, rot.entities(t).unsqueeze(1)).squeeze(1)
    neg_d = rot.distance(h, r, rot.entities(neg_t))
    neg_score = GAMMA_R - neg_d
    w = torch.softmax(neg_score * ADV_T, -1).detach()
    loss = -F.logsigmoid(GAMMA_R - pos_d).mean() - (w * F.logsigmoid(-neg_score)).sum(-1).mean()
    opt2.zero_grad(set_to_none=True)
    loss.backward()
    opt2.step()
print(f"rotate loss {loss.item():.4f}")
report("rotate_complex_self_adversarial")

model.eval()
with torch.inference_mode():
    z = model.encode(src, dst, etype, norm)
    q = z[test_h] * model.rel[test_r]
    scores = q @ z.T
    true = scores.gather(1, test_t[:, None])
    rank_dm = (scores > true).sum(1) + 1
    rank_rot = torch.empty(NTEST, dtype=torch.long, device=device)
    all_ent = torch.arange(N, device=device)
    for qs in range(0, NTEST, QCH):
        hq, rq, tq = test_h[qs : qs + QCH], test_r[qs : qs + QCH], test_t[qs : qs + QCH]
        true_d = rot.distance(hq, rq, rot.entities(tq).unsqueeze(1)).squeeze(1)
        better = torch.zeros(hq.numel(), dtype=torch.long, device=device)
        for es in range(0, N, ECH):
            d = rot.distance(hq, rq, rot.entities(all_ent[es : es + ECH]).unsqueeze(0))
            better += (d < true_d[:, None]).sum(1)
        rank_rot[qs : qs + QCH] = better + 1
for name, rk in (("distmult", rank_dm), ("rotate", rank_rot)):
    print(f"{name} mrr {(1.0 / rk.float()).mean().item():.4f} hits@10 {(rk <= 10).float().mean().item():.4f}")
report("ranking_eval")
