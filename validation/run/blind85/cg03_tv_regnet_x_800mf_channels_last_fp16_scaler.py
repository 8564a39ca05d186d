"""torchvision regnet_x_800mf (grouped bottlenecks, no SE) trained channels-last under fp16 autocast
with a GradScaler, batch 96 at 224 x 224, label smoothing 0.1, SGD with momentum and nesterov, a
cosine schedule, 4 steps, then an eval pass of 128 images under inference_mode; 6 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8503)
B, R, EB = (4, 64, 4) if SMALL else (96, 224, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.regnet_x_800mf(num_classes=1000).to(device).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with (
    torch.inference_mode(),
    torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"),
):
    x = torch.randn(EB, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    top = model(x).float().softmax(-1).topk(5).indices
if device == "cuda":
    print(
        f"eval {tuple(top.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
