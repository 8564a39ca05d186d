"""A pre-LN transformer encoder (768 wide, 8 layers, nn.TransformerEncoderLayer, batch_first) in fp32
under fp16 autocast with torch.amp.GradScaler(init_scale=1.0) (no step is skipped), unscale_ then
clip_grad_norm_, Adam, batch 24 x 512, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2502)
B, T, W, H, DEPTH = (2, 8, 32, 4, 1) if SMALL else (24, 512, 768, 12, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"
layer = nn.TransformerEncoderLayer(W, H, 4 * W, dropout=0.0, batch_first=True, norm_first=True)
model = nn.Sequential(nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False), nn.Linear(W, 2)).to(
    device
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, init_scale=1.0, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, T, W, device=device)
    y = torch.randint(0, 2, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x)[:, 0], y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
