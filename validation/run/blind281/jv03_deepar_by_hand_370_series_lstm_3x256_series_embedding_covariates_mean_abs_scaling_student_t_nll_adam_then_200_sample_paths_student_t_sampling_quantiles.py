"""DeepAR (Salinas et al.) written by hand the way forecasting practitioners port it to plain PyTorch,
fp32. 370 electricity-like series (synthetic, seeded: daily and weekly seasonality plus noise), windows
of 168 context + 24 prediction hours. Inputs per step: the previous target divided by the window's
scale (1 + mean |z| over the context), 4 time covariates (hour, weekday, age, a holiday flag) and a
20-d embedding of the series id; a 3-layer `nn.LSTM` of hidden 256 (dropout 0.1, batch_first) over the
whole 192-step window with teacher forcing, a linear head to the Student-t's (df = 2 + softplus,
loc, scale = softplus) and the loss `-torch.distributions.StudentT(df, loc, scale).log_prob(z / v)`
averaged over all 192 steps. Phase 1: 25 Adam steps at batch 1,024 windows, gradients clipped to 10.
Phase 2 (no_grad): probabilistic forecasting of 256 windows with 200 sample paths each: the context
encoded once, the (h, c) state `repeat_interleave`d to 51,200 rows, then 24 autoregressive steps of
the LSTM on one step each, every step sampling the Student-t (`.sample()`: a normal draw and a
chi-squared through `torch._standard_gamma`) and feeding the draw back; the paths rescaled and
summarised by `torch.quantile` at 0.1/0.5/0.9, with the CRPS-like quantile loss against the truth.
2 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import StudentT

torch.manual_seed(2813)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


N_SERIES, HOURS, CTX, PRED = 370, 24 * 7 * 40, 168, 24
T = CTX + PRED
t = torch.arange(HOURS, dtype=torch.float32)
base = torch.rand(N_SERIES, 1) * 900 + 100
series = base * (
    1
    + 0.3 * torch.sin(2 * math.pi * t / 24)
    + 0.15 * torch.sin(2 * math.pi * t / 168)
    + 0.05 * torch.randn(N_SERIES, HOURS)
).clamp_min(0.01)
series = series.to(dev)
hour = (t % 24) / 23 - 0.5
wday = ((t // 24) % 7) / 6 - 0.5
age = torch.log1p(t) / math.log1p(HOURS)
holiday = ((t // 24) % 31 == 0).float()
cov = torch.stack([hour, wday, age, holiday], dim=1).to(dev)  # (HOURS, 4)


def windows(batch, gen_dev=dev):
    sid = torch.randint(0, N_SERIES, (batch,), device=gen_dev)
    start = torch.randint(1, HOURS - T, (batch,), device=gen_dev)
    idx = start.unsqueeze(1) + torch.arange(-1, T, device=gen_dev)  # one lag step before the window
    z = series[sid.unsqueeze(1), idx]  # (batch, T + 1)
    c = cov[idx[:, 1:]]  # (batch, T, 4)
    return sid, z, c


class DeepAR(nn.Module):
    def __init__(self, hidden=256, layers=3, emb=20):
        super().__init__()
        self.embed = nn.Embedding(N_SERIES, emb)
        self.lstm = nn.LSTM(1 + 4 + emb, hidden, num_layers=layers, batch_first=True, dropout=0.1)
        self.proj = nn.Linear(hidden, 3)

    def params(self, out):
        p = self.proj(out)
        df = 2.0 + F.softplus(p[..., 0])
        loc = p[..., 1]
        scale = F.softplus(p[..., 2]) + 1e-6
        return df, loc, scale

    def forward(self, lagged, c, sid, state=None):
        e = self.embed(sid).unsqueeze(1).expand(-1, lagged.shape[1], -1)
        out, state = self.lstm(torch.cat([lagged.unsqueeze(-1), c, e], dim=-1), state)
        return self.params(out), state


model = DeepAR().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(25):
    sid, z, c = windows(1024)
    v = 1 + z[:, 1 : CTX + 1].abs().mean(dim=1, keepdim=True)
    (df, loc, scale), _ = model(z[:, :-1] / v, c, sid)
    loss = -StudentT(df, loc, scale).log_prob(z[:, 1:] / v).mean()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train nll", round(loss.item(), 4))
report("train_teacher_forced_student_t_nll")

del loss, df, loc, scale
model.eval()
S, NB = 200, 256
with torch.no_grad():
    sid, z, c = windows(NB)
    v = 1 + z[:, 1 : CTX + 1].abs().mean(dim=1, keepdim=True)
    _, (h, cc) = model(z[:, :CTX] / v, c[:, :CTX], sid)
    h = h.repeat_interleave(S, dim=1)
    cc = cc.repeat_interleave(S, dim=1)
    sid_s = sid.repeat_interleave(S)
    v_s = v.repeat_interleave(S, dim=0)
    prev = (z[:, CTX] / v.squeeze(1)).repeat_interleave(S).unsqueeze(1)
    c_s = c[:, CTX:].repeat_interleave(S, dim=0)
    paths = []
    for k in range(PRED):
        (df, loc, scale), (h, cc) = model(prev, c_s[:, k : k + 1], sid_s, (h, cc))
        draw = StudentT(df, loc, scale).sample()
        paths.append(draw)
        prev = draw
    samples = (torch.cat(paths, dim=1) * v_s).view(NB, S, PRED)
    q = torch.tensor([0.1, 0.5, 0.9], device=dev)
    qs = torch.quantile(samples, q, dim=1)  # (3, NB, PRED)
    truth = z[:, CTX + 1 :]
    err = truth.unsqueeze(0) - qs
    ql = torch.maximum(q.view(3, 1, 1) * err, (q.view(3, 1, 1) - 1) * err).sum() * 2 / truth.abs().sum()
print("quantile loss", round(ql.item(), 4), tuple(samples.shape))
report("no_grad_200_paths_student_t_sampling")
