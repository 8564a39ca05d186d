"""torchvision VGG-11 (no batch norm, dropout classifier) trained under fp16 autocast with GradScaler
(unscale, then `clip_grad_value_`), SGD with momentum and a triangular2 CyclicLR stepped per batch,
batch 32 at 224x224, 3 steps, then eval of batch 64 under `torch.no_grad`; 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import vgg11

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8702)
B, R, C = (2, 32, 10) if SMALL else (32, 224, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = vgg11(num_classes=C).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CyclicLR(
    optimizer, base_lr=1e-3, max_lr=0.05, step_size_up=2, mode="triangular2"
)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    pred = model(torch.randn(2 * B, 3, R, R, device=device)).argmax(1)
del pred
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
