"""Empirical neural tangent kernel with torch.func: a small CNN (3 convs, 32-64-64 channels, ReLU,
global average pooling, 10 logits) in fp32 read as a function of its parameters through
functional_call; per-example Jacobians of the logits with respect to every parameter by
vmap(jacrev(...)) over chunks of 64 CIFAR-sized images made on the GPU, contracted into the
(N1, N2, 10, 10) kernel by einsum and its trace; 256 x 256 examples in 4 x 4 chunk pairs, then
the kernel's eigenvalues (linalg.eigvalsh of the traced 256 x 256 kernel) and a kernel-regression
fit solved by linalg.solve; 3 phases."""

import os

import torch
import torch.nn as nn
from torch.func import functional_call, jacrev, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10102)
N, CHUNK, R = (16, 8, 8) if SMALL else (256, 64, 32)
device = "cuda" if torch.cuda.is_available() else "cpu"


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(64, 64, 3, stride=2, padding=1)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        x = torch.relu(self.c3(x))
        return self.fc(x.mean((2, 3)))


model = SmallCNN().to(device)
params = {k: v.detach() for k, v in model.named_parameters()}


def f(p, x):
    return functional_call(model, p, (x[None],))[0]


jac_fn = vmap(jacrev(f), (None, 0))
x1 = torch.randn(N, 3, R, R, device=device)
x2 = torch.randn(N, 3, R, R, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
kernel = torch.zeros(N, N, 10, 10, device=device)
jac2 = [jac_fn(params, x2[j : j + CHUNK]) for j in range(0, N, CHUNK)]
for i in range(0, N, CHUNK):
    j1 = jac_fn(params, x1[i : i + CHUNK])
    for jj, j in enumerate(range(0, N, CHUNK)):
        block = sum(torch.einsum("naf,mbf->nmab", j1[k].flatten(2), jac2[jj][k].flatten(2)) for k in params)
        kernel[i : i + CHUNK, j : j + CHUNK] = block
    del j1, block
if device == "cuda":
    print(
        f"ntk trace {kernel.diagonal(dim1=2, dim2=3).sum().item():.3e}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del jac2
jac = [jac_fn(params, x1[i : i + CHUNK]) for i in range(0, N, CHUNK)]
k11 = torch.zeros(N, N, device=device)
for a in range(len(jac)):
    for b in range(len(jac)):
        k11[a * CHUNK : (a + 1) * CHUNK, b * CHUNK : (b + 1) * CHUNK] = sum(
            torch.einsum("naf,maf->nm", jac[a][k].flatten(2), jac[b][k].flatten(2)) for k in params
        )
del jac
if device == "cuda":
    print(f"k11 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
eig = torch.linalg.eigvalsh(k11)
targets = torch.nn.functional.one_hot(torch.randint(0, 10, (N,), device=device), 10).float()
alpha = torch.linalg.solve(k11 + 1e-3 * eig.max() * torch.eye(N, device=device), targets)
pred = kernel.diagonal(dim1=2, dim2=3).sum(-1).T @ alpha
if device == "cuda":
    print(
        f"fit cond {(eig.max() / eig.min().clamp_min(1e-12)).item():.3e} {tuple(pred.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
