"""A masked autoencoder for tabular rows: 40% of the cells hidden by a boolean mask drawn on the CPU (known
values), the visible cells zeroed, a residual MLP over 512 features, and the loss taken on the hidden cells
only through boolean-mask indexing (pred[mask], x[mask]); fp32 weights under bf16 autocast, AdamW, batch
8192, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
FEATURES, WIDTH, BATCH = (16, 32, 8) if SMALL else (512, 2048, 8192)
torch.manual_seed(1402)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.ff = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))

    def forward(self, x):
        return x + self.ff(self.norm(x))


model = nn.Sequential(nn.Linear(FEATURES, WIDTH), *[Block() for _ in range(4)], nn.LayerNorm(WIDTH),
                      nn.Linear(WIDTH, FEATURES)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
g = torch.Generator().manual_seed(2)
for step in range(3):
    x = torch.randn(BATCH, FEATURES, device=device)
    mask = (torch.rand(BATCH, FEATURES, generator=g) < 0.4).to(device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = model(x.masked_fill(mask, 0.0))
    loss = F.mse_loss(pred.float()[mask], x[mask])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
