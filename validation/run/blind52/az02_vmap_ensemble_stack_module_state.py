"""An ensemble of 32 MLPs trained as one by `torch.func.stack_module_state` and
`vmap(functional_call)`: each member 4 layers of width 1024 over its own batch of 512, the stacked
parameters optimised by Adam (foreach) as leaf tensors, fp32, 2 steps; 3 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5202)
M, D, B = (4, 32, 8) if SMALL else (32, 1024, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"


def member():
    return nn.Sequential(
        nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, 100)
    ).to(device)


members = [member() for _ in range(M)]
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")
del members
optimizer = torch.optim.Adam(params.values(), lr=1e-3)


def run(p, b, x):
    return functional_call(base, (p, b), (x,))


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(M, B, D, device=device)
    y = torch.randint(0, 100, (M, B), device=device)
    logits = vmap(run)(params, buffers, x)
    loss = F.cross_entropy(logits.reshape(M * B, 100), y.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
