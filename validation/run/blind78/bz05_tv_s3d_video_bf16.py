"""torchvision S3D (separable 3-D convolutions: a spatial 1xkxk then a temporal kx1x1 per block)
for video classification under bf16 autocast, fp32 weights, SGD with momentum, batch 8 of 16 frames
at 224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7805)
B, T, S = (1, 16, 224) if SMALL else (8, 16, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.video.s3d(num_classes=400).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, T, S, S, device=device)
    y = torch.randint(0, 400, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
