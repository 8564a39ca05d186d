"""torchvision resnet18: fp32 training steps with SGD (momentum, weight decay)."""

import os

import torch
import torch.nn.functional as F
import torchvision

B, IMG = (2, 64) if os.environ.get("SMOKE") else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = torchvision.models.resnet18(num_classes=1000).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
images = torch.randn(B, 3, IMG, IMG, device=device)
labels = torch.randint(0, 1000, (B,), device=device)
if device == "cuda":
    print(f"model + batch allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    out = model(images)
    loss = F.cross_entropy(out, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
print(f"loss {loss.item():.4f}")
