"""torchvision's ResNet-50 as the reference classification recipe runs it under DDP, on one GPU
before the real launch: init_process_group('nccl', init_method='tcp://...') with rank 0 of world 1
(a free port), BatchNorm converted to SyncBatchNorm, channels-last, DDP with static_graph=True and
PyTorch's fp16_compress_hook (default_hooks: the gradient buckets cast to fp16 for the all-reduce and
back), fp16 autocast with a GradScaler, SGD with Nesterov momentum 0.9 and weight decay 1e-4,
label-smoothed cross-entropy; batch 128 at 224 x 224, 3 steps; then evaluation at 224 in batches of
256 under inference_mode; 5 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14802)
B, RES, EB = (4, 64, 4) if SMALL else (128, 224, 256)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last

with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
dist.init_process_group(
    backend="nccl" if device == "cuda" else "gloo",
    init_method=f"tcp://localhost:{port}",
    rank=0,
    world_size=1,
)
local_rank = 0
if device == "cuda":
    torch.cuda.set_device(local_rank)

model = torchvision.models.resnet50(num_classes=1000)
model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
model = model.to(device, memory_format=CL)
model = DDP(model, device_ids=[local_rank] if device == "cuda" else None, static_graph=True)
model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=CL)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = criterion(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del x, y, loss
model.eval()
correct = 0
with torch.inference_mode():
    for _ in range(3):
        x = torch.randn(EB, 3, RES, RES, device=device).contiguous(memory_format=CL)
        y = torch.randint(0, 1000, (EB,), device=device)
        with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
            logits = model(x)
        correct += (logits.argmax(1) == y).sum().item()
if device == "cuda":
    print(
        f"eval correct {correct} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
