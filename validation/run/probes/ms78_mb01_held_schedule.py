"""blind339/mb01 under the twin with ProcessGroupNCCL's late releases written in by hand: the schedule
that reproduces the H100's record (fixtures/run/run_blind339_h100.jsonl), for session 78's report.
Not a GPU probe: run it under the twin, from the repository root,

    vramscope run --gpu h100 --json OUT.json validation/run/probes/ms78_mb01_held_schedule.py

The twin's own rule (_dist._stash) frees a stashed tensor at its group's next collective; on the H100
the watchdog (a 100 ms poll) had not seen the works done by then, so they lived longer:
- phase 1: bf16_compress_hook's bf16 copy of every bucket of steps 1 and 2 (269,701,120 bytes a
  step) until step 3's third bucket's all-reduce; step 3's buckets 2..24 (252,917,760 bytes) until
  phase 2's first collective (DDP's construction);
- phase 2: the first iteration's one 539,402,240-byte bucket, all-reduced by post_localSGD_hook,
  past the bucket rebuild until the second model-averaging all-reduce (after step 5).
The hook below is default_hooks._compress_hook's eager path, holding its bf16 copy.
"""

import glob
import os
import runpy
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = glob.glob(os.path.join(HERE, "..", "blind339", "mb01_*.py"))[0]
held, held2 = [], []
count = {"ddp": 0, "step": 0, "step2": 0, "avg": 0}
register, all_reduce, new_subgroups = DDP.register_comm_hook, dist.all_reduce, dist.new_subgroups


def compress_hook(group, bucket):
    if bucket.index() == 0:
        count["step"] += 1
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size())

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    fut = all_reduce(compressed, async_op=True).get_future()
    if count["step"] == 3 and bucket.index() == 2:
        held.clear()
    held.append(compressed)
    return fut.then(decompress)


def register_comm_hook(self, state, hook):
    count["ddp"] += 1
    if count["ddp"] == 1:
        return register(self, state, compress_hook)

    def local_sgd(state, bucket):
        if bucket.index() == 0:
            count["step2"] += 1
        if count["step2"] == 1:
            held2.append(bucket.buffer())
        return hook(state, bucket)

    return register(self, state, local_sgd)


def averaging_all_reduce(tensor, *args, **kwargs):
    out = all_reduce(tensor, *args, **kwargs)
    if not kwargs.get("async_op") and tensor.numel() == 134_850_560:
        count["avg"] += 1
        if count["avg"] == 2:
            held2.clear()
    return out


def subgroups(*args, **kwargs):
    held.clear()  # phase 2's first collectives come next (DDP's construction)
    return new_subgroups(*args, **kwargs)


DDP.register_comm_hook = register_comm_hook
dist.all_reduce = averaging_all_reduce
dist.new_subgroups = subgroups
sys.argv = [SCRIPT]
runpy.run_path(SCRIPT, run_name="__main__")
