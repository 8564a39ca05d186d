"""timm resnet50d (deep stem, average-pool downsampling) in channels_last, fp32 weights under bf16 autocast,
SGD momentum with weight decay, clip_grad_norm_(foreach=True), batch 96 at 224 px, 3 steps."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1702)
BATCH, RES = (2, 64) if SMALL else (96, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = (
    timm.create_model("resnet50d", num_classes=1000).to(device).to(memory_format=torch.channels_last).train()
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
