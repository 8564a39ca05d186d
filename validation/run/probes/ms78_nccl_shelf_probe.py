"""blind339/mb01 (session 78): how long ProcessGroupNCCL keeps an asynchronous collective's tensors
that nobody waits on (bf16_compress_hook's bf16 copy of each DDP bucket). Source (torch 2.11,
ProcessGroupNCCL.cpp): `collective` stashes an asyncOp collective's tensors on its work; the
watchdog thread (every 100 ms) moves a completed work's shelf to `shelvesToUnstash_`; the main
thread's next `workEnqueue` on that group unstashes them. So a copy lives at least to the group's
next collective (the twin's rule) and longer when the watchdog has not yet looked.

One NCCL process (world 1), a 16-layer MLP of 4096 x 4096 Linear layers under DDP with 10 MiB
buckets and bf16_compress_hook, 3 steps in each of two modes:
  fast: no pause: the watchdog's scan may come late (the GPU's mb01 run kept two steps of copies);
  slow: before every step, synchronize and sleep 300 ms, then an all-reduce of a 4-element tensor
        (a collective after the watchdog has surely seen every earlier work done).
Prints per step: allocated after backward, after the step's pause/collective, and the bytes of
the copies still held by the twin's rule (`HELD_TWIN`: the last bucket's copy). ~20 s on an H100.

    python validation/run/probes/ms78_nccl_shelf_probe.py
"""

import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
torch.cuda.set_device(0)
print("TORCH", torch.__version__, "AVOID_RECORD_STREAMS", os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS"))
small = torch.ones(4, device="cuda")

for mode in ("fast", "slow"):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(16)]).cuda()
    ddp = DDP(model, device_ids=[0], bucket_cap_mb=10)
    sizes = []

    def hook(state, bucket, sizes=sizes):
        sizes.append(bucket.buffer().numel() * 2)
        return default_hooks.bf16_compress_hook(state, bucket)

    ddp.register_comm_hook(dist.group.WORLD, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(64, 4096, device="cuda")
    for step in range(3):
        if mode == "slow":
            torch.cuda.synchronize()
            time.sleep(0.3)
            dist.all_reduce(small)
        a0 = torch.cuda.memory_allocated()
        sizes.clear()
        ddp(x).sum().backward()
        a1 = torch.cuda.memory_allocated()
        opt.step()
        opt.zero_grad(set_to_none=True)
        a2 = torch.cuda.memory_allocated()
        print(
            f"STEP {mode} {step} buckets {len(sizes)} copies {sum(sizes)} last {sizes[-1]}"
            f" before {a0} after_backward {a1} after_step {a2} HELD_TWIN {sizes[-1]}"
        )
    torch.cuda.synchronize()
    time.sleep(0.3)
    a3 = torch.cuda.memory_allocated()
    dist.all_reduce(small)
    a4 = torch.cuda.memory_allocated()
    print(f"END {mode} before_collective {a3} after_collective {a4} released {a3 - a4}")
    del ddp, model, opt, x
    dist.all_reduce(small)
    torch.cuda.synchronize()
    time.sleep(0.3)
    dist.all_reduce(small)
    print(f"CLEAN {mode} allocated {torch.cuda.memory_allocated()}")
dist.destroy_process_group()
