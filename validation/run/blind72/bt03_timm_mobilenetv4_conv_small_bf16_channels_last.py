"""timm's MobileNetV4-Conv-Small (mobilenetv4_conv_small: universal inverted bottlenecks) in
channels-last memory format under bf16 autocast, 256x256 images at batch 256, AdamW, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7203)
B, S = (2, 64) if SMALL else (256, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("mobilenetv4_conv_small", num_classes=1000)
model = model.to(device=device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device).contiguous(memory_format=torch.channels_last)
    targets = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
