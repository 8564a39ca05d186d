"""Session 75 probe (helper lv): when a block freed with stream uses (`record_stream`) leaves
`requested_bytes`, as blind333/lv02's concurrent scoring frees them.

lv02's H100 record reads requested above allocated at the end of phases 1 and 3 by exactly the blocks
`score()` frees with stream uses as it returns: the trunk's bf16 output `z` (recorded on the three side
streams) and the three side streams' float outputs (recorded on the main stream): 6144 x 2048 x 2 +
3 x 6144 x 4 = 25,239,552 (phase 1), 16384 x 2048 x 2 + 3 x 16384 x 4 = 67,305,472 (phase 3). The free
drops allocated at once (`free`), but `requested_bytes` (and `active`) only at `free_block`, once the
block's events are done: `process_events` at a later `malloc`, or `synchronize_and_free_events`
(CUDACachingAllocator.cpp). The twin takes every event as done by the next `malloc` (EventPolicy::
CompleteAtNextMalloc in crates/alloc/src/allocator.rs), here `.sum()`'s, so its requested equals
allocated at the phase's end; on the H100 the events were still pending at that malloc (the side
streams' GEMMs still running) and no malloc came after `.item()`'s synchronization before the report.

This runs lv02's ensemble (the same sizes) and prints `requested - allocated` (`pending`) at each point:
- `plain`: after `score()` returns, after `.sum()` (a malloc), after `.item()` (a sync), after the next
  malloc;
- `synced`: `score()` with `torch.cuda.synchronize()` before it returns (the events recorded on idle
  streams), then `.sum()`;
- `sync-then-malloc`: `torch.cuda.synchronize()` after `score()` returns, then `.sum()`;
- `sleep`: 50 ms of host time after `score()` returns, then `.sum()` (the GPU done, no sync);
- `new-segment`: after `score()` returns, a 1 or 2 GiB tensor (a new segment: `cudaMalloc`), then `.sum()`:
  whether a `cudaMalloc` lets the events complete (blind37/ak06's H200 record: the prefetched batch
  freed at iteration 0 had left requested by iteration 1's end, the one freed at iteration 4 had not
  by iteration 5's, with no host sync in its loop; the twin drains both at the next malloc).

    python3 probes/lv75_lv02_stream_free_events_probe.py        (from validation/run; ~10 s)"""

import os
import time

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:2:16:8"

import torch
import torch.nn as nn

torch.manual_seed(3332)
IN, D, HID, NH = 1024, 2048, 8192, 4


def mlp(i, h, o):
    return nn.Sequential(nn.Linear(i, h), nn.GELU(), nn.LayerNorm(h), nn.Linear(h, o))


trunk = mlp(IN, HID, D).cuda()
heads = nn.ModuleList(mlp(D, HID, 1) for _ in range(NH)).cuda()
streams = [torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0), torch.cuda.Stream()]


def pending():
    s = torch.cuda.memory_stats()
    return s["requested_bytes.all.current"] - s["allocated_bytes.all.current"]


def score(x, sync=False):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        z = trunk(x)
        outs = []
        main = torch.cuda.current_stream()
        for head, s in zip(heads, streams, strict=False):
            s.wait_stream(main)
            z.record_stream(s)
            with torch.cuda.stream(s):
                outs.append(head(z).float())
        outs.append(heads[-1](z).float())
        for s, o in zip(streams, outs, strict=False):
            main.wait_stream(s)
            o.record_stream(main)
        out = torch.stack(outs).mean(0).squeeze(-1)
        if sync:
            torch.cuda.synchronize()
        return out


for b in (4096, 6144):
    for mode in ("plain", "synced", "sync-then-malloc", "sleep", "new-segment"):
        x = torch.randn(b, IN, device="cuda")
        torch.cuda.synchronize()
        base = pending()
        out = score(x, sync=mode == "synced")
        seen = [f"returned {pending() - base}"]
        if mode == "sync-then-malloc":
            torch.cuda.synchronize()
        elif mode == "sleep":
            time.sleep(0.05)
        elif mode == "new-segment":
            # (a size no cached block holds: 1 GiB, then 2 GiB)
            big = torch.empty((1 << 30) * (1 + (b > 4096)), dtype=torch.uint8, device="cuda")
            seen.append(f"new-segment {pending() - base}")
            del big
        s = out.sum()
        seen.append(f"sum {pending() - base}")
        v = s.item()
        seen.append(f"item {pending() - base}")
        del x, out, s
        y = torch.empty(1, device="cuda")
        seen.append(f"next-malloc {pending() - base}")
        del y
        print(f"batch {b} {mode}: pending " + ", ".join(seen), flush=True)
