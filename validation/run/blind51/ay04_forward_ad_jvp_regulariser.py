"""A Jacobian-vector-product regulariser by forward-mode AD: `torch.func.jvp` of an MLP at each
batch along a random tangent, the squared JVP norm added to the loss and the whole backpropagated
(forward-mode dual tensors under reverse mode); width 2048, 6 layers, batch 1024, fp32, AdamW,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, jvp

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5104)
D, L, B = (32, 2, 8) if SMALL else (2048, 6, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers = []
for _ in range(L):
    layers += [nn.Linear(D, D), nn.SiLU()]
model = nn.Sequential(*layers, nn.Linear(D, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
params = dict(model.named_parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    v = torch.randn_like(x)
    out, tangent = jvp(lambda inp: functional_call(model, params, (inp,)), (x,), (v,))
    loss = F.cross_entropy(out, y) + 0.01 * tangent.pow(2).sum(-1).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, v, out, tangent, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
