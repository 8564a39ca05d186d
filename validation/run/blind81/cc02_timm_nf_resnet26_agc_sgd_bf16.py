"""timm nf_resnet26 (normalizer-free: scaled weight-standardized convolutions, no batch norm) trained
under bf16 autocast with adaptive gradient clipping (`timm.utils.adaptive_clip_grad`, clip 0.01, the
head left out), SGD with Nesterov momentum, batch 32 at 224x224, 1,000 classes, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.utils import adaptive_clip_grad

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8102)
B, R = (2, 64) if SMALL else (32, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("nf_resnet26", num_classes=1000).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=2e-5)
clipped = [p for n, p in model.named_parameters() if not n.startswith("head")]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    adaptive_clip_grad(clipped, clip_factor=0.01)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
