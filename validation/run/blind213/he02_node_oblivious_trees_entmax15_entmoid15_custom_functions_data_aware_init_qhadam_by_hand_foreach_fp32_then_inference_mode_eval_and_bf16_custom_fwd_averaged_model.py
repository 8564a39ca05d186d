"""NODE (Neural Oblivious Decision Ensembles) for tabular regression, written by hand.

ODST layer: 512 oblivious trees of depth 6 with 3 outputs a tree; per-tree-level feature selection by
entmax-1.5 over the input features (a torch.autograd.Function: sort, cumsum threshold, backward through
the square-root of the output), soft splits by entmoid-1.5 (a second Function saving only its output),
bin codes as a fixed one-hot buffer, response weights by einsum and a product over depth. DenseBlock of
2 layers (each sees the inputs and all earlier trees' outputs: 128 -> 1,664 features), prediction the
mean of the first output of every tree. Data-aware initialisation on the first batch: thresholds taken
from the sorted feature values at Beta(1, 1) quantiles (sort + gather), log-temperatures from the
largest absolute deviation.

Training: 128 numeric features, batch 2,048, fp32, QHAdam written by hand with torch._foreach ops
(nus 0.7/1.0, betas 0.95/0.998, lr 1e-3).

Phases: data-aware init and the first step; 3 more steps; inference_mode evaluation of 32,768 rows in
chunks of 8,192; then 3 steps under bf16 autocast at batch 3,072 (both Functions' forwards under
torch.amp.custom_fwd(cast_inputs=float32)) with a torch.optim.swa_utils.AveragedModel updated after each
step; inference_mode evaluation of the averaged model. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2132)
if SMALL:
    N_FEAT, TREES, DEPTH, BATCH, N_TEST = 16, 32, 4, 128, 1024
else:
    N_FEAT, TREES, DEPTH, BATCH, N_TEST = 128, 512, 6, 2048, 32768
TREE_DIM, LAYERS = 3, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class Entmax15(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x, dim):
        ctx.dim = dim
        x = (x - x.amax(dim=dim, keepdim=True)) / 2
        xs, _ = torch.sort(x, dim=dim, descending=True)
        shape = [1] * x.ndim
        shape[dim] = -1
        rho = torch.arange(1, x.shape[dim] + 1, device=x.device, dtype=x.dtype).view(shape)
        mean = xs.cumsum(dim) / rho
        mean_sq = (xs**2).cumsum(dim) / rho
        ss = rho * (mean_sq - mean**2)
        delta = torch.clamp((1 - ss) / rho, min=0)
        tau = mean - torch.sqrt(delta)
        support = (tau <= xs).sum(dim=dim, keepdim=True)
        tau_star = tau.gather(dim, support - 1)
        y = torch.clamp(x - tau_star, min=0) ** 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        gppr = y.sqrt()
        dx = dy * gppr
        q = dx.sum(ctx.dim, keepdim=True) / gppr.sum(ctx.dim, keepdim=True)
        dx -= q * gppr
        return dx, None


class Entmoid15(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x):
        is_pos = x >= 0
        x = x.abs()
        tau = (x + torch.sqrt(F.relu(8 - x**2))) / 2
        tau.masked_fill_(tau <= x, 2.0)
        y_neg = 0.25 * F.relu(tau - x, inplace=True) ** 2
        out = torch.where(is_pos, 1 - y_neg, y_neg)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, dy):
        (out,) = ctx.saved_tensors
        g0, g1 = out.sqrt(), (1 - out).sqrt()
        dx = dy * g0
        dx -= dx / (g0 + g1) * g0
        return dx


class ODST(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.response = nn.Parameter(torch.randn(TREES, TREE_DIM, 2**DEPTH))
        self.selection_logits = nn.Parameter(torch.rand(in_features, TREES, DEPTH))
        self.thresholds = nn.Parameter(torch.zeros(TREES, DEPTH))
        self.log_temperatures = nn.Parameter(torch.zeros(TREES, DEPTH))
        idx = torch.arange(2**DEPTH)
        offsets = 2 ** torch.arange(DEPTH)
        codes = (idx.view(1, -1) // offsets.view(-1, 1) % 2).float()
        self.register_buffer("bin_codes_1hot", torch.stack([codes, 1 - codes], dim=-1), persistent=False)
        self.initialized = False

    def feature_values(self, x):
        selectors = Entmax15.apply(self.selection_logits, 0)
        return torch.einsum("bi,ind->bnd", x, selectors)

    @torch.no_grad()
    def data_aware_init(self, x):
        fv = self.feature_values(x).flatten(1)
        srt, _ = fv.sort(dim=0)
        q = torch.distributions.Beta(1.0, 1.0).sample((fv.shape[1],)).to(x.device)
        pos = (q * (fv.shape[0] - 1)).round().long().view(1, -1)
        self.thresholds.copy_(srt.gather(0, pos).view(TREES, DEPTH))
        dev = (fv - self.thresholds.flatten()).abs().amax(dim=0)
        self.log_temperatures.copy_(torch.log(dev + 1e-6).view(TREES, DEPTH))
        self.initialized = True

    def forward(self, x):
        if not self.initialized:
            self.data_aware_init(x)
        fv = self.feature_values(x)
        logits = (fv - self.thresholds) * torch.exp(-self.log_temperatures)
        logits = torch.stack([-logits, logits], dim=-1)
        bins = Entmoid15.apply(logits)
        matches = torch.einsum("btds,dcs->btdc", bins, self.bin_codes_1hot)
        weights = matches.prod(dim=-2)
        return torch.einsum("btc,tdc->btd", weights, self.response).flatten(1)


class DenseBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([ODST(N_FEAT + i * TREES * TREE_DIM) for i in range(LAYERS)])

    def forward(self, x):
        outs = [x]
        for layer in self.layers:
            outs.append(layer(torch.cat(outs, dim=-1)))
        trees = torch.cat(outs[1:], dim=-1).view(len(x), -1, TREE_DIM)
        return trees[..., 0].mean(-1)


class QHAdam:
    def __init__(self, params, lr=1e-3, betas=(0.95, 0.998), nus=(0.7, 1.0), eps=1e-8):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.nus, self.eps = lr, betas, nus, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        nu1, nu2 = self.nus
        grads = [p.grad for p in self.params]
        torch._foreach_mul_(self.m, b1)
        torch._foreach_add_(self.m, grads, alpha=1 - b1)
        torch._foreach_mul_(self.v, b2)
        torch._foreach_addcmul_(self.v, grads, grads, value=1 - b2)
        m_hat = torch._foreach_div(self.m, 1 - b1**self.t)
        v_hat = torch._foreach_div(self.v, 1 - b2**self.t)
        num = torch._foreach_mul(grads, 1 - nu1)
        torch._foreach_add_(num, m_hat, alpha=nu1)
        den = torch._foreach_mul(grads, grads)
        torch._foreach_mul_(den, 1 - nu2)
        torch._foreach_add_(den, v_hat, alpha=nu2)
        torch._foreach_sqrt_(den)
        torch._foreach_add_(den, self.eps)
        torch._foreach_addcdiv_(self.params, num, den, value=-self.lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


x_test = torch.randn(N_TEST, N_FEAT, device=device)
w1 = torch.randn(N_FEAT, 32, device=device) / N_FEAT**0.5
w2 = torch.randn(32, device=device) / 32**0.5


def target(x):
    return torch.tanh(x @ w1) @ w2


model = DenseBlock().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = QHAdam(model.parameters())


def step(batch, use_amp, averaged=None):
    x = torch.randn(batch, N_FEAT, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        pred = model(x)
        loss = F.mse_loss(pred.float(), target(x))
    loss.backward()
    opt.step()
    opt.zero_grad()
    if averaged is not None:
        averaged.update_parameters(model)
    return loss.item()


def evaluate(m, use_amp):
    m.eval()
    se = torch.zeros((), device=device)
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        for i in range(0, N_TEST, 8192):
            x = x_test[i : i + 8192]
            se += (m(x).float() - target(x)).square().sum()
    m.train()
    return (se / N_TEST).sqrt().item()


model.train()
print(f"step 0 loss {step(BATCH, False):.4f}")
report("init and first step")
for _ in range(3):
    loss = step(BATCH, False)
print(f"step 3 loss {loss:.4f}")
report("train")
print(f"test rmse {evaluate(model, False):.4f}")
report("eval")

swa = AveragedModel(model)
for i in range(3):
    print(f"bf16 step {i} loss {step(3 * BATCH // 2, amp, swa):.4f}")
report("bf16 train + averaging")
print(f"averaged model test rmse {evaluate(swa, amp):.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
