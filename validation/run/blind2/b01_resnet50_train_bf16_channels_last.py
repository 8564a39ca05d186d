"""torchvision resnet50 training at batch 48: channels_last, bf16 autocast, SGD nesterov,
zero_grad(set_to_none=False)."""

import os

import torch
import torch.nn as nn
import torchvision

B, IMG = (2, 64) if os.environ.get("SMOKE") else (48, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(42)

model = torchvision.models.resnet50(num_classes=1000).to(device, memory_format=torch.channels_last)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
if device == "cuda":
    print(f"model allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    targets = torch.randint(0, 1000, (B,), device=device)
    optimizer.zero_grad(set_to_none=False)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        output = model(images)
        loss = criterion(output, targets)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
print(f"final loss {loss.item():.4f}")
