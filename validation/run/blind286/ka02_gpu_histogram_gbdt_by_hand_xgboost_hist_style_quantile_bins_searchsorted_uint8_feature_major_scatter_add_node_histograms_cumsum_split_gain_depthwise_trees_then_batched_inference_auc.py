"""Gradient-boosted decision trees trained on the GPU by hand, the way XGBoost's `hist` tree method works
(no autograd, no nn.Module): tabular binary classification, 2,000,000 training rows x 64 float32
features (synthetic, seeded: a sparse nonlinear logit with interactions plus label noise).
Phase 1, binning: per-feature quantile cut points from a 200,000-row sample (`torch.quantile` over dim 0,
255 cuts), then every feature binned at once by `torch.searchsorted(cuts, X.T.contiguous())` (int64,
feature-major) and stored as uint8 (64 x 2,000,000); the float matrix is dropped.
Phase 2, boosting: 24 trees of depth 6, eta 0.15, lambda 1, min child hessian 1: per tree the logistic
gradient and hessian of the running margin; per level the histogram of every (node, feature, bin) by
`scatter_add_` of g and h along a (64 x 2,000,000) int64 key `node * 256 + bin`, split gains from
`cumsum` over bins (left/right sums, G^2/(H+lambda)), the best (feature, bin) per node by `max` over the
flattened gains, then every row's next node from a gather of its bin at the chosen feature
(`bins[feat[node], arange(N)]`); leaves by `index_add_`, the margin updated by the leaf weights.
Phase 3, inference: 4,000,000 held-out rows binned with the same cuts, predicted tree by tree (levels of
gathers), the sigmoid probabilities scored by log loss and a rank AUC (`argsort` of all scores).
3 phases."""

import torch

torch.manual_seed(2862)
dev = "cuda"
N, NT, F, BINS, DEPTH, TREES, ETA, LAM = 2_000_000, 4_000_000, 64, 256, 6, 24, 0.15, 1.0


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


w_true = torch.randn(F, device=dev) * (torch.rand(F, device=dev) < 0.3)


def make(n):
    x = torch.randn(n, F, device=dev)
    x[:, :8] = x[:, :8].exp()  # a few skewed features
    logit = x @ w_true * 0.3 + 0.8 * torch.sin(x[:, 1] * x[:, 2]) + 0.5 * (x[:, 3] > 1).float() * x[:, 4]
    y = (torch.rand(n, device=dev) < torch.sigmoid(logit)).float()
    return x, y


x, y = make(N)
sample = x[torch.randperm(N, device=dev)[:200_000]]
q = torch.linspace(0, 1, BINS + 1, device=dev)[1:-1]
cuts = torch.quantile(sample, q, dim=0).T.contiguous()  # (F, 255)
bins = torch.searchsorted(cuts, x.T.contiguous()).to(torch.uint8)  # (F, N)
del x, sample
print("bins", tuple(bins.shape), int(bins.max().item()))
report("quantile_binning_searchsorted")

margin = torch.zeros(N, device=dev)
base = torch.log(y.mean() / (1 - y.mean()))
margin += base
rows = torch.arange(N, device=dev)
trees = []
for t in range(TREES):
    p = torch.sigmoid(margin)
    g = p - y
    h = p * (1 - p)
    node = torch.zeros(N, dtype=torch.long, device=dev)
    levels = []
    for d in range(DEPTH):
        nn_ = 2**d
        key = node.unsqueeze(0) * BINS + bins.long()  # (F, N)
        hg = torch.zeros(F, nn_ * BINS, device=dev).scatter_add_(1, key, g.expand(F, N))
        hh = torch.zeros(F, nn_ * BINS, device=dev).scatter_add_(1, key, h.expand(F, N))
        del key
        hg = hg.view(F, nn_, BINS).transpose(0, 1)  # (nodes, F, BINS)
        hh = hh.view(F, nn_, BINS).transpose(0, 1)
        gl, hl = hg.cumsum(2), hh.cumsum(2)
        gt, ht = gl[..., -1:], hl[..., -1:]
        gr, hr = gt - gl, ht - hl
        gain = gl**2 / (hl + LAM) + gr**2 / (hr + LAM) - gt**2 / (ht + LAM)
        gain = torch.where((hl >= 1.0) & (hr >= 1.0), gain, torch.full_like(gain, -1.0))
        best, arg = gain.reshape(nn_, F * BINS).max(1)
        feat, thr = arg // BINS, arg % BINS
        thr = torch.where(best > 0, thr, torch.full_like(thr, BINS - 1))  # no split: everything goes left
        levels.append((feat, thr))
        go_right = bins[feat[node], rows].long() > thr[node]
        node = node * 2 + go_right
    n_leaf = 2**DEPTH
    G = torch.zeros(n_leaf, device=dev).index_add_(0, node, g)
    H = torch.zeros(n_leaf, device=dev).index_add_(0, node, h)
    leaf = -ETA * G / (H + LAM)
    margin += leaf[node]
    trees.append((levels, leaf))
    if t % 8 == 7:
        ll = torch.nn.functional.binary_cross_entropy_with_logits(margin, y)
        print("tree", t + 1, "train logloss", round(ll.item(), 4))
del g, h, p, node, go_right, hg, hh, gl, hl, gr, hr, gain
report("boosting_24_trees_depth_6_scatter_add_histograms")

with torch.no_grad():
    xt, yt = make(NT)
    bt = torch.searchsorted(cuts, xt.T.contiguous()).to(torch.uint8)
    del xt
    rows_t = torch.arange(NT, device=dev)
    score = torch.full((NT,), float(base), device=dev)
    for levels, leaf in trees:
        node = torch.zeros(NT, dtype=torch.long, device=dev)
        for feat, thr in levels:
            node = node * 2 + (bt[feat[node], rows_t].long() > thr[node])
        score += leaf[node]
    ll = torch.nn.functional.binary_cross_entropy_with_logits(score, yt)
    order = score.argsort()
    ranks = torch.empty(NT, device=dev)
    ranks[order] = torch.arange(1, NT + 1, device=dev, dtype=torch.float)
    npos = yt.sum()
    auc = ((ranks * yt).sum() - npos * (npos + 1) / 2) / (npos * (NT - npos))
print("test logloss", round(ll.item(), 4), "auc", round(auc.item(), 4))
report("batched_tree_inference_logloss_auc")
