"""torchvision's RegNetY-1.6GF (grouped 3x3 convolutions of group width 24, squeeze-and-excitation)
trained from scratch: batch 96 of 224x224 in channels_last, fp16 autocast with GradScaler, SGD with
Nesterov momentum and weight decay, label smoothing 0.1, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5406)
B, HW = (2, 64) if SMALL else (96, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.regnet_y_1_6gf().to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.4, momentum=0.9, nesterov=True, weight_decay=5e-5)
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
