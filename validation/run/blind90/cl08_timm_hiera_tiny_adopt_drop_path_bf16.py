"""timm's Hiera-Tiny (hierarchical mask-unit attention, 224 x 224) built without pretrained
weights, drop-path 0.1, trained under bf16 autocast with timm's ADOPT optimizer
(create_optimizer_v2, weight decay 0.05 off for norms and biases) and label-smoothed cross-entropy
on 64 images for 3 steps, then an eval batch of 128 under inference_mode; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9008)
B, EB = (2, 2) if SMALL else (64, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("hiera_tiny_224", pretrained=False, num_classes=1000, drop_path_rate=0.1).to(device)
opt = create_optimizer_v2(model, "adopt", lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    logits = model(torch.randn(EB, 3, 224, 224, device=device))
if device == "cuda":
    print(
        f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
