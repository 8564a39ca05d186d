"""GaLore-style training written by hand: a 6-layer MLP of 4096-wide fp32 linears whose gradients are
projected on the top 256 left singular vectors of the first step's gradient (`torch.linalg.svd`,
re-computed every 2 steps), Adam moments kept in the projected space, the update projected back;
3 steps; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4702)
D, RANK, B = (64, 8, 16) if SMALL else (4096, 256, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(D, D), nn.GELU())]).to(device)
state = {}
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, D, device=device)
    loss = model(x).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            g = p.grad
            if g.dim() == 1:
                p.add_(g, alpha=-1e-3)
                continue
            s = state.setdefault(p, {})
            if step % 2 == 0:
                u, _, _ = torch.linalg.svd(g, full_matrices=False)
                s["proj"] = u[:, :RANK].contiguous()
                del u
            low = s["proj"].t() @ g
            if "m" not in s:
                s["m"] = torch.zeros_like(low)
                s["v"] = torch.zeros_like(low)
            s["m"].mul_(0.9).add_(low, alpha=0.1)
            s["v"].mul_(0.999).addcmul_(low, low, value=0.001)
            update = s["m"] / (s["v"].sqrt() + 1e-8)
            p.add_(s["proj"] @ update, alpha=-1e-3)
            del low, update
    model.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
