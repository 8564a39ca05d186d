"""PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set at the top (before importing torch), then an
MLP trained on batches of varying size (the case expandable segments are for)."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch.nn as nn
import torch.nn.functional as F

D, H, BATCHES = (
    (16, 32, (4, 8, 6)) if os.environ.get("SMOKE") else (2048, 8192, (512, 4096, 1536, 8192, 3072))
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = nn.Sequential(
    nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 100)
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step, bs in enumerate(BATCHES):
    x = torch.randn(bs, D, device=device)
    y = torch.randint(0, 100, (bs,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} batch {bs} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
