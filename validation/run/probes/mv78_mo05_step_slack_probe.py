"""Session 78 (helper mv): blind350/mo05's allocated figure after phase 2, 440,832 bytes below the H100's
in the twin (phase 1 exact in all five figures, phase 2's peaks and reserved exact; phase 3 and the end
carry the same -440,832).

    python3 probes/mv78_mo05_step_slack_probe.py        (from validation/run; < 1 min, < 6 GB)

In the twin the difference is not a tensor: its memory history holds the same live allocations (sizes
and sites) after step 3 and after step 6, and the large pool sees the same requests and frees, in the
same order, in every one of the six steps (hard and soft distillation differ only in small-pool
tensors of (128, 1000)). What moves `memory_allocated` from step to step is slack: parameter gradients
(fp32 `_to_copy` of bf16 gradients, 1.1-3.1 MB) landing in large-pool free blocks whose remainder is
1 MiB or less, which are not split. So the GPU's layout after some step of phase 2 left other holes.

The probe runs blind350/mo05 unmodified (`runpy`) and prints after each optimizer step (`step N`,
N = 1..6; steps 4-6 are phase 2):
- `memory_allocated` and `max_memory_allocated`;
- every active block whose size exceeds its request rounded up to 512 bytes: size, request, its
  segment's size, the block's offset in the segment;
and after steps 3 and 4 the block map (`blocks step N`: each segment's size, then its blocks' sizes with
their state's first letter, by address). The twin's output is mv78_mo05_step_slack_probe_twin_h100.out:
the first step whose line differs from the GPU's, and the map before it, show where the layouts part.
"""

import glob
import os
import runpy

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

script = os.path.abspath(glob.glob("blind350/mo05_*.py")[0])


def report(tag, blocks=False):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}",
        flush=True,
    )
    total = 0
    for seg in sorted(snap["segments"], key=lambda s: s["address"]):
        off = seg["address"]
        for b in seg["blocks"]:
            rounded = max(512, -(-b["requested_size"] // 512) * 512)
            if b["state"] == "active_allocated" and b["size"] > rounded:
                total += b["size"] - rounded
                print(
                    f"  slack {b['size']} req {b['requested_size']} seg {seg['total_size']} "
                    f"off {hex(off - seg['address'])}",
                    flush=True,
                )
            off += b["size"]
    print(f"  slack total {total}", flush=True)
    if blocks:
        print(f"blocks {tag}:", flush=True)
        for seg in sorted(snap["segments"], key=lambda s: s["address"]):
            sizes = " ".join(f"{b['size']}{b['state'][0]}" for b in seg["blocks"])
            print(f"  {seg['total_size']} {seg['segment_type'][0]}: {sizes}", flush=True)


steps = [0]


def after_step(opt, args, kwargs):
    steps[0] += 1
    report(f"step {steps[0]}", blocks=steps[0] in (3, 4))


register_optimizer_step_post_hook(after_step)
runpy.run_path(script, run_name="__main__")
