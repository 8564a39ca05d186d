"""A wide-and-deep CTR model over one hashed embedding table of 40,000,000 rows x 32 (5.1 GB fp32)
trained with row-wise Adagrad written by hand, as torchrec's EXACT_ROWWISE_ADAGRAD does it in its
fused kernel: 30 multi-hot sparse features per sample (1 to 6 raw 63-bit ids a feature, with a
float value each) hashed into the shared table by a salted multiplicative hash modulo 40,000,000,
pooled by nn.EmbeddingBag(mode="sum", sparse=True) over 1-D indices with offsets and the values as
per_sample_weights; the wide part a second hashed nn.EmbeddingBag(40,000,000, 1, mode="sum",
sparse=True) over the same ids; the deep part an MLP 960-1024-512-256-1 under bf16 autocast. The
sparse tables stepped by hand under no_grad: grad = weight.grad.coalesce(), the row-wise state
(one fp32 per row) grown by state.index_add_(0, rows, grad.values().pow(2).mean(1)), and
weight.index_add_(0, rows, values / (sqrt(state[rows]) + eps), alpha=-lr); the MLP by
torch.optim.Adagrad (lr 0.01). Batch 16,384, 3 steps (each its own phase), then evaluation at
batch 65,536 under no_grad with the positive rate and the mean score; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16105)
if SMALL:
    ROWS, D, B, EVAL_B, MLP = 20_000, 4, 64, 256, [32, 16]
else:
    ROWS, D, B, EVAL_B, MLP = 40_000_000, 32, 16384, 65536, [1024, 512, 256]
NFEAT, MAXHOT, LR, EPS = 30, 6, 0.05, 1e-8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_device = "cuda" if device == "cuda" else "cpu"


def make_batch(n):
    # every (sample, feature) bag has 1..MAXHOT ids; bags laid out sample-major, feature-minor
    lengths = torch.randint(1, MAXHOT + 1, (n * NFEAT,), device=device)
    offsets = torch.zeros_like(lengths)
    offsets[1:] = lengths.cumsum(0)[:-1]
    raw = torch.randint(0, 2**62, (int(lengths.sum().item()),), device=device)
    feature = torch.arange(n * NFEAT, device=device).remainder(NFEAT).repeat_interleave(lengths)
    values = torch.rand(raw.shape, device=device)
    y = (torch.rand(n, device=device) < 0.1).float()
    return raw, feature, offsets, values, y


def hash_rows(raw, feature):
    salted = raw ^ (feature * 0x5BD1E995 + 0x27D4EB2F)
    return torch.remainder(salted * 0x9E3779B97F4A7C15 >> 17, ROWS)


class WideDeep(nn.Module):
    def __init__(self):
        super().__init__()
        self.deep_emb = nn.EmbeddingBag(ROWS, D, mode="sum", sparse=True, device=device)
        self.wide_emb = nn.EmbeddingBag(ROWS, 1, mode="sum", sparse=True, device=device)
        with torch.no_grad():
            self.deep_emb.weight.uniform_(-0.01, 0.01)
            self.wide_emb.weight.zero_()
        layers, d_in = [], NFEAT * D
        for h in MLP:
            layers += [nn.Linear(d_in, h), nn.ReLU()]
            d_in = h
        layers.append(nn.Linear(d_in, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, rows, offsets, values, n):
        deep = self.deep_emb(rows, offsets, per_sample_weights=values).view(n, NFEAT * D)
        wide = self.wide_emb(rows, offsets, per_sample_weights=values).view(n, NFEAT).sum(1, keepdim=True)
        with torch.autocast(amp_device, dtype=torch.bfloat16):
            deep = self.mlp(deep)
        return (deep.float() + wide).squeeze(1)


@torch.no_grad()
def rowwise_adagrad_(weight, state, lr, eps):
    grad = weight.grad.coalesce()
    rows = grad.indices()[0]
    values = grad.values()
    state.index_add_(0, rows, values.pow(2).mean(1))
    std = state[rows].sqrt_().add_(eps)
    weight.index_add_(0, rows, values / std.unsqueeze(1), alpha=-lr)
    weight.grad = None


model = WideDeep().to(device)
deep_state = torch.zeros(ROWS, device=device)
wide_state = torch.zeros(ROWS, device=device)
dense_opt = torch.optim.Adagrad(model.mlp.parameters(), lr=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    raw, feature, offsets, values, y = make_batch(B)
    rows = hash_rows(raw, feature)
    logits = model(rows, offsets, values, B)
    loss = F.binary_cross_entropy_with_logits(logits, y)
    dense_opt.zero_grad(set_to_none=True)
    loss.backward()
    dense_opt.step()
    rowwise_adagrad_(model.deep_emb.weight, deep_state, LR, EPS)
    rowwise_adagrad_(model.wide_emb.weight, wide_state, LR, EPS)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del raw, feature, offsets, values, y, rows, logits, loss
model.eval()
with torch.no_grad():
    raw, feature, offsets, values, y = make_batch(EVAL_B)
    p = torch.sigmoid(model(hash_rows(raw, feature), offsets, values, EVAL_B))
    summary = (y.mean().item(), p.mean().item())
if device == "cuda":
    print(f"eval {summary} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
