"""torchvision MobileNetV2 (inverted residuals, depthwise 3x3 convolutions, ReLU6) in channels-last
memory format under bf16 autocast, fp32 weights, RMSprop, batch 192 at 224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8002)
B, S = (2, 64) if SMALL else (192, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.mobilenet_v2(num_classes=1000).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.RMSprop(model.parameters(), lr=0.045, alpha=0.9, momentum=0.9, weight_decay=4e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
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
