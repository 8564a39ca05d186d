"""torchvision's r3d_18 video ResNet (Conv3d, BatchNorm3d) trained in fp32 from scratch on clips of
8 frames at 112x112, batch 8, SGD with momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.video import r3d_18

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2601)
B, T, R = (2, 4, 32) if SMALL else (8, 8, 112)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = r3d_18(num_classes=50).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clips = torch.randn(B, 3, T, R, R, device=device)
    labels = torch.randint(0, 50, (B,), device=device)
    loss = F.cross_entropy(model(clips), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clips, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
