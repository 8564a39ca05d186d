"""torchvision ResNeXt-50 32x4d (grouped 3x3 convolutions) in channels-last memory format under bf16
autocast, fp32 weights, Adam with amsgrad (foreach=False: one kernel per parameter), batch 64 at
224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7703)
B, S = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.resnext50_32x4d(num_classes=1000).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True, foreach=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
