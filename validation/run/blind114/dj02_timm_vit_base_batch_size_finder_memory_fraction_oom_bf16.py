"""A batch-size finder as training frameworks run one (power scaling, as Lightning's BatchSizeFinder):
the process is capped with torch.cuda.set_per_process_memory_fraction, a timm ViT-B/16 (bf16 autocast,
SGD with momentum and Nesterov) takes one training step at batch 32, 64, 128, ... until a step raises
torch.OutOfMemoryError, which is caught; the failed step's gradients are dropped, the cache emptied,
and two training steps run at the last batch that fitted; 6 phases."""

import gc
import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11402)
FRACTION = 0.1
START, IMG = (2, 64) if SMALL else (32, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"

if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)
model = timm.create_model(
    "vit_tiny_patch16_224" if SMALL else "vit_base_patch16_224",
    num_classes=1000,
    img_size=IMG,
    drop_path_rate=0.1,
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)


def train_step(batch):
    x = torch.randn(batch, 3, IMG, IMG, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


if device == "cuda":
    print(
        f"model {torch.cuda.memory_allocated()}"
        f" limit {int(FRACTION * torch.cuda.get_device_properties(0).total_memory)}"
    )
    torch.cuda.reset_peak_memory_stats()
batch, fitted = START, None
while batch <= (16 if SMALL else 4096):
    failed = False
    try:
        loss = train_step(batch)
    except torch.OutOfMemoryError:
        failed = True
    if failed:
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
    if device == "cuda":
        print(
            f"batch {batch} {'OOM' if failed else 'ok'} allocated {torch.cuda.memory_allocated()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    if failed:
        break
    fitted = batch
    batch *= 2
for _ in range(2):
    loss = train_step(fitted)
if device == "cuda":
    print(
        f"train at {fitted} loss {loss:.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
