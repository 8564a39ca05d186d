"""timm efficientnet_b0 (pretrained=False) training, channels_last, bf16 autocast, SGD nesterov."""

import os

import timm
import torch
import torch.nn.functional as F

B, IMG = (2, 64) if os.environ.get("SMOKE") else (48, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = timm.create_model("efficientnet_b0", pretrained=False, num_classes=200)
model = model.to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 200, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
