"""timm CaiT-XXS24 (LayerScale, talking-heads attention, two class-attention layers) trained under
bf16 autocast with stochastic depth 0.1, label smoothing 0.1, AdamW and a cosine schedule, batch 64 at
224x224, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8202)
B, C = (2, 10) if SMALL else (64, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    model = timm.create_model("cait_xxs24_224", num_classes=C, img_size=64, depth=2, drop_path_rate=0.1)
    R = 64
else:
    model = timm.create_model("cait_xxs24_224", num_classes=C, drop_path_rate=0.1)
    R = 224
model = model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
