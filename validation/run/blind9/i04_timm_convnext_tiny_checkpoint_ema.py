"""timm `convnext_tiny` (pretrained=False, drop_path 0.1) with `set_grad_checkpointing(True)`,
channels_last, bf16 autocast, `AdamW(fused=True)` and timm's `ModelEmaV3` (decay 0.999) updated after
each step; batch 64 x 224, 3 steps; then an eval pass of the EMA model under `torch.no_grad`."""

import os

import timm
import torch
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
BATCH, RES = (2, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(904)
model = timm.create_model("convnext_tiny", pretrained=False, drop_path_rate=0.1).to(device, memory_format=torch.channels_last)
model.set_grad_checkpointing(True)
ema = ModelEmaV3(model, decay=0.999)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update(model, step=step)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    preds = ema.module.eval()(torch.randn(BATCH, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last))
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
