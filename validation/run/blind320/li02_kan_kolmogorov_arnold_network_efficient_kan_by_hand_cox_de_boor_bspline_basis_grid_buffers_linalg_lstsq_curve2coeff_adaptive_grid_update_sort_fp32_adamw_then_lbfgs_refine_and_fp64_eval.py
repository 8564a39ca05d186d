"""Kolmogorov-Arnold Network written from the paper (Liu et al. 2024) in the style of the
"efficient-kan" re-implementation: each KANLinear holds a uniform knot grid as a buffer, evaluates
B-spline bases by the Cox-de Boor recursion on the fly, and mixes a SiLU base branch with spline
weights (plus a standalone spline scaler). Spline coefficients are initialised from noise by
least squares (``torch.linalg.lstsq`` on the basis matrix, "curve2coeff"), and the grid is refined
from the data's distribution (sorted activations, a blend of adaptive and uniform knots) followed by
a new least-squares fit that keeps the learnt function. Fits a synthetic physics-style formula of
eight inputs, with the paper's L1 + entropy regularisation of the spline weights.

Phases: 0 model built on the GPU (lstsq initialisation); 1 AdamW training with regularisation;
2 grid update of every layer from a batch (sort + lstsq) and LBFGS refinement with a closure;
3 evaluation in float64 (a deep copy converted to double) on a large held-out set."""

import copy
import math

import torch
import torch.nn.functional as F

torch.manual_seed(7)
device = "cuda"


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class KANLinear(torch.nn.Module):
    def __init__(
        self, in_f, out_f, grid_size=8, spline_order=3, scale_noise=0.1, grid_eps=0.02, grid_range=(-1, 1)
    ):
        super().__init__()
        self.in_f, self.out_f, self.grid_size, self.spline_order = in_f, out_f, grid_size, spline_order
        h = (grid_range[1] - grid_range[0]) / grid_size
        grid = torch.arange(-spline_order, grid_size + spline_order + 1) * h + grid_range[0]
        self.register_buffer("grid", grid.expand(in_f, -1).contiguous())
        self.base_weight = torch.nn.Parameter(torch.empty(out_f, in_f))
        self.spline_weight = torch.nn.Parameter(torch.empty(out_f, in_f, grid_size + spline_order))
        self.spline_scaler = torch.nn.Parameter(torch.empty(out_f, in_f))
        self.scale_noise, self.grid_eps = scale_noise, grid_eps
        torch.nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5))
        torch.nn.init.kaiming_uniform_(self.spline_scaler, a=math.sqrt(5))
        with torch.no_grad():
            noise = (torch.rand(grid_size + 1, in_f, out_f) - 0.5) * scale_noise / grid_size
            self.spline_weight.copy_(self.curve2coeff(self.grid.T[spline_order:-spline_order], noise))

    def b_splines(self, x):
        grid = self.grid
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, self.spline_order + 1):
            bases = (x - grid[:, : -(k + 1)]) / (grid[:, k:-1] - grid[:, : -(k + 1)]) * bases[:, :, :-1] + (
                grid[:, k + 1 :] - x
            ) / (grid[:, k + 1 :] - grid[:, 1:(-k)]) * bases[:, :, 1:]
        return bases.contiguous()

    def curve2coeff(self, x, y):
        A = self.b_splines(x).transpose(0, 1)  # (in, batch, coeff)
        B = y.transpose(0, 1)  # (in, batch, out)
        sol = torch.linalg.lstsq(A, B).solution  # (in, coeff, out)
        return sol.permute(2, 0, 1).contiguous()

    @property
    def scaled_spline_weight(self):
        return self.spline_weight * self.spline_scaler.unsqueeze(-1)

    def forward(self, x):
        base = F.linear(F.silu(x), self.base_weight)
        spline = F.linear(
            self.b_splines(x).view(x.size(0), -1), self.scaled_spline_weight.view(self.out_f, -1)
        )
        return base + spline

    @torch.no_grad()
    def update_grid(self, x, margin=0.01):
        batch = x.size(0)
        splines = self.b_splines(x).permute(1, 0, 2)  # (in, batch, coeff)
        orig = self.scaled_spline_weight.permute(1, 2, 0)  # (in, coeff, out)
        unreduced = torch.bmm(splines, orig).permute(1, 0, 2)  # (batch, in, out)
        x_sorted = torch.sort(x, dim=0)[0]
        idx = torch.linspace(0, batch - 1, self.grid_size + 1, dtype=torch.int64, device=x.device)
        grid_adaptive = x_sorted[idx]
        step = (x_sorted[-1] - x_sorted[0] + 2 * margin) / self.grid_size
        grid_uniform = (
            torch.arange(self.grid_size + 1, dtype=torch.float32, device=x.device).unsqueeze(1) * step
            + x_sorted[0]
            - margin
        )
        grid = self.grid_eps * grid_uniform + (1 - self.grid_eps) * grid_adaptive
        grid = torch.cat(
            [
                grid[:1] - step * torch.arange(self.spline_order, 0, -1, device=x.device).unsqueeze(1),
                grid,
                grid[-1:] + step * torch.arange(1, self.spline_order + 1, device=x.device).unsqueeze(1),
            ],
            dim=0,
        )
        self.grid.copy_(grid.T)
        self.spline_weight.data.copy_(self.curve2coeff(x, unreduced))
        self.spline_scaler.data.fill_(1.0)

    def regularization_loss(self):
        l1 = self.spline_weight.abs().mean(-1)
        act = l1.sum()
        p = l1 / act
        return act + (-torch.sum(p * p.log()))


