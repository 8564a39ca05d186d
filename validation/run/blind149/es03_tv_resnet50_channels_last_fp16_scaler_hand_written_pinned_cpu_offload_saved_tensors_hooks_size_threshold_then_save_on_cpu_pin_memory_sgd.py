"""Activation offloading for a CNN, by hand and by PyTorch's context manager: torchvision's
ResNet-50 (channels-last, fp16 autocast, GradScaler, SGD with momentum 0.9 and weight decay),
batch 96 at 224 x 224. One plain step; then a step under torch.autograd.graph.saved_tensors_hooks
whose pack hook copies every saved activation of at least 1 MiB that is not a parameter into a
pinned host buffer (non_blocking) and keeps the small ones on the GPU, its unpack copying back
(non_blocking); then a step under torch.autograd.graph.save_on_cpu(pin_memory=True); then an
evaluation of two batches of 128 under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14903)
B, RES, EB, NCLS = (4, 64, 4, 10) if SMALL else (96, 224, 128, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last

model = torchvision.models.resnet50(num_classes=NCLS).to(device, memory_format=CL)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
criterion = nn.CrossEntropyLoss()
param_ptrs = {p.data_ptr() for p in model.parameters()}
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

offloaded = {"n": 0, "bytes": 0}


def pack_to_host(t):
    if t.device.type != "cuda" or t.numel() * t.element_size() < (1 << 20) or t.data_ptr() in param_ptrs:
        return t
    host = torch.empty_like(t, device="cpu", pin_memory=True)
    host.copy_(t, non_blocking=True)
    offloaded["n"] += 1
    offloaded["bytes"] += t.numel() * t.element_size()
    return (t.device, host)


def unpack_from_host(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    dev, host = packed
    return host.to(dev, non_blocking=True)


def train_step(tag, ctx=None):
    x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=CL)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        if ctx is None:
            loss = criterion(model(x), y)
        else:
            with ctx:
                loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
train_step("plain")
train_step("hand offload", torch.autograd.graph.saved_tensors_hooks(pack_to_host, unpack_from_host))
if device == "cuda":
    print(f"offloaded {offloaded['n']} tensors, {offloaded['bytes']} bytes")
train_step("save_on_cpu", torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda"))

model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, RES, RES, device=device).contiguous(memory_format=CL)
        y = torch.randint(0, NCLS, (EB,), device=device)
        correct += (model(x).argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"eval acc {correct / (2 * EB):.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
