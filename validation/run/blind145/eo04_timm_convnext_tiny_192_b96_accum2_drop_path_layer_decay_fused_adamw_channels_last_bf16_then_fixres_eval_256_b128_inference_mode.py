"""ConvNeXt-T as the ConvNeXt paper's fine-tuning recipe runs it under timm, at a lower training
resolution than its test one (FixRes: train at 192, test at 256): timm's convnext_tiny from its
constructor with drop_path_rate 0.1, channels-last, bf16 autocast, AdamW (fused, betas 0.9/0.999,
weight decay 0.05) with layer-wise lr decay 0.8 over timm's parameter groups
(create_optimizer_v2(layer_decay=...), no decay on norms and biases), label-smoothed cross-entropy,
2 micro-batches of 96 accumulated per step (loss / 2), the gradients clipped to norm 5.0; 3 steps;
then evaluation at 256 x 256 in batches of 128 under inference_mode and bf16 autocast, the top-5
accuracy by topk; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14504)
B, RES, EB, ERES, NCLS = (4, 64, 4, 96, 10) if SMALL else (96, 192, 128, 256, 1000)
STEPS, ACCUM = 3, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last

model = timm.create_model("convnext_tiny", pretrained=False, num_classes=NCLS, drop_path_rate=0.1)
model = model.to(device, memory_format=CL)
opt = create_optimizer_v2(
    model,
    opt="adamw",
    lr=5e-5 * B * ACCUM / 512,
    weight_decay=0.05,
    layer_decay=0.8,
    fused=device == "cuda",
)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    print(f"param groups {len(opt.param_groups)}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    opt.zero_grad(set_to_none=True)
    for _micro in range(ACCUM):
        x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=CL)
        y = torch.randint(0, NCLS, (B,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = criterion(model(x), y) / ACCUM
        loss.backward()
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, x, y, gnorm
model.eval()
top5 = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device).contiguous(memory_format=CL)
        y = torch.randint(0, NCLS, (EB,), device=device)
        top5 += (model(x).topk(5, dim=-1).indices == y[:, None]).any(-1).sum().item()
if device == "cuda":
    print(
        f"eval top5 {top5 / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
