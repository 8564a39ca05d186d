"""torchvision's resnet18 with every convolution pruned by `torch.nn.utils.prune.l1_unstructured`
(50%: weight_orig parameters, weight_mask buffers, the masked weight rebuilt by a forward pre-hook),
trained 2 steps in fp32 at batch 64 and 224 pixels with SGD momentum, then the pruning made permanent
with `prune.remove`; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.nn.utils import prune

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4703)
B, IMG = (2, 32) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.resnet18(num_classes=1000).to(device)
convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
for conv in convs:
    prune.l1_unstructured(conv, name="weight", amount=0.5)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
for conv in convs:
    prune.remove(conv, "weight")
if device == "cuda":
    print(f"removed {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
