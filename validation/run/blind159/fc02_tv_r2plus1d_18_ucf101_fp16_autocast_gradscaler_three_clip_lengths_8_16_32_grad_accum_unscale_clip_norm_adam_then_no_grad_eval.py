"""torchvision's R(2+1)D-18 from scratch (weights=None, 101 classes as for UCF-101) trained with
fp16 autocast and torch.amp.GradScaler: Adam (lr 1e-4), 2 micro-batches accumulated per step
(the loss divided by 2), scaler.unscale_ then clip_grad_norm_(1.0) before scaler.step, and a
curriculum over clip lengths at 112 x 112 with the batch shrinking as the clips grow: 8 frames at
batch 16, 16 frames at batch 8, 32 frames at batch 4, one optimizer step at each length (each its
own phase); then evaluation under no_grad and fp16 autocast at 32 frames, 3 batches of 8 clips
with top-1 accuracy; 5 phases."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15902)
if SMALL:
    SIZE, SCHEDULE, EVAL_T, EVAL_B, EVAL_BATCHES = 32, [(4, 2), (8, 1)], 8, 2, 2
else:
    SIZE, SCHEDULE, EVAL_T, EVAL_B, EVAL_BATCHES = 112, [(8, 16), (16, 8), (32, 4)], 32, 8, 3
NUM_CLASSES = 101
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.video.r2plus1d_18(weights=None, num_classes=NUM_CLASSES).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
criterion = nn.CrossEntropyLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for frames, batch in SCHEDULE:
    optimizer.zero_grad(set_to_none=True)
    for _micro in range(ACCUM):
        clips = torch.randn(batch, 3, frames, SIZE, SIZE, device=device)
        labels = torch.randint(0, NUM_CLASSES, (batch,), device=device)
        with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
            logits = model(clips)
            loss = criterion(logits, labels) / ACCUM
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
    if device == "cuda":
        print(
            f"T={frames} B={batch} loss {loss.item() * ACCUM:.3f} grad norm {grad_norm.item():.3f}"
            f" scale {scaler.get_scale()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del clips, labels, logits, loss, grad_norm
model.eval()
correct = total = 0
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(EVAL_BATCHES):
        clips = torch.randn(EVAL_B, 3, EVAL_T, SIZE, SIZE, device=device)
        labels = torch.randint(0, NUM_CLASSES, (EVAL_B,), device=device)
        pred = model(clips).argmax(dim=1)
        correct += (pred == labels).sum().item()
        total += labels.numel()
if device == "cuda":
    print(
        f"eval top1 {correct / total:.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
