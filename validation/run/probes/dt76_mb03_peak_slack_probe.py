"""Session 76 (helper dt): blind339/mb03's phase-1 peak, 1,048,576 bytes above the H100's in the twin
(`requested` exact in every phase, `reserved` too): which block holds more than its request there.

    python3 probes/dt76_mb03_peak_slack_probe.py        (from validation/run; < 1 min, < 12 GB)

The phase-1 peak is `loss.backward()`'s loss_parallel backward (torch/distributed/tensor/parallel/
loss.py `_nll_loss_and_log_softmax_backward`: zeros_like, exp, add, mul of the (4096, 49152) fp32
logits). The probe runs blind339/mb03 unmodified (`runpy`, a world of one NCCL group as the script
makes it) with the memory history on (python frames) and prints, after each return of that function
(`loss_bwd N`) and after each optimizer step (`step N`):
- `memory_allocated` and `max_memory_allocated`;
- every active block whose size exceeds its request rounded up to 512 bytes (a large-pool block is
  split only where more than 1 MiB would remain): size, request, its segment's size, the block's
  offset in the segment and the first frame of the script that allocated it.
The twin (dt76_mb03_peak_slack_probe_twin_h100.out) holds one such block at both peaks of phase 1:
13,631,488 for a 12,582,912 request (an autocast bf16 copy of the attention's input, line 60),
offset 0xc100000 of a 301,989,888 segment, the 13 MiB hole between a 32 MiB product (line 75) and
an AdamW state (step 1). No such line on the GPU means its layout left no 13 MiB hole there: the
GPU's `step 1` block map (`blocks step 1`: each segment's size and its blocks' sizes, states in
order, by address) then shows where the two layouts part.
"""

import glob
import os
import runpy
import sys

import torch
import torch.distributed.tensor.parallel.loss as loss_mod
from torch.optim.optimizer import register_optimizer_step_post_hook

script = os.path.abspath(glob.glob("blind339/mb03_*.py")[0])
name = os.path.basename(script)


def frame_of(blk):
    for f in blk.get("frames") or []:
        if os.path.basename(f.get("filename", "")) == name:
            return f"mb03:{f.get('line')}"
    return "?"


def slack(tag, blocks=False):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}",
        flush=True,
    )
    for seg in snap["segments"]:
        off = seg["address"]
        for b in seg["blocks"]:
            rounded = max(512, -(-b["requested_size"] // 512) * 512)
            if b["state"] == "active_allocated" and b["size"] > rounded:
                print(
                    f"  slack {b['size']} req {b['requested_size']} seg {seg['total_size']} "
                    f"off {hex(off - seg['address'])} at {frame_of(b)}",
                    flush=True,
                )
            off += b["size"]
    if blocks:
        print(f"blocks {tag}:", flush=True)
        for seg in sorted(snap["segments"], key=lambda s: s["address"]):
            sizes = " ".join(f"{b['size']}{b['state'][0]}" for b in seg["blocks"])
            print(f"  {seg['total_size']} {seg['segment_type'][0]}: {sizes}", flush=True)


calls = [0]
original = loss_mod._nll_loss_and_log_softmax_backward


def backward(*args, **kwargs):
    out = original(*args, **kwargs)
    calls[0] += 1
    slack(f"loss_bwd {calls[0]}")
    return out


loss_mod._nll_loss_and_log_softmax_backward = backward
steps = [0]


def after_step(opt, args, kwargs):
    steps[0] += 1
    if steps[0] <= 3:
        slack(f"step {steps[0]}", blocks=steps[0] == 1)


register_optimizer_step_post_hook(after_step)
torch.cuda.memory._record_memory_history(max_entries=3000000, stacks="python")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
