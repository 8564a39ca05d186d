"""Set Transformer (Lee et al. 2019) written by hand for the paper's amortised clustering task: a set
of 2-D points drawn from a 4-component Gaussian mixture is encoded by two ISAB blocks (induced set
attention: 32 learned inducing points attend to the set, the set attends back to them) and decoded by
PMA (pooling by multihead attention with 4 learned seeds) followed by a SAB, each seed predicting one
component's (logit weight, mean, log-std). MAB = nn.MultiheadAttention(batch_first=True) + rFF + LayerNorm
as in the paper. Sets have variable sizes (padded, with key_padding_mask). The loss is the negative
log-likelihood of the points under the predicted mixture (logsumexp over components). Training under
fp16 autocast with a GradScaler and Adam.

Phases: 0 model built (dim 256, 4 heads); 1 training steps on batches of 256 sets of up to 1024 points;
2 evaluation on sets of 4096 points under no_grad; 3 inference_mode with the model in half precision
on 64 sets of 16384 points (the ISAB keeps the cost linear in the set size)."""

import math

import torch
import torch.nn as nn

torch.manual_seed(5)
device = "cuda"


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class MAB(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln0, self.ln1 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))

    def forward(self, q, k, mask=None):
        h = self.ln0(q + self.attn(q, k, k, key_padding_mask=mask, need_weights=False)[0])
        return self.ln1(h + self.ff(h))


class ISAB(nn.Module):
    def __init__(self, d, heads, m):
        super().__init__()
        self.inducing = nn.Parameter(torch.randn(1, m, d) / math.sqrt(d))
        self.mab0, self.mab1 = MAB(d, heads), MAB(d, heads)

    def forward(self, x, mask=None):
        h = self.mab0(self.inducing.expand(x.shape[0], -1, -1), x, mask)
        return self.mab1(x, h)


class PMA(nn.Module):
    def __init__(self, d, heads, k):
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(1, k, d) / math.sqrt(d))
        self.mab = MAB(d, heads)

    def forward(self, x, mask=None):
        return self.mab(self.seeds.expand(x.shape[0], -1, -1), x, mask)


class SetTransformer(nn.Module):
    def __init__(self, d=256, heads=4, m=32, k=4):
        super().__init__()
        self.inp = nn.Linear(2, d)
        self.enc = nn.ModuleList([ISAB(d, heads, m), ISAB(d, heads, m)])
        self.pma = PMA(d, heads, k)
        self.sab = MAB(d, heads)
        self.out = nn.Linear(d, 1 + 2 + 2)

    def forward(self, x, mask=None):
        h = self.inp(x)
        for blk in self.enc:
            h = blk(h, mask)
        s = self.pma(h, mask)
        s = self.sab(s, s)
        o = self.out(s).float()
        return o[..., 0], o[..., 1:3], o[..., 3:5]


def mog_nll(x, mask, logits, mu, logstd):
    logw = logits.log_softmax(-1)  # B, K
    z = (x[:, :, None] - mu[:, None]) / logstd.exp()[:, None]  # B, N, K, 2
    lp = -0.5 * (z**2).sum(-1) - logstd.sum(-1)[:, None] - math.log(2 * math.pi)
    ll = torch.logsumexp(lp + logw[:, None], -1)  # B, N
    valid = (~mask).float() if mask is not None else torch.ones_like(ll)
    return -(ll * valid).sum() / valid.sum()


def sample_sets(b, n, ragged=True):
    centers = torch.randn(b, 4, 2, device=device) * 4
    comp = torch.randint(0, 4, (b, n), device=device)
    x = centers.gather(1, comp[..., None].expand(-1, -1, 2)) + 0.3 * torch.randn(b, n, 2, device=device)
    if not ragged:
        return x, None
    lengths = torch.randint(n // 4, n + 1, (b,), device=device)
    mask = torch.arange(n, device=device)[None] >= lengths[:, None]
    return x, mask


model = SetTransformer().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
report("phase0 build")

for step in range(10):
    x, mask = sample_sets(256, 1024)
    with torch.autocast("cuda", dtype=torch.float16):
        logits, mu, logstd = model(x, mask)
    loss = mog_nll(x, mask, logits, mu, logstd)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
print("train nll", loss.item())
report("phase1 train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    x, _ = sample_sets(128, 4096, ragged=False)
    nll = mog_nll(x, None, *model(x))
print("eval nll", nll.item())
report("phase2 eval")

model.half()
with torch.inference_mode():
    x, _ = sample_sets(64, 16384, ragged=False)
    logits, mu, logstd = model(x.half())
    nll = mog_nll(x, None, logits, mu, logstd)
print("big-set nll", nll.item())
report("phase3 half inference")
