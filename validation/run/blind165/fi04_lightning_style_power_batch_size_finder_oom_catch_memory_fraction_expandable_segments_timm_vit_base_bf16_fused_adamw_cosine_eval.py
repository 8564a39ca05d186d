"""An OOM-catching batch-size finder for a timm ViT-B/16 under a memory fraction, in the manner of
PyTorch Lightning's BatchSizeFinder in "power" mode (tuner/batch_size_scaling.py: double the batch
after each trial that fits, on torch.OutOfMemoryError collect garbage, empty the cache and keep the
last size that fitted), with expandable segments switched on before torch is imported
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) and the process capped with
torch.cuda.set_per_process_memory_fraction(0.1). timm's vit_base_patch16_224 (86M parameters, drop
path 0.1, fused sdpa attention), fp32 weights, bf16 autocast, fused AdamW (lr 1e-3, weight decay
0.05), label smoothing 0.1; each trial is two training steps at 224 x 224 starting from batch 16.
Phases: the doubling trials up to the first out-of-memory error; two steps at 90% of the last size
that fitted (Lightning users' safety margin) after the cleanup; three training steps at that size
with the learning rate on a cosine schedule; torch.cuda.empty_cache() then evaluation at twice that
batch under inference_mode; torch.cuda.empty_cache() then one step at the size that fitted; 5
phases."""

import gc
import math
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import timm
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16504)
if SMALL:
    MODEL_KW = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)
    RES, START, LIMIT = 32, 2, 16
else:
    MODEL_KW = dict(num_classes=1000)
    RES, START, LIMIT = 224, 16, 4096
FRACTION = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)

if SMALL:
    model = timm.models.vision_transformer.VisionTransformer(drop_path_rate=0.1, **MODEL_KW)
else:
    model = timm.create_model("vit_base_patch16_224", pretrained=False, drop_path_rate=0.1, **MODEL_KW)
model = model.to(device)
n_classes = MODEL_KW["num_classes"]
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=(device == "cuda"))
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)


def train_step(batch):
    images = torch.randn(batch, 3, RES, RES, device=device)
    target = torch.randint(0, n_classes, (batch,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = criterion(model(images), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def garbage_collection_cuda():
    """lightning.pytorch.utilities.memory.garbage_collection_cuda"""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def trial(batch):
    try:
        for _ in range(2):
            train_step(batch)
        return True
    except torch.OutOfMemoryError:
        optimizer.zero_grad(set_to_none=True)
        garbage_collection_cuda()
        return False


def report(name):
    if device == "cuda":
        print(
            f"{name}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
batch, fitted = START, None
while batch <= LIMIT:
    if not trial(batch):
        break
    fitted = batch
    batch *= 2
print(f"power scaling: {fitted} fits, {batch} does not")
report("power scaling")

chosen = max(1, int(fitted * 0.9))
ok = trial(chosen)
print(f"safety margin: batch {chosen} fits: {ok}")
report("safety margin")

base_lr = optimizer.param_groups[0]["lr"]
for i in range(3):
    for g in optimizer.param_groups:
        g["lr"] = base_lr * 0.5 * (1 + math.cos(math.pi * i / 3))
    loss = train_step(chosen)
print(f"train at {chosen} loss {loss:.4f}")
report("train")

garbage_collection_cuda()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    images = torch.randn(2 * chosen, 3, RES, RES, device=device)
    preds = model(images).argmax(dim=-1)
print(f"eval {tuple(preds.shape)}")
report("eval")

garbage_collection_cuda()
model.train()
print(f"step at {fitted}: fits {trial(fitted)}")
report("last")
