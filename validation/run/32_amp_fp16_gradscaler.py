"""Mixed precision the classic way: torch.autocast(float16) + torch.amp.GradScaler (scale, unscale_ for
clipping, step, update) on a small transformer-ish MLP classifier."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, D = (8, 32) if os.environ.get("SMOKE") else (4096, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = nn.Sequential(
    nn.Linear(D, 4 * D), nn.GELU(), nn.LayerNorm(4 * D), nn.Linear(4 * D, D), nn.GELU(), nn.Linear(D, 1000)
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device)
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=amp_dtype):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} scale {scaler.get_scale()} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
