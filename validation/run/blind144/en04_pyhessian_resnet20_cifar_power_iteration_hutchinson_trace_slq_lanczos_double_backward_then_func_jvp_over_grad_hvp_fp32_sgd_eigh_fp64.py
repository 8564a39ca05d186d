"""Loss-landscape spectra of a CIFAR ResNet-20 the way PyHessian (Yao et al.) computes them: the
network (3 stages of 3 basic blocks, 16/32/64 channels, BatchNorm) trained 2 steps by SGD with
momentum and weight decay on batch 256 of 32 x 32 in fp32, then, in eval mode on a batch of 1,024,
the gradient with create_graph=True and Hessian-vector products by a second torch.autograd.grad
with grad_outputs and retain_graph (double backward through the convolutions and batch norm): the
top eigenvalue by 12 steps of power iteration, the Hessian trace by 16 Rademacher probes
(Hutchinson), and the eigenvalue density by stochastic Lanczos quadrature (2 runs of 12 Lanczos
iterations with full reorthogonalisation, the tridiagonal matrix's eigenpairs by
torch.linalg.eigh in fp64 on the GPU); then the same Hessian-vector product by torch.func, a
jvp over grad of the loss as a function of the parameters (functional_call, forward-over-reverse),
checked against the double-backward one along the top eigenvector; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, jvp

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14404)
B, BH, W = (8, 16, 4) if SMALL else (256, 1024, 16)
POWER, PROBES, LANCZOS, RUNS = (2, 2, 3, 1) if SMALL else (12, 16, 12, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = cout - cin

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x
        if self.pad:
            short = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad // 2, self.pad // 2))
        return F.relu(out + short)


class ResNet20(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, W, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(W)
        layers, cin = [], W
        for i, cout in enumerate((W, 2 * W, 4 * W)):
            for j in range(3):
                layers.append(BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


model = ResNet20().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    x = torch.randn(B, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
if device == "cuda":
    print(
        f"train loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del x, y, loss
opt.zero_grad(set_to_none=True)

model.eval()
params = [p for p in model.parameters() if p.requires_grad]
xh = torch.randn(BH, 3, 32, 32, device=device)
yh = torch.randint(0, 10, (BH,), device=device)
loss = F.cross_entropy(model(xh), yh)
gradsH = torch.autograd.grad(loss, params, create_graph=True)


def hvp(v):
    return torch.autograd.grad(gradsH, params, grad_outputs=v, retain_graph=True)


def group_dot(a, b):
    return sum((x * y).sum() for x, y in zip(a, b))


def normalize(v):
    n = group_dot(v, v).sqrt() + 1e-6
    return [x / n for x in v]


v = normalize([torch.randn_like(p) for p in params])
eig = None
for _ in range(POWER):
    hv = hvp(v)
    eig = group_dot(hv, v).item()
    v = normalize([h.detach() for h in hv])
top_vec = v
if device == "cuda":
    print(
        f"top eigenvalue {eig:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

trace_samples = []
for _ in range(PROBES):
    z = [torch.randint_like(p, high=2) * 2 - 1 for p in params]
    hz = hvp(z)
    trace_samples.append(group_dot(hz, z).item())
trace = sum(trace_samples) / len(trace_samples)

eigen_list, weight_list = [], []
for _ in range(RUNS):
    v = normalize([torch.randint_like(p, high=2) * 2 - 1 for p in params])
    v_list, alphas, betas = [v], [], []
    w_prev, beta = None, 0.0
    for i in range(LANCZOS):
        w = [h.detach() for h in hvp(v)]
        alpha = group_dot(w, v)
        alphas.append(alpha.item())
        if i > 0:
            w = [wi - beta * pi for wi, pi in zip(w, w_prev)]
        w = [wi - alpha * vi for wi, vi in zip(w, v)]
        for u in v_list:
            c = group_dot(w, u)
            w = [wi - c * ui for wi, ui in zip(w, u)]
        beta = group_dot(w, w).sqrt()
        betas.append(beta.item())
        w_prev = v
        v = [wi / (beta + 1e-6) for wi in w]
        v_list.append(v)
    T = torch.zeros(LANCZOS, LANCZOS, dtype=torch.float64, device=device)
    T.diagonal().copy_(torch.tensor(alphas, dtype=torch.float64))
    off = torch.tensor(betas[:-1], dtype=torch.float64, device=device)
    T.diagonal(1).copy_(off)
    T.diagonal(-1).copy_(off)
    evals, evecs = torch.linalg.eigh(T)
    eigen_list.append(evals)
    weight_list.append(evecs[0].pow(2))
    del v_list, w, w_prev
density = torch.stack(weight_list)
if device == "cuda":
    print(
        f"trace {trace:.2f} lanczos max {torch.stack(eigen_list).max().item():.4f} density {density.sum().item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

hv_ref = [h.detach() for h in hvp(top_vec)]
del gradsH, loss
names = [n for n, p in model.named_parameters() if p.requires_grad]
buffers = dict(model.named_buffers())
primal = {n: p.detach() for n, p in zip(names, params)}
tangent = {n: t for n, t in zip(names, top_vec)}


def loss_fn(p):
    return F.cross_entropy(functional_call(model, (p, buffers), (xh,)), yh)


_, hv_func = jvp(grad(loss_fn), (primal,), (tangent,))
diff = sum((hv_func[n] - r).pow(2).sum() for n, r in zip(names, hv_ref)).sqrt()
if device == "cuda":
    print(
        f"jvp-over-grad hvp diff {diff.item():.3e} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
