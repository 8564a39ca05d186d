"""When DDP's first-iteration bucket dies (helper h5, session 62; blind272/jm03's 1,000 MiB of reserved).

DDP (find_unused_parameters=False) puts every gradient in one bucket for the first iteration and
rebuilds its buckets in the second forward (`_pre_forward` -> `reducer._rebuild_buckets()`, which
first broadcasts the new bucket indices: 408 + 32 bytes on the device). The first iteration's bucket
was all-reduced asynchronously (the comm hook's `all_reduce(async_op=True)`), and ProcessGroupNCCL
stashes a collective's tensors on its work (`TensorShelf`) until `work.wait()`; DDP never waits on the
work, so the shelf is released only after the watchdog thread has seen the work complete (it polls
every `kWatchdogThreadSleepMillis`) and moved the shelf to `shelvesToUnstash_`, at the next
ProcessGroupNCCL call on the main thread (`workEnqueue`). blind272/jm03's GPU history (session 62,
/work/gpu_s62/d/h/jm03.pickle.xz) shows both outcomes: in its first DDP the old 669,425,664-byte bucket
is freed in `_pre_forward` (the broadcast found the shelf queued), in its second it lives on to the
second iteration's first `all_reduce` (freed there, powerSGD_hook.py:412), and the second forward opens
one more 1,000 MiB segment; the session-61 records (two runs) have that segment in both phases.

This probe measures it: a 256 MiB model (4 x Linear(4096, 4096) fp32), DDP(bucket_cap_mb=64,
gradient_as_bucket_view=True), world size 1, NCCL; iteration 1; then either no pause or a 0.5 s pause
(longer than the watchdog's poll); then iteration 2, printing `memory_allocated()` in a forward
pre-hook of the module (after DDP's `_pre_forward`, so after the rebuild) and after its backward.
Expected if the rule holds: in the warmed cases (the second and third; the first also takes the two
cuBLAS workspaces, 64 MiB, between its two figures) with no pause the second forward's figure is
268,435,456 bytes (the old bucket) above the first forward's, with the pause equal to it; after the
second backward equal in both. The twin (helper h5's worktree, GPU=h100) prints:
  pause 0.0: first forward 537919488 second forward (after rebuild) 605028352 after second backward 605028352
  pause 0.5: first forward 605028352 second forward (after rebuild) 605028352 after second backward 605028352
  pause 0.0: first forward 605028352 second forward (after rebuild) 605028352 after second backward 605028352
(each with reserved 884998144): it frees the old bucket at the rebuild, pause or not.

    python3 validation/run/probes/h5_ddp_shelf_probe_s62.py
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
dist.init_process_group("nccl", init_method="env://", device_id=dev)
torch.manual_seed(0)


def case(pause: float) -> None:
    model = nn.Sequential(*[nn.Linear(4096, 4096, bias=False) for _ in range(4)]).to(dev)
    ddp = DDP(model, device_ids=[0], bucket_cap_mb=64, gradient_as_bucket_view=True)
    seen = []
    model.register_forward_pre_hook(lambda m, a: seen.append(torch.cuda.memory_allocated()))
    x = torch.randn(64, 4096, device=dev)
    ddp(x).square().mean().backward()
    torch.cuda.synchronize()
    if pause:
        time.sleep(pause)
    ddp(x).square().mean().backward()
    after_bwd = torch.cuda.memory_allocated()
    torch.cuda.synchronize()
    print(
        f"pause {pause}: first forward {seen[0]} second forward (after rebuild) {seen[1]} "
        f"after second backward {after_bwd} reserved {torch.cuda.memory_reserved()}"
    )
    del ddp, model, x
    torch.cuda.synchronize()
    time.sleep(0.5)


case(0.0)
case(0.5)
case(0.0)
dist.destroy_process_group()
print("done")
