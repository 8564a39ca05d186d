"""timm DaViT-Tiny (dual spatial/channel attention windows) trained under bf16 autocast with
fp32 weights, AdamW with a timm cosine scheduler stepped per update, gradient clipping at 5.0,
batch 48 at 224x224, 3 steps, then a batch-128 evaluation under torch.inference_mode with top-5
accuracy; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.scheduler import CosineLRScheduler

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9102)
B, BE, R, C = (2, 4, 64, 10) if SMALL else (48, 128, 224, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("davit_tiny", num_classes=C, drop_path_rate=0.1).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
sched = CosineLRScheduler(optimizer, t_initial=100, warmup_t=2, warmup_lr_init=1e-6, t_in_epochs=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sched.step_update(step + 1)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(BE, 3, R, R, device=device)
    y = torch.randint(0, C, (BE,), device=device)
    top5 = model(x).topk(5, dim=-1).indices
    acc = (top5 == y[:, None]).any(-1).float().mean()
del x, y, top5
if device == "cuda":
    print(
        f"eval top5 {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