class KAN(torch.nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.layers = torch.nn.ModuleList([KANLinear(a, b) for a, b in zip(widths[:-1], widths[1:])])

    def forward(self, x, update_grid=False):
        for layer in self.layers:
            if update_grid:
                layer.update_grid(x)
            x = layer(x)
        return x

    def regularization_loss(self):
        return sum(layer.regularization_loss() for layer in self.layers)


def target_fn(x):
    # a Feynman-style formula of eight variables
    return (
        torch.exp(torch.sin(math.pi * x[:, 0]) + x[:, 1] ** 2)
        + x[:, 2] * x[:, 3] / (1 + x[:, 4] ** 2)
        + torch.sqrt(1 + x[:, 5] ** 2 + x[:, 6] ** 2)
        - torch.cos(x[:, 7] * 3)
    ).unsqueeze(1)


model = KAN([8, 256, 256, 64, 1]).to(device)
x_train = torch.rand(16384, 8, device=device) * 2 - 1
y_train = target_fn(x_train)
x_test = torch.rand(262144, 8, device=device) * 2 - 1
y_test = target_fn(x_test)
print("params", sum(p.numel() for p in model.parameters()))
report("phase0 build")

opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
for epoch in range(3):
    perm = torch.randperm(x_train.size(0), device=device)
    for i in range(0, x_train.size(0), 4096):
        b = perm[i : i + 4096]
        pred = model(x_train[b])
        loss = F.mse_loss(pred, y_train[b]) + 1e-5 * model.regularization_loss()
        opt.zero_grad()
        loss.backward()
        opt.step()
    sched.step()
print("adamw loss", round(loss.item(), 4))
report("phase1 adamw")

with torch.no_grad():
    model(x_train[:4096], update_grid=True)
lbfgs = torch.optim.LBFGS(
    model.parameters(), lr=0.5, max_iter=6, history_size=10, line_search_fn="strong_wolfe"
)


def closure():
    lbfgs.zero_grad()
    loss = F.mse_loss(model(x_train[:8192]), y_train[:8192])
    loss.backward()
    return loss


for _ in range(2):
    l = lbfgs.step(closure)
print("lbfgs loss", round(l.item(), 4))
report("phase2 grid_update_lbfgs")

model64 = copy.deepcopy(model).double()
with torch.no_grad():
    errs = []
    for i in range(0, x_test.size(0), 65536):
        pred = model64(x_test[i : i + 65536].double())
        errs.append(((pred - y_test[i : i + 65536].double()) ** 2).sum())
    rmse = torch.sqrt(torch.stack(errs).sum() / x_test.size(0))
print("test rmse fp64", round(rmse.item(), 4))
report("phase3 fp64_eval")
