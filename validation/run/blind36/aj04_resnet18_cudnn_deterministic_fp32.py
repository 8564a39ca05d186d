"""Reproducible training as the PyTorch reproducibility notes ask for it: torch.manual_seed,
torch.backends.cudnn.deterministic = True and benchmark = False, torch.use_deterministic_algorithms
(warn_only=True), CUBLAS_WORKSPACE_CONFIG=:4096:8, then torchvision resnet18 at 224 px, batch 64,
fp32, SGD with momentum and weight decay, 3 steps; 4 phases."""

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn.functional as F
import torchvision

B, IMG = (2, 64) if os.environ.get("SMOKE") else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(3604)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True, warn_only=True)
model = torchvision.models.resnet18(num_classes=1000).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    labels = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(images), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    del images, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
