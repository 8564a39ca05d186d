"""torchvision's S3D (separable 3-D Inception, weights=None, 400 classes) trained under bf16
autocast with SGD (momentum 0.9, weight decay 1e-5) and a linear-warmup + cosine LambdaLR, cross
entropy with label smoothing 0.1: 2 steps at batch 6 x 16 frames x 224 x 224, then 1 step at
batch 3 x 32 frames (each step its own phase); then evaluation in fp32 (no autocast) under no_grad
on 2 clips of 64 frames at 224 x 224; then a fully convolutional test at 256 x 256 (S3D's
AvgPool3d(2, 7, 7) with stride 1 and its mean over the remaining positions take the larger clips)
under inference_mode and bf16 autocast at batch 4 x 32 frames; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15903)
if SMALL:
    B, T, B32, T32, EVAL_B, EVAL_T, FC_B, FC_T, FC_S = 1, 16, 1, 16, 1, 16, 1, 16, 224
else:
    B, T, B32, T32, EVAL_B, EVAL_T, FC_B, FC_T, FC_S = 6, 16, 3, 32, 2, 64, 4, 32, 256
S = 224
NUM_CLASSES = 400
WARMUP, TOTAL = 5, 100
device = "cuda" if torch.cuda.is_available() else "cpu"


def warmup_cosine(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, TOTAL - WARMUP)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


model = torchvision.models.video.s3d(weights=None, num_classes=NUM_CLASSES).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(batch, frames):
    clips = torch.randn(batch, 3, frames, S, S, device=device)
    labels = torch.randint(0, NUM_CLASSES, (batch,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(clips)
        loss = criterion(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


model.train()
for step, (batch, frames) in enumerate([(B, T), (B, T), (B32, T32)]):
    loss = train_step(batch, frames)
    if device == "cuda":
        print(
            f"step {step} T={frames} loss {loss:.3f} lr {scheduler.get_last_lr()[0]:.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    clips = torch.randn(EVAL_B, 3, EVAL_T, S, S, device=device)
    scores = model(clips)
    print("fp32 64-frame eval", tuple(scores.shape), scores.float().softmax(-1).max().item())
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del clips, scores
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    clips = torch.randn(FC_B, 3, FC_T, FC_S, FC_S, device=device)
    top5 = model(clips).topk(5, dim=1).indices
print("fully conv", tuple(clips.shape), top5.shape)
if device == "cuda":
    print(f"256px peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
