"""torchvision's Swin-V2-T (cosine attention with a log-spaced continuous position bias MLP,
shifted windows, post-norm) trained from scratch under bf16 autocast, AdamW (foreach), batch 32 at
256x256, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import swin_v2_t

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4501)
B, HW = (2, 64) if SMALL else (32, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = swin_v2_t(weights=None, num_classes=200).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    y = torch.randint(0, 200, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
