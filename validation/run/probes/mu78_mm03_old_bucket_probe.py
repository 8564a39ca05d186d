"""blind348/mm03 (session 78): what the H100 holds beyond the twin after the resnet18 part (phase 3 and
end allocated +46,758,400 = resnet18's 46,758,048 parameter bytes as one flat 512-rounded block, or the
two rebuilt DDP buckets 30,904,224 + 15,853,824, or ZeRO's two parameter buckets of the same sizes).
Hypothesis: DDP's construction-time single bucket (static_graph: one bucket of every parameter,
46,758,048 bytes), all-reduced with `async_op=True` by the Python `allreduce_hook` in iterations 0-1,
is freed by the reducer at the rebuild (iteration 2's forward) but stays on ProcessGroupNCCL's shelf
(the watchdog has not moved it to `shelvesToUnstash_`), so the GPU keeps it to the end.
Runs mm03's phase 3 alone (resnet18 channels_last, DDP static_graph bucket_cap 25 MB, ZeRO SGD
overlap_with_ddp + hook_with_zero_step(allreduce_hook)), then the same DDP with the plain Python
allreduce_hook and with the reducer's own all-reduce (which of them keeps the old bucket). Records
the memory history and prints allocated per iteration and after mm03's no_grad evaluation at 256,
each time with the live blocks >= 15 MB and their allocating Python frames; then the same after
synchronize + 300 ms sleep + a small all_reduce (a collective once the watchdog surely saw every
work done: the shelf hypothesis says the extra block goes there). ~30 s on an H100.

    python validation/run/probes/mu78_mm03_old_bucket_probe.py
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
print("TORCH", torch.__version__, "AVOID_RECORD_STREAMS", os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS"))
torch.manual_seed(3483)
torch.cuda.memory._record_memory_history(max_entries=200000)


def live(tag):
    snap = torch.cuda.memory._snapshot()
    print(tag, "allocated", torch.cuda.memory_allocated())
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b["size"] >= 15 << 20:
                fr = [f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in b.get("frames", [])]
                fr = [f for f in fr if ".py:" in f][:6]
                print("  LIVE", b["size"], b.get("requested_size"), " <- ".join(fr))


def images(b, r):
    x = torch.randn(b, 3, r, r, device="cuda").contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 1000, (b,), device="cuda")


def run(mode):
    """mode "zero": mm03's phase 3 (ZeRO SGD overlapped through hook_with_zero_step(allreduce_hook));
    "pyhook": the same DDP with the plain Python allreduce_hook and an SGD step outside it;
    "builtin": the same DDP with the reducer's own C++ all-reduce (no hook)."""
    print("MODE", mode)
    torch.manual_seed(3483)
    small = torchvision.models.resnet18().to("cuda", memory_format=torch.channels_last)
    sddp = DDP(small, device_ids=[0], gradient_as_bucket_view=True, static_graph=True, bucket_cap_mb=25)
    zero = opt = None
    if mode == "zero":
        zero = ZeroRedundancyOptimizer(
            sddp.parameters(),
            optimizer_class=torch.optim.SGD,
            overlap_with_ddp=True,
            lr=0.1,
            momentum=0.9,
            weight_decay=1e-4,
        )
        sddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, sddp, zero))
    else:
        opt = torch.optim.SGD(sddp.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        if mode == "pyhook":
            sddp.register_comm_hook(None, allreduce_hook)
    live("BUILT")
    for it in range(5):
        x, y = images(96, 224)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(sddp(x), y)
        loss.backward()
        if opt is not None:
            opt.step()
        (zero or opt).zero_grad(set_to_none=True)
        print("ITER", it, loss.item(), "rebuilt", sddp._has_rebuilt_buckets)
        live(f"AFTER_ITER{it}")
    sddp.eval()
    with torch.no_grad():
        x, y = images(96, 256)
        print("EVAL", (sddp(x).argmax(1) == y).float().mean().item())
    live("AFTER_EVAL")
    del x, y, loss
    torch.cuda.synchronize()
    time.sleep(0.3)
    dist.all_reduce(torch.ones(4, device="cuda"))
    live("AFTER_SLEEP_AND_COLLECTIVE")
    del sddp, small, zero, opt
    gc.collect()
    torch.cuda.synchronize()
    time.sleep(0.3)
    dist.all_reduce(torch.ones(4, device="cuda"))
    live("MODE_FREED")


for mode in ("zero", "pyhook", "builtin"):
    run(mode)
dist.destroy_process_group()
