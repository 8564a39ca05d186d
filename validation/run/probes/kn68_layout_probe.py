"""kn68 probe 2: blind299/kn03's allocator layout around merge_and_unload + half (its -2,752,512
allocated miss).

kn68_block_slack_probe showed the H100 placing 4 x 10 fp16 768x768 weights in 12 MiB segments (9 packed,
the tenth in the 1,966,080-byte tail, kept whole) where the twin has none there. This runs the blind script
as __main__ and prints the large pool's layout (every segment by address: its blocks' state and size) at
the end of phase 2, after merge_and_unload, before and after .half(); the twin prints the same lines
(`python -m vramscope run --gpu h100 validation/run/probes/kn68_layout_probe.py SCRIPT`).

Usage: python3 validation/run/probes/kn68_layout_probe.py validation/run/blind299/kn03_*.py"""

import runpy
import sys

import torch
from peft.tuners.tuners_utils import BaseTuner

script = sys.argv[1]
sys.argv = sys.argv[1:]
phase = [0]


def layout(tag):
    segs = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    print(f"{tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    for seg in segs:
        if seg["segment_type"] != "large":
            continue
        blocks = " ".join(
            f"{'A' if b['state'] == 'active_allocated' else 'f'}{b['size']}" for b in seg["blocks"]
        )
        print(f"  {tag} seg {seg['total_size']}: {blocks}")


real_reset = torch.cuda.reset_peak_memory_stats


def reset(*args, **kwargs):
    if phase[0] == 2:
        layout("phase2-end")
    phase[0] += 1
    return real_reset(*args, **kwargs)


real_merge = BaseTuner.merge_and_unload


def merge(self, *args, **kwargs):
    out = real_merge(self, *args, **kwargs)
    layout("after-merge")
    return out


real_half = torch.nn.Module.half


def half(self, *args, **kwargs):
    layout("before-half")
    out = real_half(self, *args, **kwargs)
    layout("after-half")
    return out


torch.cuda.reset_peak_memory_stats = reset
BaseTuner.merge_and_unload = merge
torch.nn.Module.half = half
runpy.run_path(script, run_name="__main__")
