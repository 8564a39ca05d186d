"""A probabilistic multi-head regressor for weather-station records (fp32, synthetic tabular data), its
likelihoods written with `torch.special` and the rarer `torch.nn.functional` losses, then proper-scoring-rule
evaluation by numerical integration.
A shared trunk (64 features -> 3 x 1,024, SiLU, LayerNorm) with heads for: rainfall occurrence (probit link,
`torch.special.log_ndtr` of +z and -z), daily storm counts (negative binomial: `torch.special.gammaln`,
`torch.special.xlogy`, `torch.special.xlog1py`), wind direction (von Mises, its normaliser by
`torch.special.i0e`), temperature (`F.gaussian_nll_loss(full=True)` with a softplus variance), lightning
counts (`F.poisson_nll_loss(log_input=True, full=True)`, the Stirling term), gust speed (`F.huber_loss`,
delta 2) and an 8-way cloud-type class (`F.multi_margin_loss`, p=2, margin 0.5) with an entropy bonus by
`torch.special.entr`.
Phase 1, training: Adam, 10 steps at batch 65,536.
Phase 2, evaluation of 131,072 held-out rows in chunks of 16,384: the Gaussian head's CRPS by
`torch.trapezoid` over 1,024 thresholds of (`torch.special.ndtr` - step)^2, the von Mises predictive CDF by
`torch.cumulative_trapezoid` over 720 angles and its quartiles by `torch.searchsorted`, the negative
binomial's mean log-likelihood, and `torch.special.digamma` / `polygamma(1)` of its dispersion.
Phase 3, `torch.inference_mode()` scoring of 524,288 rows at once, the heads' point forecasts kept on the GPU.
3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2932)
dev = "cuda"
NF, H, NCLS = 64, 1024, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


W_true = torch.randn(NF, 8, device=dev) / math.sqrt(NF)


def records(n):
    x = torch.randn(n, NF, device=dev)
    s = x @ W_true
    rain = (s[:, 0] + 0.3 * torch.randn(n, device=dev) > 0).float()
    storms = torch.poisson(
        torch.exp(0.5 * s[:, 1]) * torch.distributions.Gamma(2.0, 2.0).sample((n,)).to(dev)
    )
    wind = torch.remainder(s[:, 2] * 2.0 + 0.4 * torch.randn(n, device=dev), 2 * math.pi) - math.pi
    temp = 12.0 + 6.0 * s[:, 3] + torch.randn(n, device=dev) * (1.0 + s[:, 4].abs())
    lightning = torch.poisson(torch.exp(s[:, 5]))
    gust = 8.0 + 4.0 * s[:, 6].abs() + torch.randn(n, device=dev).abs() * 3
    cloud = torch.bucketize(s[:, 7], torch.linspace(-1.5, 1.5, NCLS - 1, device=dev))
    return x, (rain, storms, wind, temp, lightning, gust, cloud)


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        layers = []
        for i in range(3):
            layers += [nn.Linear(NF if i == 0 else H, H), nn.SiLU(), nn.LayerNorm(H)]
        self.trunk = nn.Sequential(*layers)
        # probit z, NB log-mean + log-dispersion, von Mises mu (cos, sin) + log-kappa, temp mean + raw var,
        # lightning log-rate, gust, 8 cloud scores
        self.head = nn.Linear(H, 1 + 2 + 3 + 2 + 1 + 1 + NCLS)

    def forward(self, x):
        return self.head(self.trunk(x))


def split(out):
    z, nb_logmu, nb_logr, vm_c, vm_s, vm_logk, t_mu, t_raw, l_log, gust, cls = out.split(
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NCLS], dim=1
    )
    return (
        z.squeeze(1), nb_logmu.squeeze(1), nb_logr.squeeze(1), torch.atan2(vm_s, vm_c).squeeze(1),
        vm_logk.squeeze(1), t_mu.squeeze(1), F.softplus(t_raw).squeeze(1) + 1e-3, l_log.squeeze(1),
        gust.squeeze(1), cls,
    )  # fmt: skip


def nb_log_prob(y, log_mu, log_r):
    r, mu = log_r.exp(), log_mu.exp()
    return (
        torch.special.gammaln(y + r) - torch.special.gammaln(r) - torch.special.gammaln(y + 1)
        + torch.special.xlogy(r, r / (r + mu)) + torch.special.xlogy(y, mu / (r + mu))
    )  # fmt: skip


def von_mises_nll(theta, mu, log_k):
    k = log_k.exp()
    # log I0(k) = log(i0e(k)) + k
    return -k * torch.cos(theta - mu) + math.log(2 * math.pi) + torch.log(torch.special.i0e(k)) + k


def loss_fn(out, tg):
    rain, storms, wind, temp, lightning, gust, cloud = tg
    z, nb_logmu, nb_logr, vm_mu, vm_logk, t_mu, t_var, l_log, g_hat, cls = split(out)
    probit = -(rain * torch.special.log_ndtr(z) + (1 - rain) * torch.special.log_ndtr(-z)).mean()
    nb = -nb_log_prob(storms, nb_logmu, nb_logr).mean()
    nb_reg = torch.special.xlog1py(nb_logr.exp(), nb_logmu.exp()).mean() * 1e-3
    vm = von_mises_nll(wind, vm_mu, vm_logk).mean()
    gauss = F.gaussian_nll_loss(t_mu, temp, t_var, full=True)
    pois = F.poisson_nll_loss(l_log, lightning, log_input=True, full=True)
    hub = F.huber_loss(g_hat, gust, delta=2.0)
    mm = F.multi_margin_loss(cls, cloud, p=2, margin=0.5)
    ent = torch.special.entr(cls.softmax(-1)).sum(-1).mean()
    return probit + nb + nb_reg + vm + gauss + pois + hub + mm - 0.01 * ent


model = Forecaster().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)

# --- phase 1: training ------------------------------------------------------------------------------------
for step in range(10):
    x, tg = records(65536)
    loss = loss_fn(model(x), tg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print("step", step, "loss", round(loss.item(), 4))
del x, tg, loss
report("special_function_likelihoods_training")

# --- phase 2: CRPS by trapezoid, von Mises quantiles by cumulative_trapezoid ------------------------------
model.eval()
thresholds = torch.linspace(-30.0, 60.0, 1024, device=dev)
angles = torch.linspace(-math.pi, math.pi, 720, device=dev)
crps_sum, nb_ll_sum, quart = 0.0, 0.0, []
with torch.no_grad():
    xe, tge = records(131072)
    for i in range(0, 131072, 16384):
        out = split(model(xe[i : i + 16384]))
        t_mu, t_sd = out[5], out[6].sqrt()
        temp = tge[3][i : i + 16384]
        cdf = torch.special.ndtr((thresholds[None, :] - t_mu[:, None]) / t_sd[:, None])
        step_fn = (temp[:, None] <= thresholds[None, :]).float()
        crps = torch.trapezoid((cdf - step_fn) ** 2, thresholds, dim=1)
        crps_sum += crps.sum().item()
        k = out[4].exp()
        dens = torch.exp(k[:, None] * (torch.cos(angles[None, :] - out[3][:, None]) - 1.0)) / (
            2 * math.pi * torch.special.i0e(k)[:, None]
        )
        cum = torch.cumulative_trapezoid(dens, angles, dim=1)
        cum = cum / cum[:, -1:].clamp_min(1e-12)
        qi = torch.searchsorted(
            cum.contiguous(), torch.tensor([0.25, 0.5, 0.75], device=dev).expand(len(cum), 3)
        )
        quart.append(angles[qi.clamp_max(718) + 1])
        nb_ll_sum += nb_log_prob(tge[1][i : i + 16384], out[1], out[2]).sum().item()
        r = out[2].exp()
        dig = torch.special.digamma(r) + torch.special.polygamma(1, r)
        del out, cdf, step_fn, crps, dens, cum, qi, dig
    quart = torch.cat(quart)
print(
    "CRPS(temp)",
    round(crps_sum / 131072, 4),
    "NB ll",
    round(nb_ll_sum / 131072, 4),
    "quartiles",
    tuple(quart.shape),
)
del xe, tge, quart
report("trapezoid_crps_cumulative_trapezoid_quantiles")

# --- phase 3: inference_mode bulk scoring -----------------------------------------------------------------
with torch.inference_mode():
    xb, _ = records(524288)
    z, nb_logmu, nb_logr, vm_mu, vm_logk, t_mu, t_var, l_log, g_hat, cls = split(model(xb))
    forecast = torch.stack(
        [
            torch.special.ndtr(z),
            nb_logmu.exp(),
            vm_mu,
            t_mu,
            t_var.sqrt(),
            l_log.exp(),
            g_hat,
            cls.argmax(-1).float(),
        ],
        dim=1,
    )
    del z, nb_logmu, nb_logr, vm_mu, vm_logk, t_mu, t_var, l_log, g_hat, cls
print("forecast", tuple(forecast.shape), forecast.dtype)
report("inference_mode_bulk_scoring")
