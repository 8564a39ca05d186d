"""torchvision maxvit_t (MBConv with squeeze-excitation, block and grid attention with relative position
bias, stochastic depth), fp32 weights under bf16 autocast, AdamW (foreach), label smoothing, batch 32 at
224, 3 steps."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import maxvit_t

SMALL = bool(os.environ.get("SMOKE"))
BATCH = 2 if SMALL else 32
torch.manual_seed(1102)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = maxvit_t(weights=None, num_classes=10 if SMALL else 1000).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(BATCH, 3, 224, 224, device=device)
    labels = torch.randint(0, 10 if SMALL else 1000, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
