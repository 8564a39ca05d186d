"""Video classification: torchvision's R(2+1)D-18 (factorised 3D convolutions with batch norm)
trained from scratch under fp16 autocast with a GradScaler, SGD with momentum and nesterov,
batch 8 clips of 16 frames at 112x112, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.video import r2plus1d_18

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4305)
B, T, HW = (2, 4, 32) if SMALL else (8, 16, 112)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = r2plus1d_18(weights=None, num_classes=400).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, T, HW, HW, device=device)
    y = torch.randint(0, 400, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
