"""A tabular click-through model with learned embeddings of quantile-binned numeric features (the
"numerical embeddings" recipe of Gorishniy et al. 2022, written by hand): 64 numeric columns binned
per column by torch.searchsorted against per-column quantile edges (torch.quantile of a 65,536-row
sample, 128 bins, right=True), a 65th column by torch.bucketize on fixed log-spaced boundaries, the
bin ids offset into one shared nn.Embedding, 26 categorical columns hashed into 1,000,000 rows;
a 3-layer MLP of 1,024 over the concatenated embeddings under bf16 autocast; per-step feature
histograms by torch.histc for drift monitoring; batch 32,768, Adam, 4 steps; then a no-grad
calibration pass (bucketize of the predicted probabilities into 20 bins, bincount of positives
per bin with weights); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11804)
NNUM, NCAT, NBINS, HASH, D, B, STEPS, NSAMP = (
    (4, 3, 8, 1000, 8, 256, 2, 1024) if SMALL else (64, 26, 128, 1_000_000, 32, 32768, 4, 65536)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = torch.bfloat16


def draw(n):
    num = torch.randn(n, NNUM, device=device).exp() * torch.linspace(0.5, 3, NNUM, device=device)
    amount = torch.rand(n, device=device).mul(12).exp()
    cat = torch.randint(0, 2**31 - 1, (n, NCAT), device=device)
    y = (num[:, :4].sum(-1) + torch.randn(n, device=device) > 6).float()
    return num, amount, cat, y


sample, _, _, _ = draw(NSAMP)
qs = torch.linspace(0, 1, NBINS + 1, device=device)[1:-1]
edges = torch.quantile(sample, qs, dim=0).T.contiguous()
amount_edges = torch.logspace(0, 5.3, NBINS - 1, device=device)
del sample


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_emb = nn.Embedding((NNUM + 1) * NBINS, D)
        self.cat_emb = nn.Embedding(HASH, D)
        width = (NNUM + 1 + NCAT) * D
        h = 1024 if not SMALL else 64
        self.mlp = nn.Sequential(
            nn.Linear(width, h),
            nn.ReLU(),
            nn.Linear(h, h),
            nn.ReLU(),
            nn.Linear(h, h),
            nn.ReLU(),
            nn.Linear(h, 1),
        )
        self.register_buffer("offsets", torch.arange(NNUM + 1) * NBINS)

    def forward(self, num, amount, cat):
        bins = torch.searchsorted(edges, num.T.contiguous(), right=True).T
        abin = torch.bucketize(amount, amount_edges).unsqueeze(1)
        ids = torch.cat([bins, abin], 1) + self.offsets
        e = torch.cat([self.num_emb(ids), self.cat_emb(cat % HASH)], 1).flatten(1)
        return self.mlp(e).squeeze(-1)


model = Model().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    num, amount, cat, y = draw(B)
    hist = torch.stack([torch.histc(num[:, j], bins=50, min=0, max=10) for j in range(NNUM)])
    with torch.autocast(device, dtype=amp):
        logit = model(num, amount, cat)
    loss = F.binary_cross_entropy_with_logits(logit.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} hist {hist.sum().item():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del num, amount, cat, y, hist, logit, loss

model.eval()
with torch.no_grad():
    num, amount, cat, y = draw(4 * B)
    with torch.autocast(device, dtype=amp):
        p = model(num, amount, cat).float().sigmoid()
    cb = torch.bucketize(p, torch.linspace(0.05, 0.95, 19, device=device))
    pos = torch.bincount(cb, weights=y, minlength=20)
    tot = torch.bincount(cb, minlength=20)
    ece = ((pos / tot.clamp_min(1)) - torch.bincount(cb, weights=p, minlength=20) / tot.clamp_min(1)).abs()
if device == "cuda":
    print(
        f"calibration ece {ece.mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
