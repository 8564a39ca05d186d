"""timm's Swin-T with its experimental fused attention switched on (timm.layers.set_fused_attn(True,
experimental=True)): each window attention passes its relative position bias (gathered from the
learnable table, so it requires grad in training) plus the shifted-window -100 mask as SDPA's
attn_mask of shape (B * windows, 3..24 heads, 49, 49), heads of 32; batch 64 at 224 x 224 under
bf16 autocast, AdamW (foreach) with no decay on norms, biases and the bias tables, drop path 0.2,
label smoothing 0.1; 3 steps; then a no_grad evaluation at batch 128 where the bias no longer
requires grad; 4 phases."""

import os

import timm
import timm.layers
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14605)
B, EB, NCLS = (2, 2, 10) if SMALL else (64, 128, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"

timm.layers.set_fused_attn(True, experimental=True)
model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, num_classes=NCLS, drop_path_rate=0.2)
model = model.to(device)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim <= 1 or "relative_position_bias_table" in name else decay).append(p)
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, foreach=True
)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.randn(B, 3, 224, 224, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = crit(model(x), y)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(EB, 3, 224, 224, device=device)
    top1 = model(x).argmax(-1)
if device == "cuda":
    print(f"eval {top1.shape[0]} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
