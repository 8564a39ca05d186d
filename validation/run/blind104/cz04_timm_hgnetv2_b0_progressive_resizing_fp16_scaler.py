"""timm HGNetV2-B0 (PP-HGNet v2: light ConvBNAct stages with learnable affine blocks and ESE
attention) trained from scratch on 1,000 classes with progressive resizing (fast.ai /
EfficientNetV2 style: the training resolution grows 128 -> 160 -> 192 -> 224 over 4 steps while
the batch stays 96), fp16 autocast with GradScaler (initial scale 2^10), SGD with momentum and a
OneCycleLR schedule, cross entropy with label smoothing 0.1; then eval at 256 x 256 (train-test
resolution discrepancy) on 128 images under inference_mode; 6 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10404)
B, BE, NCLS = (4, 4, 10) if SMALL else (96, 128, 1000)
SIZES, R_EVAL = ([32, 40, 48, 64], 72) if SMALL else ([128, 160, 192, 224], 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("hgnetv2_b0", num_classes=NCLS).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=4e-5)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.4, total_steps=len(SIZES))
scaler = torch.amp.GradScaler(device, init_scale=2.0**10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step, r in enumerate(SIZES):
    x = torch.randn(B, 3, r, r, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} res {r} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    xe = torch.randn(BE, 3, R_EVAL, R_EVAL, device=device)
    pred = model(xe).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
