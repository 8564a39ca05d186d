"""timm vit_base_patch16_224 with stochastic depth (drop_path_rate 0.1) trained from scratch under
bf16 autocast with timm's LAMB optimizer (create_optimizer_v2("lamb"), weight decay 0.05), mixup-
style soft targets (soft-label cross-entropy), gradient clipping, batch 64 at 224x224, 2 steps; 3
phases."""

import os

import timm
import torch
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3303)
B, R = (2, 32) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    model = timm.create_model("vit_tiny_patch16_224", img_size=R, drop_path_rate=0.1, num_classes=1000)
else:
    model = timm.create_model("vit_base_patch16_224", drop_path_rate=0.1, num_classes=1000)
model = model.to(device)
optimizer = create_optimizer_v2(model, "lamb", lr=5e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.softmax(torch.randn(B, 1000, device=device), dim=-1)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = torch.sum(-y * torch.log_softmax(model(x), dim=-1), dim=-1).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
