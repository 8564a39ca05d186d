"""PiRank (Swezey et al., NeurIPS 2021) learning to rank with NeuralSort's relaxed sorting (Grover et
al., ICLR 2019), written the way ermongroup/neuralsort's PyTorch NeuralSort module and PiRank's loss
write it: a scoring MLP (136 MSLR-WEB30K-like features -> 512 -> 256 -> 1, batch-normed, ReLU,
dropout) scores lists of 2,048 documents per query (list sizes of PiRank's scaling study); NeuralSort
builds the relaxed permutation matrix P_hat = softmax(((n + 1 - 2i) s^T - A_s 1 1^T)^T / tau) of every
list from A_s = |s_i - s_j| (a (B, n, n) pairwise tensor), B = A_s @ (1 @ 1^T) (a batched matmul
against an n x n ones matrix, as the reference code does) and C = s @ scaling^T; the "hard" variant
adds the straight-through permutation (P_hat's row-wise argmax written as ones into a zero matrix by
an advanced-index assignment P[b, r, c] = 1, then (P - P_hat).detach() + P_hat). The PiRank
surrogate: relaxed sorted gains P_hat @ (2^rel - 1), the DCG@10 with log2 discounts of the first 10
rows, normalised by the ideal DCG from a torch.sort of the labels; loss = 1 - NDCG@10. Training: fp32
Adam, 4 steps of 32 queries x 2,048 documents with tau = 1 (hard straight-through), then 2 steps with
tau annealed and the soft relaxation at 64 queries. Evaluation under no_grad at 128 queries: exact
NDCG@10 from torch.topk of the scores, and the relaxed NDCG of the same lists (the full P_hat again).
Synthetic graded relevance (0-4) from a hidden linear teacher, seeded. 3 phases + end."""

import torch
from torch import nn

torch.manual_seed(2843)
dev = "cuda"
FEATS, N_DOCS, TOP_K = 136, 2048, 10


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class NeuralSort(nn.Module):
    def __init__(self, tau=1.0, hard=False):
        super().__init__()
        self.hard, self.tau = hard, tau

    def forward(self, scores):
        """scores: (B, n) -> P_hat (B, n, n)"""
        scores = scores.unsqueeze(-1)
        bsize, dim = scores.size()[0], scores.size()[1]
        one = torch.ones(dim, 1, device=scores.device, dtype=scores.dtype)
        A_scores = torch.abs(scores - scores.permute(0, 2, 1))
        B = torch.matmul(A_scores, torch.matmul(one, torch.transpose(one, 0, 1)))
        scaling = (dim + 1 - 2 * (torch.arange(dim, device=scores.device) + 1)).type(scores.dtype)
        C = torch.matmul(scores, scaling.unsqueeze(0))
        P_max = (C - B).permute(0, 2, 1)
        P_hat = torch.softmax(P_max / self.tau, dim=-1)
        if self.hard:
            P = torch.zeros_like(P_hat, device=scores.device)
            b_idx = torch.arange(bsize, device=scores.device).repeat([1, dim]).view(dim, bsize)
            b_idx = b_idx.transpose(dim0=1, dim1=0).flatten().type(torch.long)
            r_idx = torch.arange(dim, device=scores.device).repeat([bsize, 1]).flatten().type(torch.long)
            c_idx = torch.argmax(P_hat, dim=-1).flatten()
            brc_idx = torch.stack((b_idx, r_idx, c_idx))
            P[brc_idx[0], brc_idx[1], brc_idx[2]] = 1
            P_hat = (P - P_hat).detach() + P_hat
        return P_hat


def dcg_discounts(k, device):
    return 1.0 / torch.log2(torch.arange(k, device=device, dtype=torch.float32) + 2.0)


def pirank_ndcg_loss(scores, labels, sorter, k=TOP_K):
    P_hat = sorter(scores)  # (B, n, n)
    gains = torch.pow(2.0, labels) - 1.0  # (B, n)
    sorted_gains = torch.bmm(P_hat, gains.unsqueeze(-1)).squeeze(-1)  # relaxed gains in sorted order
    disc = dcg_discounts(k, scores.device)
    dcg = (sorted_gains[:, :k] * disc).sum(-1)
    ideal = torch.sort(gains, dim=-1, descending=True).values[:, :k]
    idcg = (ideal * disc).sum(-1).clamp_min(1e-10)
    ndcg = dcg / idcg
    return 1.0 - ndcg.mean(), ndcg


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(FEATS, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(256, 1),
        )  # fmt: skip

    def forward(self, x):  # (B, n, F) -> (B, n)
        b, n, f = x.shape
        return self.net(x.reshape(b * n, f)).view(b, n)


teacher = torch.randn(FEATS, device=dev) / FEATS**0.5
gen = torch.Generator(device=dev)
gen.manual_seed(2843)


def batch(q):
    x = torch.randn(q, N_DOCS, FEATS, device=dev, generator=gen)
    logit = x @ teacher + 0.5 * torch.randn(q, N_DOCS, device=dev, generator=gen)
    labels = torch.bucketize(logit, torch.tensor([0.5, 1.0, 1.5, 2.0], device=dev)).float()
    return x, labels


model = Scorer().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
report("setup")

model.train()
sorter = NeuralSort(tau=1.0, hard=True)
for step in range(4):
    x, labels = batch(32)
    scores = model(x)
    loss, ndcg = pirank_ndcg_loss(scores, labels, sorter)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"hard step {step} loss {loss.item():.4f}")
    del x, labels, scores, loss, ndcg
report("train_hard")

for step, tau in enumerate([0.5, 0.25]):
    sorter = NeuralSort(tau=tau, hard=False)
    x, labels = batch(64)
    scores = model(x)
    loss, ndcg = pirank_ndcg_loss(scores, labels, sorter)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"soft step {step} tau {tau} loss {loss.item():.4f}")
    del x, labels, scores, loss, ndcg
report("train_soft")

model.eval()
with torch.no_grad():
    x, labels = batch(128)
    scores = model(x)
    top = scores.topk(TOP_K, dim=-1).indices
    gains = torch.pow(2.0, labels) - 1.0
    disc = dcg_discounts(TOP_K, dev)
    dcg = (torch.gather(gains, 1, top) * disc).sum(-1)
    idcg = (torch.sort(gains, dim=-1, descending=True).values[:, :TOP_K] * disc).sum(-1).clamp_min(1e-10)
    exact = (dcg / idcg).mean()
    _, relaxed = pirank_ndcg_loss(scores, labels, NeuralSort(tau=0.25, hard=False))
    print(f"eval ndcg@10 exact {exact.item():.4f} relaxed {relaxed.mean().item():.4f}")
report("eval")
print("done")
