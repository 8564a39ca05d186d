"""Recommender retrieval and classic optimisation with plain tensors: user and item embedding tables
(500k users, 2M items, 128-d, bf16) scored for 4096 query users against all items by matmul in
131072-item chunks with a running top-100 merge (torch.cat of the kept and new candidates, topk again);
then alternating least squares matrix factorization on a dense 20000x8000 ratings matrix with a
random observation mask (per-row normal equations as mask @ flattened outer products, 20000 and
8000 batched 64x64 torch.linalg.solve calls per sweep, 3 sweeps, fp32); then L2-regularised
logistic regression on 1M x 256 features with torch.optim.LBFGS (strong Wolfe line search, history
10, closure, 15 iterations); then Newton's method in float64 on the same problem (explicit Hessian
X^T diag(p(1-p)) X built in row chunks, cholesky + cholesky_solve, 6 steps); finally a 64M-element
sort, argsort and cumsum done in chunks with out= buffers and a global sort by
torch.sort(stable=True) for comparison.

Phases: 0 tables built; 1 chunked retrieval with top-k merge; 2 ALS sweeps; 3 LBFGS logistic
regression; 4 Newton float64; 5 sorts and cumsums."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3225)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    NU, NI, D, Q, ICH, TOPK = 2000, 8000, 16, 64, 2048, 10
    RU, RI, R = 400, 200, 8
    NOBS, P, NCH = 4096, 16, 1024
    NSORT, SCH = 1 << 16, 1 << 14
else:
    NU, NI, D, Q, ICH, TOPK = 500_000, 2_000_000, 128, 4096, 131_072, 100
    RU, RI, R = 20_000, 8_000, 64
    NOBS, P, NCH = 1_000_000, 256, 131_072
    NSORT, SCH = 1 << 26, 1 << 24


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


user_emb = torch.nn.Embedding(NU, D).to(device=device, dtype=torch.bfloat16)
item_emb = torch.randn(NI, D, device=device, dtype=torch.bfloat16) / D**0.5
report("tables")

with torch.no_grad():
    qids = torch.randint(0, NU, (Q,), device=device)
    q = F.normalize(user_emb(qids).float(), dim=-1).to(torch.bfloat16)
    best_s = torch.full((Q, TOPK), float("-inf"), device=device)
    best_i = torch.zeros(Q, TOPK, dtype=torch.long, device=device)
    for s in range(0, NI, ICH):
        scores = (q @ item_emb[s : s + ICH].T).float()
        cs, ci = scores.topk(TOPK, dim=1)
        cat_s = torch.cat([best_s, cs], 1)
        cat_i = torch.cat([best_i, ci + s], 1)
        best_s, pos = cat_s.topk(TOPK, dim=1)
        best_i = torch.gather(cat_i, 1, pos)
print(f"retrieval top score {best_s[:, 0].mean().item():.4f}")
del scores, cat_s, cat_i
report("retrieval")

ratings = torch.randn(RU, R // 4, device=device) @ torch.randn(R // 4, RI, device=device)
mask = (torch.rand(RU, RI, device=device) < 0.05).float()
ratings.mul_(mask)
Uf = torch.randn(RU, R, device=device) * 0.1
Vf = torch.randn(RI, R, device=device) * 0.1
lam = 0.1 * torch.eye(R, device=device)
for _ in range(3):
    # users: (V^T diag(m_u) V + lam) u = V^T r_u
    A_u = (mask @ (Vf[:, :, None] * Vf[:, None, :]).reshape(RI, R * R)).view(RU, R, R) + lam
    b_u = ratings @ Vf
    Uf = torch.linalg.solve(A_u, b_u)
    del A_u
    A_v = (mask.T @ (Uf[:, :, None] * Uf[:, None, :]).reshape(RU, R * R)).view(RI, R, R) + lam
    b_v = ratings.T @ Uf
    Vf = torch.linalg.solve(A_v, b_v)
    del A_v
rmse = (((Uf @ Vf.T - ratings) * mask).pow(2).sum() / mask.sum()).sqrt()
print(f"als rmse {rmse.item():.4f}")
del ratings, mask
report("als")

Xl = torch.randn(NOBS, P, device=device)
w_true = torch.randn(P, device=device) / P**0.5
yl = torch.bernoulli(torch.sigmoid(Xl @ w_true))
w = torch.zeros(P, device=device, requires_grad=True)
opt = torch.optim.LBFGS([w], lr=1.0, max_iter=15, history_size=10, line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    loss = F.binary_cross_entropy_with_logits(Xl @ w, yl) + 1e-4 * w.pow(2).sum()
    loss.backward()
    return loss


loss = opt.step(closure)
print(f"lbfgs loss {loss.item():.5f}")
report("lbfgs")

X64 = Xl.double()
y64 = yl.double()
w64 = torch.zeros(P, dtype=torch.float64, device=device)
for _ in range(6):
    grad = torch.zeros(P, dtype=torch.float64, device=device)
    hess = torch.zeros(P, P, dtype=torch.float64, device=device)
    for s in range(0, NOBS, NCH):
        xs = X64[s : s + NCH]
        p = torch.sigmoid(xs @ w64)
        grad.addmv_(xs.T, p - y64[s : s + NCH])
        hess.addmm_(xs.T * (p * (1 - p)), xs)
    grad.div_(NOBS).add_(w64, alpha=2e-4)
    hess.div_(NOBS).diagonal().add_(2e-4)
    Lh = torch.linalg.cholesky(hess)
    w64 -= torch.cholesky_solve(grad[:, None], Lh).squeeze(1)
print(f"newton vs lbfgs {(w64.float() - w.detach()).norm().item():.5f}")
del X64, y64
report("newton")

vals = torch.rand(NSORT, device=device)
sorted_chunks = torch.empty_like(vals)
idx_chunks = torch.empty(NSORT, dtype=torch.long, device=device)
csum = torch.empty(NSORT, dtype=torch.float64, device=device)
carry = torch.zeros((), dtype=torch.float64, device=device)
for s in range(0, NSORT, SCH):
    torch.sort(vals[s : s + SCH], out=(sorted_chunks[s : s + SCH], idx_chunks[s : s + SCH]))
    torch.cumsum(vals[s : s + SCH], 0, dtype=torch.float64, out=csum[s : s + SCH])
    csum[s : s + SCH] += carry
    carry = csum[s + SCH - 1].clone()
full_sorted, full_idx = torch.sort(vals, stable=True)
order = torch.argsort(vals, descending=True)
print(f"sort check {full_sorted[-1].item():.4f} total {csum[-1].item():.1f} {order[0].item() >= 0}")
report("sorts")
