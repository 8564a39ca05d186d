"""A 4-layer MLP regressor (2048 wide, SiLU) trained full-batch with torch.optim.LBFGS (history 20,
strong Wolfe line search) on 16,384 samples of 512 features, fp32, 3 outer steps of max_iter=5."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1601)
N, D, W = (64, 16, 32) if SMALL else (16384, 512, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Linear(D, W), nn.SiLU(), nn.Linear(W, W), nn.SiLU(), nn.Linear(W, W), nn.SiLU(), nn.Linear(W, 1)
).to(device)
optimizer = torch.optim.LBFGS(
    model.parameters(), lr=1.0, max_iter=5, history_size=20, line_search_fn="strong_wolfe"
)
x = torch.randn(N, D, device=device)
y = torch.randn(N, 1, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def closure():
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(3):
    optimizer.step(closure)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
