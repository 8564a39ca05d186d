"""Regression MLP (LayerNorm, SiLU, dropout) with torch.optim.Adam (amsgrad) and a StepLR schedule."""

import os

import torch
import torch.nn as nn

B, D, H = (8, 16, 32) if os.environ.get("SMOKE") else (8192, 512, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = nn.Sequential(
    nn.Linear(D, H),
    nn.LayerNorm(H),
    nn.SiLU(),
    nn.Dropout(0.1),
    nn.Linear(H, H),
    nn.LayerNorm(H),
    nn.SiLU(),
    nn.Linear(H, 1),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
loss_fn = nn.MSELoss()
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, D, device=device)
    target = x.sum(dim=1, keepdim=True)
    pred = model(x)
    loss = loss_fn(pred, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
