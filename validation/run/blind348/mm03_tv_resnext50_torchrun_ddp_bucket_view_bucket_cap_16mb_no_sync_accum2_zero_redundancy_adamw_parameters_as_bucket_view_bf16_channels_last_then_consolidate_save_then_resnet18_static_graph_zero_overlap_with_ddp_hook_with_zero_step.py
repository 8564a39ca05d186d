"""Torchrun-style DDP with ZeRO-1 on one GPU (a world of one made by the script when RANK is unset):
torchvision `resnext50_32x4d` (channels_last, bf16 autocast, 1000 classes) under
`DistributedDataParallel(gradient_as_bucket_view=True, bucket_cap_mb=16)` with a
`ZeroRedundancyOptimizer(AdamW, parameters_as_bucket_view=True)`, 2 micro-batches per step, the first
under `no_sync()`. Then the checkpoint: `consolidate_state_dict(to=0)` and the module's and optimizer's
state dicts written with `torch.save` into a tempdir. Then ZeRO overlapped with DDP on a torchvision
`resnet18` under DDP with `static_graph=True`: `ZeroRedundancyOptimizer(SGD momentum,
overlap_with_ddp=True)` stepped inside DDP's communication hook (`hook_with_zero_step(allreduce_hook, ...)`,
NCCL only: plain on the CPU), whose first three iterations (static graph) only learn the bucket layout.
Phases: (0) group, model, DDP and ZeRO built; (1) 2 steps of 2 x 48 images at 224; (2) the optimizer
consolidated and the checkpoint saved; (3) the first model freed, resnet18 under DDP with the overlapped
ZeRO, 5 iterations of 96; then an evaluation of resnet18 at 256 under no_grad. 5 phases."""

import os
import shutil
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

SMALL = bool(os.environ.get("SMOKE"))
if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
local_rank = int(os.environ["LOCAL_RANK"])
use_cuda = torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if use_cuda else "gloo")
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
ids = [local_rank] if use_cuda else None

torch.manual_seed(3483)
B, R, B2, R_EVAL = (2, 64, 4, 64) if SMALL else (48, 224, 96, 256)


def report(tag, reset=True):
    if use_cuda:
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


def images(b, r):
    x = torch.randn(b, 3, r, r, device=device).contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 1000, (b,), device=device)


net = torchvision.models.resnext50_32x4d().to(device, memory_format=torch.channels_last)
ddp = DDP(net, device_ids=ids, gradient_as_bucket_view=True, bucket_cap_mb=16)
opt = ZeroRedundancyOptimizer(
    ddp.parameters(),
    optimizer_class=torch.optim.AdamW,
    parameters_as_bucket_view=True,
    lr=1e-3,
    weight_decay=0.05,
)
report("ddp and zero built")

ACCUM = 2
for step in range(2):
    for micro in range(ACCUM):
        x, y = images(B, R)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            if micro < ACCUM - 1:
                with ddp.no_sync():
                    (F.cross_entropy(ddp(x), y) / ACCUM).backward()
                continue
            loss = F.cross_entropy(ddp(x), y) / ACCUM
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("zero step", step, loss.item())
report("ddp accumulation with zero")

ckpt_dir = tempfile.mkdtemp(prefix="mm03_ckpt_")
opt.consolidate_state_dict(to=0)
if dist.get_rank() == 0:
    torch.save(
        {"model": ddp.module.state_dict(), "optimizer": opt.state_dict()},
        os.path.join(ckpt_dir, "checkpoint.pt"),
    )
dist.barrier()
print("checkpoint bytes", os.path.getsize(os.path.join(ckpt_dir, "checkpoint.pt")))
report("consolidated and saved")

del ddp, opt, net, loss
small = torchvision.models.resnet18().to(device, memory_format=torch.channels_last)
sddp = DDP(small, device_ids=ids, gradient_as_bucket_view=True, static_graph=True, bucket_cap_mb=25)
zero = ZeroRedundancyOptimizer(
    sddp.parameters(),
    optimizer_class=torch.optim.SGD,
    overlap_with_ddp=use_cuda,
    lr=0.1,
    momentum=0.9,
    weight_decay=1e-4,
)
if use_cuda:
    sddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, sddp, zero))
for it in range(5):
    x, y = images(B2, R)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = F.cross_entropy(sddp(x), y)
    loss.backward()
    if not use_cuda:
        zero.step()
    zero.zero_grad(set_to_none=True)
    print("overlapped iteration", it, loss.item())
report("zero overlapped with ddp")

sddp.eval()
with torch.no_grad():
    x, y = images(B2, R_EVAL)
    print("eval accuracy", (sddp(x).argmax(1) == y).float().mean().item())
report("eval", reset=False)
shutil.rmtree(ckpt_dir, ignore_errors=True)
dist.destroy_process_group()
