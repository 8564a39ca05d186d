"""blind348/mm03 (session 79): is the +46,758,400 the H100 holds over the twin in phase 3 and at the end
ProcessGroupNCCL's shelf (a timing: the watchdog's 100 ms scan), a reference cycle (freed at a garbage
collection), or a holder to find?

mu78_mm03_old_bucket_probe_h100.out showed DDP's construction-time bucket (static_graph: one bucket of
all 46,758,048 parameter bytes) alive after the rebuild in iteration 2 with mm03's ZeRO hook and with the
reducer's own all-reduce, freed by iteration 3; with the plain Python allreduce_hook freed at the rebuild
(the twin's point). That probe took a memory snapshot after every iteration (slow; it allocates many
Python objects); mm03's record run, without them, kept the bucket to its end.

This probe runs mm03's phase 3 (resnet18 channels_last, DDP static_graph bucket_cap 25 MB, ZeRO SGD
overlap_with_ddp + hook_with_zero_step(allreduce_hook), 5 iterations of 96 at 224, eval at 256) without
memory history, printing only memory_allocated() (no CUDA call of its own) after each iteration:
  plain     -- as mm03; at the end also after gc.collect(), then after synchronize + 300 ms + a small
               all_reduce (the shelf's release).
  sleep1    -- synchronize + 300 ms after iteration 1 (the last all-reduce of the old bucket): the
               watchdog has surely scanned that work before the rebuild's broadcasts, so the shelf
               hypothesis says the bucket goes at the rebuild (iteration 2 as in the twin).
  sleep4    -- synchronize + 300 ms after iteration 4, before the evaluation: the shelf hypothesis says
               the evaluation's first collective (DDP's buffer broadcast in its pre-forward, mm03's last
               collective before `destroy_process_group`) frees the bucket if it is still held.
  gcoff     -- plain with gc.disable() for the loop: a cycle would then surely survive to the end.
Each variant runs twice; "base" is what the run found allocated, the figures are above it. Twin's
figures: nd79_mm03_shelf_or_cycle_probe_twin_h100.out (~25 s on an H100).

    python validation/run/probes/nd79_mm03_shelf_or_cycle_probe.py
"""

import gc
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")
print("TORCH", torch.__version__)


def images(b, r):
    x = torch.randn(b, 3, r, r, device="cuda").contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 1000, (b,), device="cuda")


def run(variant, rep):
    torch.manual_seed(3483)
    base = torch.cuda.memory_allocated()
    small = torchvision.models.resnet18().to("cuda", memory_format=torch.channels_last)
    sddp = DDP(small, device_ids=[0], gradient_as_bucket_view=True, static_graph=True, bucket_cap_mb=25)
    zero = ZeroRedundancyOptimizer(
        sddp.parameters(),
        optimizer_class=torch.optim.SGD,
        overlap_with_ddp=True,
        lr=0.1,
        momentum=0.9,
        weight_decay=1e-4,
    )
    sddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, sddp, zero))
    if variant == "gcoff":
        gc.disable()
    t0 = time.perf_counter()
    line = [f"{variant}{rep} base {base} built {torch.cuda.memory_allocated() - base}"]
    for it in range(5):
        x, y = images(96, 224)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(sddp(x), y)
        loss.backward()
        zero.zero_grad(set_to_none=True)
        loss.item()
        line.append(f"it{it} {torch.cuda.memory_allocated() - base} @{time.perf_counter() - t0:.3f}")
        if (variant, it) in (("sleep1", 1), ("sleep4", 4)):
            torch.cuda.synchronize()
            time.sleep(0.3)
    sddp.eval()
    with torch.no_grad():
        x, y = images(96, 256)
        (sddp(x).argmax(1) == y).float().mean().item()
    line.append(f"eval {torch.cuda.memory_allocated() - base} @{time.perf_counter() - t0:.3f}")
    if variant == "gcoff":
        gc.enable()
    line.append(f"gc({gc.collect()}) {torch.cuda.memory_allocated() - base}")
    torch.cuda.synchronize()
    time.sleep(0.3)
    dist.all_reduce(torch.ones(4, device="cuda"))
    line.append(f"sleep+collective {torch.cuda.memory_allocated() - base}")
    print(" | ".join(line), flush=True)
    del sddp, small, zero, x, y, loss
    gc.collect()
    torch.cuda.synchronize()
    time.sleep(0.3)
    dist.all_reduce(torch.ones(4, device="cuda"))


for rep in range(2):
    for variant in ("plain", "sleep1", "sleep4", "gcoff"):
        run(variant, rep)
print("END allocated", torch.cuda.memory_allocated())
dist.destroy_process_group()
