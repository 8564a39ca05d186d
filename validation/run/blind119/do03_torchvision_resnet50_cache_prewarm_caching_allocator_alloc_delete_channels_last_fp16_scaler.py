"""A torchvision ResNet-50 trained channels-last under fp16 autocast with GradScaler and SGD (Nesterov),
after pre-warming the caching allocator by hand: one raw 12 GiB block taken with
torch.cuda.caching_allocator_alloc on the current stream and given back with caching_allocator_delete,
so the cache keeps the segment and the training steps split it; each step also takes a raw 64 MiB
scratch block through caching_allocator_alloc (as a custom extension's workspace would) and frees it
after the optimizer step; then an eval at batch 256 under no_grad; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11903)
B, IMG, EVAL_B = (4, 64, 8) if SMALL else (128, 224, 256)
PREWARM = (64 << 20) if SMALL else (12 << 30)
SCRATCH = 1 << 20 if SMALL else 64 << 20
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = torch.float16 if device == "cuda" else torch.bfloat16

model = torchvision.models.resnet50(num_classes=1000).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
    stream = torch.cuda.current_stream()
    ptr = torch.cuda.caching_allocator_alloc(PREWARM, device=0, stream=stream)
    torch.cuda.caching_allocator_delete(ptr)
    print(f"prewarmed allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(4):
    x = torch.randn(B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=amp):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scratch = torch.cuda.caching_allocator_alloc(SCRATCH, device=0) if device == "cuda" else None
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if scratch is not None:
        torch.cuda.caching_allocator_delete(scratch)
    if device == "cuda" and step % 2 == 1:
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=amp):
    x = torch.randn(EVAL_B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    top5 = model(x).topk(5, dim=1).indices
if device == "cuda":
    print(
        f"eval {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
