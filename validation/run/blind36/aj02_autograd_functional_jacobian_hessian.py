"""Second-order quantities as torch.autograd.functional computes them: for an MLP (3 x 2048 wide,
tanh) on a batch of 256 inputs of 512 features, the Jacobian of the outputs with respect to the
inputs with vectorize=True (vmap over the backward), then the Hessian of a scalar energy with
respect to a 1024-feature input with vectorize=True; fp32, eval mode; 3 phases."""

import os

import torch
import torch.nn as nn
from torch.autograd.functional import hessian, jacobian

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3602)
B, IN, W, OUT, E = (4, 8, 16, 3, 8) if SMALL else (256, 512, 2048, 16, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
net = nn.Sequential(nn.Linear(IN, W), nn.Tanh(), nn.Linear(W, W), nn.Tanh(), nn.Linear(W, OUT)).to(device)
energy = nn.Sequential(nn.Linear(E, W), nn.Tanh(), nn.Linear(W, 1)).to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
x = torch.randn(B, IN, device=device)
jac = jacobian(lambda inp: net(inp).sum(0), x, vectorize=True)
if device == "cuda":
    print(f"jacobian peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del jac
z = torch.randn(E, device=device)
hess = hessian(lambda inp: energy(inp).sum(), z, vectorize=True)
if device == "cuda":
    print(f"hessian peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
