"""SimCLR contrastive pre-training: two augmented views (flip and crop by slicing and
interpolate) of a batch through a torchvision ResNet-18 trunk and a projection MLP, the NT-Xent
loss over the 512x512 similarity matrix with the diagonal masked, fp16 autocast with a GradScaler,
SGD, batch 256 at 96x96, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet18

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4205)
B, H = (4, 32) if SMALL else (256, 96)
device = "cuda" if torch.cuda.is_available() else "cpu"
trunk = resnet18(weights=None)
trunk.fc = nn.Identity()
model = nn.Sequential(trunk, nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 128)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")


def view(x):
    c = H * 3 // 4
    x = x[:, :, :c, H - c :]
    return F.interpolate(x, size=(H, H), mode="bilinear", align_corners=False).flip(-1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, H, H, device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        z = F.normalize(model(torch.cat([x, view(x)], dim=0)).float(), dim=1)
        sim = z @ z.t() / 0.5
        sim = sim.masked_fill(torch.eye(2 * B, dtype=torch.bool, device=device), float("-inf"))
        target = torch.cat([torch.arange(B, 2 * B), torch.arange(0, B)]).to(device)
        loss = F.cross_entropy(sim, target)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del x, z, sim, target, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
