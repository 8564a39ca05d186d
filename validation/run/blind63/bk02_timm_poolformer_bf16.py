"""timm's PoolFormer-S12 (poolformer_s12: pooling token mixers, GroupNorm, layer scale) trained under
bf16 autocast on 224x224 images at batch 96 with label smoothing, AdamW and a cosine schedule, 2
steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6302)
B, S = (2, 64) if SMALL else (96, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("poolformer_s12", num_classes=1000).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), targets, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
