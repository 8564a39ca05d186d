"""torchvision's Swin3D-T (video Swin: 3-D shifted windows) trained under bf16 autocast on clips of 16
frames of 224x224 at batch 4, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7102)
B, T, S = (1, 4, 64) if SMALL else (4, 16, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.video.swin3d_t(num_classes=400).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clips = torch.randn(B, 3, T, S, S, device=device)
    targets = torch.randint(0, 400, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(clips), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clips, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
