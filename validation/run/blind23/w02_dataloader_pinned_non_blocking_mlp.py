"""An MLP regressor (4096 wide, 6 layers, LayerNorm, SiLU) in fp32 fed by a DataLoader over a
TensorDataset on the host with pin_memory=True, each batch copied with .to("cuda",
non_blocking=True); AdamW, batch 512, 6 batches (one epoch); 7 phases."""

import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2302)
N, D, W, DEPTH, B = (64, 16, 32, 2, 8) if SMALL else (3072, 1024, 4096, 6, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
data = TensorDataset(torch.randn(N, D), torch.randn(N, 1))
loader = DataLoader(data, batch_size=B, shuffle=True, pin_memory=device == "cuda")
layers = [nn.Linear(D, W), nn.SiLU()]
for _ in range(DEPTH - 1):
    layers += [nn.LayerNorm(W), nn.Linear(W, W), nn.SiLU()]
model = nn.Sequential(*layers, nn.Linear(W, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for i, (x, y) in enumerate(loader):
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"batch {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
