"""torchvision's r3d_18 (3-D convolutions, BatchNorm3d) trained on clips of 16 frames at 112x112, batch 4,
fp32 weights under bf16 autocast, SGD with momentum and weight decay, 3 steps."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.video import r3d_18

SMALL = bool(os.environ.get("SMOKE"))
BATCH, FRAMES, SIZE = (1, 4, 32) if SMALL else (4, 16, 112)
torch.manual_seed(1301)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = r3d_18(num_classes=10).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    clips = torch.randn(BATCH, 3, FRAMES, SIZE, SIZE, device=device)
    labels = torch.randint(0, 10, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(clips), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
