"""torchvision DenseNet-121 with `memory_efficient=True` (each dense layer's concatenation and
bottleneck recomputed in backward by torch.utils.checkpoint), fp32, SGD with momentum and weight
decay, batch 48 at 224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7402)
B, S = (2, 64) if SMALL else (48, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.densenet121(num_classes=1000, memory_efficient=True).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
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
