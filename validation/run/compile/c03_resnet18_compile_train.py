"""torch.compile(model) of torchvision's resnet18 (fp32, batch norm in training), SGD with momentum,
batch 64 of 224x224 images, 3 steps; 4 phases (the model, then each step)."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3103)
B, S = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.resnet18(num_classes=1000).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model = torch.compile(model)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, S, S, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
