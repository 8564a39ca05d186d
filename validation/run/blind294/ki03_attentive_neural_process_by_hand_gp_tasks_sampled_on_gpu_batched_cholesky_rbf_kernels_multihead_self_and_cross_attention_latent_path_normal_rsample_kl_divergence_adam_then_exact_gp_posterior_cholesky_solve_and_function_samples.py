"""Attentive Neural Process (Kim et al. 2019, "Attentive Neural Processes") written by hand, trained on 1-D
regression tasks drawn from Gaussian processes on the GPU, as the paper's GP experiments do. Each task:
256 inputs x ~ U(-2, 2), a squared-exponential kernel of its own lengthscale (0.1..0.6) and scale
(0.1..1.0) plus 1e-4 jitter, a batched `torch.linalg.cholesky` of the (tasks, 256, 256) Gram matrices and
y = L @ eps. The number of context points is drawn on the host each step (3..96); the targets are all 256.
The model: a deterministic path (MLP on [x, y] -> 128, two self-attention layers of
`nn.MultiheadAttention(128, 8)` called with need_weights=False, then cross-attention from MLP-embedded
target x onto embedded context x, keeping the head-averaged weights for plotting), a latent path (MLP,
two self-attention layers, mean pool, mu and 0.1 + 0.9 * sigmoid sigma of a 128-d z, `rsample`), a
decoder MLP on [r*, z, x] to the mean and 0.1 + 0.9 * softplus scale of y. Loss: the negative
`Normal.log_prob` of the targets plus `kl_divergence(q(z | all), q(z | context))`, Adam lr 5e-5.
Phase 1: 30 training steps at 192 tasks.
Phase 2: evaluation under no_grad on 64 tasks, 50 context points and a dense 400-point grid: the exact
GP posterior (Cholesky of the context Gram, `torch.cholesky_solve` for the mean, `solve_triangular`
for the variance) against the ANP's predictive log-likelihood.
Phase 3: 32 function samples per task (z drawn 32 times, the context expanded) on the grid, no_grad.
3 phases."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal, kl_divergence

torch.manual_seed(2943)
dev = "cuda"
N_PTS, D = 256, 128


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def rbf(x1, x2, ls, scale):
    d2 = (x1[:, :, None, 0] - x2[:, None, :, 0]) ** 2
    return scale[:, None, None] ** 2 * torch.exp(-0.5 * d2 / ls[:, None, None] ** 2)


def gp_tasks(b, n):
    x = torch.rand(b, n, 1, device=dev) * 4 - 2
    ls = torch.rand(b, device=dev) * 0.5 + 0.1
    scale = torch.rand(b, device=dev) * 0.9 + 0.1
    k = rbf(x, x, ls, scale) + 1e-4 * torch.eye(n, device=dev)
    chol = torch.linalg.cholesky(k)
    y = chol @ torch.randn(b, n, 1, device=dev)
    return x, y, ls, scale


def mlp(d_in, d_out, hidden=D, depth=3):
    layers, d = [], d_in
    for _ in range(depth - 1):
        layers += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers)


class SelfAttnStack(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.attn = nn.ModuleList(nn.MultiheadAttention(D, 8, batch_first=True) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(D) for _ in range(layers))

    def forward(self, h):
        for attn, norm in zip(self.attn, self.norm, strict=True):
            h = norm(h + attn(h, h, h, need_weights=False)[0])
        return h


class ANP(nn.Module):
    def __init__(self):
        super().__init__()
        self.det_enc, self.det_sa = mlp(2, D), SelfAttnStack()
        self.q_embed, self.k_embed = mlp(1, D, depth=2), mlp(1, D, depth=2)
        self.cross = nn.MultiheadAttention(D, 8, batch_first=True)
        self.lat_enc, self.lat_sa = mlp(2, D), SelfAttnStack()
        self.lat_hidden = nn.Linear(D, D)
        self.lat_mu, self.lat_sigma = nn.Linear(D, D), nn.Linear(D, D)
        self.decoder = mlp(2 * D + 1, 2)

    def latent(self, x, y):
        s = self.lat_sa(self.lat_enc(torch.cat([x, y], -1))).mean(1)
        s = F.relu(self.lat_hidden(s))
        return Normal(self.lat_mu(s), 0.1 + 0.9 * torch.sigmoid(self.lat_sigma(s)))

    def forward(self, xc, yc, xt, yt=None, n_z=1):
        r = self.det_sa(self.det_enc(torch.cat([xc, yc], -1)))
        r_star, attn_w = self.cross(self.q_embed(xt), self.k_embed(xc), r)
        prior = self.latent(xc, yc)
        posterior = self.latent(xt, yt) if yt is not None else prior
        z = posterior.rsample((n_z,))  # (n_z, B, D)
        b, t = xt.shape[:2]
        z = z[:, :, None, :].expand(n_z, b, t, D)
        h = torch.cat([r_star.expand(n_z, b, t, D), z, xt.expand(n_z, b, t, 1)], -1)
        out = self.decoder(h)
        mu, sigma = out[..., :1], 0.1 + 0.9 * F.softplus(out[..., 1:])
        return Normal(mu, sigma), prior, posterior, attn_w


model = ANP().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=5e-5)
host = torch.Generator().manual_seed(11)
print("parameters", sum(p.numel() for p in model.parameters()))
for step in range(30):
    x, y, _, _ = gp_tasks(192, N_PTS)
    n_ctx = int(torch.randint(3, 97, (1,), generator=host))
    perm = torch.randperm(N_PTS, generator=host).to(dev)
    x, y = x[:, perm], y[:, perm]
    dist, prior, posterior, _ = model(x[:, :n_ctx], y[:, :n_ctx], x, y)
    nll = -dist.log_prob(y[None]).mean()
    kl = kl_divergence(posterior, prior).sum(-1).mean() / N_PTS
    loss = nll + kl
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step}: context {n_ctx} nll {nll.item():.4f} kl {kl.item():.4f}")
report("train_anp_192_gp_tasks_256_points")

del dist, prior, posterior, loss, nll, kl
model.eval()
with torch.no_grad():
    xc, yc, ls, scale = gp_tasks(64, 50)
    grid = torch.linspace(-2, 2, 400, device=dev).view(1, 400, 1).expand(64, 400, 1)
    k_cc = rbf(xc, xc, ls, scale) + 1e-4 * torch.eye(50, device=dev)
    k_tc = rbf(grid, xc, ls, scale)
    chol = torch.linalg.cholesky(k_cc)
    alpha = torch.cholesky_solve(yc, chol)
    gp_mean = k_tc @ alpha
    v = torch.linalg.solve_triangular(chol, k_tc.transpose(1, 2), upper=False)
    gp_var = scale[:, None, None] ** 2 + 1e-4 - (v**2).sum(1)[..., None]
    dist, _, _, attn_w = model(xc, yc, grid)
    gp_dist = Normal(gp_mean, gp_var.clamp_min(1e-6).sqrt())
    print(
        "mean abs gap to exact GP",
        round((dist.mean[0] - gp_mean).abs().mean().item(), 4),
        "attention map",
        tuple(attn_w.shape),
        "gp self log-lik",
        round(gp_dist.log_prob(gp_mean).mean().item(), 3),
    )
report("no_grad_exact_gp_posterior_vs_anp_400_point_grid")

with torch.no_grad():
    samples, _, _, _ = model(xc, yc, grid, n_z=32)
    draws = samples.sample()  # (32, 64, 400, 1)
    band = torch.quantile(draws[..., 0], torch.tensor([0.05, 0.95], device=dev), dim=0)
    print("sample band width", round((band[1] - band[0]).mean().item(), 4))
report("no_grad_32_function_samples_per_task")
