"""Deep kernel learning (Wilson et al. 2016) by hand: an exact Gaussian process whose RBF kernel acts on the
features of an MLP, on a synthetic 8-dimensional regression problem. The kernel's lengthscale, output scale
and the noise are kept positive with ``torch.nn.utils.parametrize.register_parametrization`` (a Softplus
module with a floor), and the negative marginal log-likelihood is written out with ``torch.linalg.cholesky``,
``torch.cholesky_solve`` and the Cholesky diagonal's log. The optimizer's rate follows a
``ChainedScheduler`` of ``ExponentialLR`` and ``MultiplicativeLR``.

Phases: 0 data on the GPU and the model built; 1 the feature extractor pretrained as a plain regressor (MSE,
Adam); 2 exact-GP training of features and kernel hyperparameters together on 4096 points (negative MLL,
Adam, chained schedulers); 3 the posterior predictive at 2048 test points in fp32 and 32 joint posterior
samples at 512 of them drawn with ``MultivariateNormal(scale_tril=...).rsample``; 4 the predictive redone
in float64 with ``torch.linalg.solve_triangular`` for 1024 test points."""

import math

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Positive(nn.Module):
    """softplus(raw) + floor, with a right inverse so that values can be assigned directly."""

    def __init__(self, floor=1e-4):
        super().__init__()
        self.floor = floor

    def forward(self, raw):
        return nn.functional.softplus(raw) + self.floor

    def right_inverse(self, value):
        v = value - self.floor
        return v + torch.log(-torch.expm1(-v))


class RBFScaleKernel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lengthscale = nn.Parameter(torch.ones(1, dim))
        self.outputscale = nn.Parameter(torch.ones(()))
        parametrize.register_parametrization(self, "lengthscale", Positive())
        parametrize.register_parametrization(self, "outputscale", Positive())

    def forward(self, a, b):
        a = a / self.lengthscale
        b = b / self.lengthscale
        d2 = torch.cdist(a, b).pow(2)
        return self.outputscale * torch.exp(-0.5 * d2)


class FeatureExtractor(nn.Sequential):
    def __init__(self, d_in, width, d_out):
        super().__init__(
            nn.Linear(d_in, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, width // 2),
            nn.ReLU(),
            nn.Linear(width // 2, d_out),
        )


class DKLRegression(nn.Module):
    def __init__(self, d_in, width=1000, d_feat=2):
        super().__init__()
        self.features = FeatureExtractor(d_in, width, d_feat)
        self.kernel = RBFScaleKernel(d_feat)
        self.noise = nn.Parameter(torch.tensor(0.1))
        parametrize.register_parametrization(self, "noise", Positive(1e-4))
        self.mean = nn.Parameter(torch.zeros(()))

    def neg_mll(self, x, y):
        z = self.features(x)
        n = z.shape[0]
        K = self.kernel(z, z) + self.noise * torch.eye(n, device=x.device, dtype=x.dtype)
        L = torch.linalg.cholesky(K)
        r = (y - self.mean).unsqueeze(-1)
        alpha = torch.cholesky_solve(r, L)
        data_fit = 0.5 * (r * alpha).sum()
        logdet = torch.log(torch.diagonal(L)).sum()
        return (data_fit + logdet + 0.5 * n * math.log(2 * math.pi)) / n

    def predictive(self, x_train, y_train, x_test, full_cov=False):
        z_tr = self.features(x_train)
        z_te = self.features(x_test)
        n = z_tr.shape[0]
        K = self.kernel(z_tr, z_tr) + self.noise * torch.eye(n, device=x_train.device, dtype=x_train.dtype)
        L = torch.linalg.cholesky(K)
        Ks = self.kernel(z_tr, z_te)
        V = torch.linalg.solve_triangular(L, Ks, upper=False)
        w = torch.linalg.solve_triangular(L, (y_train - self.mean).unsqueeze(-1), upper=False)
        mean = self.mean + (V * w).sum(0)
        if full_cov:
            cov = self.kernel(z_te, z_te) - V.transpose(0, 1) @ V
            return mean, cov
        var = self.kernel.outputscale - V.pow(2).sum(0)
        return mean, var.clamp_min(1e-6)


def target(x):
    return torch.sin(3 * x[:, 0]) * torch.cos(2 * x[:, 1]) + 0.5 * x[:, 2:].pow(2).sum(1).sqrt()


d_in, n_train, n_test = 8, 4096, 2048
x_train = torch.rand(n_train, d_in, device=device) * 2 - 1
y_train = target(x_train) + 0.05 * torch.randn(n_train, device=device)
x_test = torch.rand(n_test, d_in, device=device) * 2 - 1
y_test = target(x_test)
model = DKLRegression(d_in).to(device)
report("data and model")

# 1: pretrain the feature extractor as a regressor with a throwaway linear head
head = nn.Linear(2, 1).to(device)
pre_opt = torch.optim.Adam(list(model.features.parameters()) + list(head.parameters()), lr=1e-3)
for _step in range(20):
    idx = torch.randint(0, n_train, (512,), device=device)
    pred = head(model.features(x_train[idx])).squeeze(-1)
    loss = nn.functional.mse_loss(pred, y_train[idx])
    pre_opt.zero_grad(set_to_none=True)
    loss.backward()
    pre_opt.step()
print("pretrain mse", loss.item())
del head, pre_opt
report("feature extractor pretraining")

# 2: exact GP training on all 4096 points
opt = torch.optim.Adam(
    [
        {"params": model.features.parameters(), "lr": 1e-3},
        {"params": [p for n, p in model.named_parameters() if not n.startswith("features.")], "lr": 1e-2},
    ]
)
sched = torch.optim.lr_scheduler.ChainedScheduler(
    [
        torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.98),
        torch.optim.lr_scheduler.MultiplicativeLR(opt, lr_lambda=lambda epoch: 0.995),
    ]
)
model.train()
for _step in range(30):
    loss = model.neg_mll(x_train, y_train)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
print("neg mll", loss.item(), "noise", model.noise.item(), "lr", sched.get_last_lr())
report("exact GP marginal likelihood training")

# 3: posterior predictive and joint posterior samples
model.eval()
with torch.no_grad(), parametrize.cached():
    mean, var = model.predictive(x_train, y_train, x_test)
    rmse = (mean - y_test).pow(2).mean().sqrt()
    nlpd = 0.5 * (torch.log(2 * math.pi * (var + model.noise)) + (mean - y_test).pow(2) / (var + model.noise))
    print("rmse", rmse.item(), "nlpd", nlpd.mean().item())
    m512, cov512 = model.predictive(x_train, y_train, x_test[:512], full_cov=True)
    cov512 = cov512 + 1e-3 * torch.eye(512, device=device)
    post = torch.distributions.MultivariateNormal(m512, scale_tril=torch.linalg.cholesky(cov512))
    samples = post.rsample((32,))
    print("sample spread", samples.std(0).mean().item())
report("posterior predictive and joint samples")

# 4: float64 predictive
model64 = model.double()
with torch.no_grad(), parametrize.cached():
    mean64, var64 = model64.predictive(x_train.double(), y_train.double(), x_test[:1024].double())
    print("fp64 rmse", (mean64 - y_test[:1024].double()).pow(2).mean().sqrt().item())
report("float64 predictive")
