"""Byzantine-robust federated SGD simulated on one GPU, as robust-aggregation papers' code does it
(coordinate-wise median and trimmed mean of Yin et al. 2018, multi-Krum of Blanchard et al. 2017).
A 4-layer MLP classifier (3,072 -> 4,096 -> 4,096 -> 4,096 -> 100, 46.4 M parameters, fp32) is trained
by 16 simulated workers, 3 of them Byzantine. Each round every worker runs forward/backward on its own
batch of 256 and its flat gradient is written into row w of a (16, N) fp32 matrix with
`torch.cat(grads, out=G[w])`; the Byzantine rows are replaced (sign flipped and scaled by 4, or Gaussian
noise of std 10, drawn from a seeded CUDA generator). The aggregate is split back into `.grad` views and
SGD with momentum steps. Phase 1: 3 rounds with the coordinate-wise median over the workers
(`G.median(dim=0)`, values and int64 indices of N). Phase 2: 3 rounds of the trimmed mean
(`G.sort(dim=0)`, the 3 lowest and 3 highest of each coordinate dropped, the rest averaged). Phase 3:
3 rounds of multi-Krum (`torch.cdist(G, G)` between the 16 rows, each row scored by its 12 nearest
squared distances via `topk(largest=False)`, the 10 best rows gathered with `index_select` and
averaged). Phase 4: 3 rounds where the two slowest workers report only the first half of the
coordinates (the rest NaN) and the aggregate is `torch.nanmedian(G, dim=0)`. Phase 5: no_grad
evaluation of 8,192 samples. Seeded, no value-dependent sizes. 5 phases.
"""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2852)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


W, BYZ, B, IN, HID, C = 16, 3, 256, 3072, 4096, 100
model = nn.Sequential(
    nn.Linear(IN, HID),
    nn.ReLU(),
    nn.Linear(HID, HID),
    nn.ReLU(),
    nn.Linear(HID, HID),
    nn.ReLU(),
    nn.Linear(HID, C),
).to(dev)
params = list(model.parameters())
sizes = [p.numel() for p in params]
N = sum(sizes)
opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
G = torch.empty(W, N, device=dev)
gen = torch.Generator(device=dev).manual_seed(11)
# each worker's data: a fixed class-conditional Gaussian, so workers see shifted distributions
centers = torch.randn(W, C, IN, device=dev, generator=gen) * 0.1


def worker_batch(w):
    y = torch.randint(0, C, (B,), device=dev, generator=gen)
    x = centers[w, y] + torch.randn(B, IN, device=dev, generator=gen)
    return x, y


def local_gradients(stragglers=False):
    for w in range(W):
        x, y = worker_batch(w)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.cat([p.grad.reshape(-1) for p in params], out=G[w])
        for p in params:
            p.grad = None
    G[0].mul_(-4.0)
    G[1].mul_(-4.0)
    G[2].normal_(0.0, 10.0, generator=gen)
    if stragglers:
        G[W - 2 :, N // 2 :] = float("nan")
    return loss.detach()


def apply(agg):
    for p, g in zip(params, agg.split(sizes), strict=True):
        p.grad = g.view_as(p)
    opt.step()
    opt.zero_grad(set_to_none=True)


def median_rule():
    return G.median(dim=0).values


def trimmed_mean_rule():
    s = G.sort(dim=0).values
    return s[BYZ : W - BYZ].mean(dim=0)


def multi_krum_rule(m=10):
    d2 = torch.cdist(G, G).pow(2)
    scores = d2.topk(W - BYZ - 1, dim=1, largest=False).values.sum(dim=1)
    chosen = scores.topk(m, largest=False).indices
    return G.index_select(0, chosen).mean(dim=0)


def nanmedian_rule():
    return torch.nanmedian(G, dim=0).values


for tag, rule, strag in (
    ("coordinate_median_dim0", median_rule, False),
    ("trimmed_mean_sort_dim0", trimmed_mean_rule, False),
    ("multi_krum_cdist_index_select", multi_krum_rule, False),
    ("stragglers_nan_nanmedian_dim0", nanmedian_rule, True),
):
    for _ in range(3):
        loss = local_gradients(strag)
        apply(rule())
    print(tag, "last worker loss", round(loss.item(), 4))
    report(tag)

G = None  # the worker matrix freed before evaluation
model.eval()
correct = 0
with torch.no_grad():
    for w in range(4):
        for _ in range(8):
            x, y = worker_batch(w)
            correct += (model(x).argmax(1) == y).sum()
print("eval accuracy", round(correct.item() / (4 * 8 * B), 4))
report("no_grad_eval")
