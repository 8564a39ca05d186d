"""Session 78 (helper mt): blind349/mn05 (BERT-large MLM fp16 under a 12.5 GiB fraction, OOM halving).

    python3 probes/mt78_mn05_slack_probe.py        (from validation/run; ~40 s on an H100, < 13 GB)

The H100 record and the twin agree on `requested` in every phase and on `reserved` through phase 4,
yet the twin's `allocated` is 811,008 bytes lower from phase 1 on (811,008 = 125,829,120 - 125,018,112:
a 30522 x 1024 fp32 request alone in a 120 MiB block, or any other request in a block whose rest was
too small to split), and in phase 5 the twin makes one more allocation retry (num_alloc_retries 3 -> 4,
reserved 12,901,679,104 -> 7,637,827,584) where the H100 makes none: the twin's phase-4 layout has no
free block of 593,836,032 bytes (eval's fp32 logits and their log_softmax, 64 x 76 x 30522 x 4) beside
the segment `logits.float()` takes, its 1,000,341,504-byte segment (pinned since phase 1 by the
autograd thread's 32 MiB cuBLAS workspace) being cut by the tied word embedding's two AdamW states.

The probe runs blind349/mn05 unmodified (`runpy`) with the memory history on (python frames) and
prints at every phase end (each `torch.cuda.reset_peak_memory_stats()`) and at the script's end:
- allocated, reserved, num_alloc_retries, num_ooms;
- every active block whose size exceeds its request rounded up to 512 bytes: size, request, its
  segment's size, the block's offset in the segment, and the script/transformers/torch frame that
  allocated it (which tensor holds the 811,008);
- the largest free blocks (size, segment size, offset);
and at the ends of phases 1 and 4 the block map (each segment's size and its blocks' sizes with
states a/i, by address). The twin's side is mt78_mn05_slack_probe_twin_h100.out (same command under
`vramscope run --gpu h100`).
"""

import glob
import os
import runpy
import sys

import torch

script = os.path.abspath(glob.glob("blind349/mn05_*.py")[0])
name = os.path.basename(script)


def frame_of(blk):
    out = []
    for f in blk.get("frames") or []:
        fn = f.get("filename", "")
        if fn.endswith(".py"):
            base = "mn05" if os.path.basename(fn) == name else os.path.basename(fn)
            out.append(f"{base}:{f.get('line')}")
        if len(out) == 3:
            break
    return " < ".join(out) or "?"


def show(tag, blocks=False):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    s = torch.cuda.memory_stats()
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()} "
        f"retries {s.get('num_alloc_retries')} ooms {s.get('num_ooms')}",
        flush=True,
    )
    free = []
    for seg in snap["segments"]:
        off = seg["address"]
        for b in seg["blocks"]:
            rounded = max(512, -(-b["requested_size"] // 512) * 512)
            if b["state"] == "active_allocated" and b["size"] > rounded:
                print(
                    f"  slack {b['size']} req {b['requested_size']} seg {seg['total_size']} "
                    f"off {off - seg['address']} at {frame_of(b)}",
                    flush=True,
                )
            if b["state"] == "inactive":
                free.append((b["size"], seg["total_size"], off - seg["address"]))
            off += b["size"]
    free.sort(reverse=True)
    print("  largest free " + " ".join(f"{a}/{b}@{c}" for a, b, c in free[:8]), flush=True)
    if blocks:
        print(f"blocks {tag}:", flush=True)
        for seg in sorted(snap["segments"], key=lambda x: x["address"]):
            if seg["total_size"] >= 20 << 20:
                sizes = " ".join(f"{b['size']}{b['state'][0]}" for b in seg["blocks"])
                print(f"  {seg['total_size']}: {sizes}", flush=True)


phase = [0]
reset = torch.cuda.reset_peak_memory_stats


def reset_and_show(*args, **kwargs):
    show(f"phase{phase[0]}", blocks=phase[0] in (1, 4))
    phase[0] += 1
    return reset(*args, **kwargs)


torch.cuda.reset_peak_memory_stats = reset_and_show
torch.cuda.memory._record_memory_history(max_entries=3000000, stacks="python")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
show("end")
