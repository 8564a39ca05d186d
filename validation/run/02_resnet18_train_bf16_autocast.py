"""torchvision resnet18: training steps under torch.autocast(bfloat16), fp32 master weights, SGD."""

import os

import torch
import torch.nn as nn
import torchvision

B, IMG = (2, 64) if os.environ.get("SMOKE") else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = torchvision.models.resnet18(num_classes=100).to(device)
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
if device == "cuda":
    print(f"model allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    labels = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(images)
        loss = criterion(logits, labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
print("done", loss.item())
