"""timm GhostNetV2-1.0 (ghost modules with DFC attention) trained under bf16 autocast with timm's
`Mixup` (mixup and cutmix switched per batch, label smoothing 0.1) into `SoftTargetCrossEntropy`,
SGD with Nesterov momentum, batch 48 at 224x224, 3 steps, then eval under `torch.inference_mode`;
5 phases."""

import os

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8602)
np.random.seed(8602)
B, R, C = (4, 64, 10) if SMALL else (48, 224, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("ghostnetv2_100", num_classes=C).to(device)
mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1, num_classes=C)
criterion = SoftTargetCrossEntropy()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=4e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    x, target = mixup(x, y)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = criterion(model(x), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, target
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    pred = model(torch.randn(2 * B, 3, R, R, device=device)).argmax(-1)
del pred
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
