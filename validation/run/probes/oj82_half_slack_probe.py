"""Session 82 probe (helper oj): the unsplit blocks behind blind357/mv05, blind359/mx01 and blind361/mz03's
786,432-byte misses, phase by phase, in one GPU process, with that process's own figures.

The three misses (twin minus H100: mv05 -786,432 allocated from phase 2, mx01 -1,572,864 from phase 1 and
-784,896 after `.half()`, mz03 +786,432 from phase 2) keep `requested` exact at every phase end: no tensor
lives longer on either side; a request lands in a free block whose rest (<= 1 MiB in the large pool) is not
split (CUDACachingAllocator.cpp `should_split`). In the twin the extra (or missing) rests are `.half()`'s
fp16 copies (mv05, mz03: 1,179,648-byte 768 x 768 and 2 MiB weights in 1.25 to 3 MiB free blocks) and
training-step blocks (mx01). Whether the GPU's blocks follow the segment addresses (a process draw: rule 17's
stacks phase, docs/driver-placement.md) or another order of requests is what this asks.

    python3 probes/oj82_half_slack_probe.py blind361/mz03_*.py      (from validation/run; mz03 ~40 s,
    python3 probes/oj82_half_slack_probe.py blind359/mx01_*.py       mx01 ~25 s, mv05 ~65 s on the H100)
    python3 probes/oj82_half_slack_probe.py blind357/mv05_*.py

Prints, at each phase end (the script's `reset_peak_memory_stats`), after every `Module.half()` and at the
end:
- `fig TAG allocated A requested R slack S`: S = the live blocks' sizes minus their requests rounded up to
  512 (`round_size`), i.e. the unsplit rests;
- `rest TAG`: every live block with a rest of 64 KiB or more: block size, request, its segment's size and
  its offset in the segment (the same on the GPU and in the twin where the placements agree);
- `segs TAG`: the large segments by address, as (offset from the lowest segment in MiB, size in MiB);
- on the GPU only, `stacks`: at the first `Module.to("cuda")`, the 8 MiB + 4 KiB mappings (OpenMP's worker
  stacks, rule 15/17) and the lowest one's address modulo 64 MiB (the twin's `VRAMSCOPE_STACKS_PHASE`);
  `host before-to` / `host after-to`: the anonymous mappings of 1 MiB or more around that `.to()` (mz03
  builds its model on the host after its context exists, a layout `vramscope run` does not model: rule 11),
  then the figures and segments after it (`fig after-to`, `segs after-to`: their `low` aligns the maps).
The twin prints the same `fig`, `rest` and `segs` lines (`vramscope run --gpu h100` of this probe):
`oj82_half_slack_probe_{mv05,mx01,mz03}_twin_h100.out` at the twin's default host layout, and at the draws
that give the H100 records' figures in every phase: mv05 with `VRAMSCOPE_STACKS_PHASE=4`
(`..._mv05_twin_stacks4_h100.out`; 2, 4 and 6 MiB give the record's figure after `.half()`, 0 and the 14
others tried from 8 to 60 do not), mx01 with `VRAMSCOPE_ARENAS_PACKED=9` (`..._mx01_twin_arenas9_h100.out`;
6, 9, 12 and 15 give it, 0, 1 and 3 do not). mz03 moves with neither (stacks phase 0 to 56, arenas 9 and
15): its model is built on the host after its context exists (`FILTERS` go to the GPU first), the layout
`vramscope run` leaves out (rule 11); its `host` lines show where the H100's glibc put the CLVP's CPU
weights against the `.to()` segments."""

import os
import runpy
import sys

import torch

MIB = 1 << 20
script = sys.argv[1]
sys.argv = sys.argv[1:]
TWIN = "vramscope" in sys.modules
state = {"phase": 0, "stacks": False}


def round_size(n):
    return 512 if n < 512 else (n + 511) // 512 * 512


def report(tag):
    snap = torch.cuda.memory_snapshot()
    slack, rests = 0, []
    for seg in snap:
        for off_block in _blocks(seg):
            off, b = off_block
            if b["state"] != "active_allocated":
                continue
            rest = b["size"] - round_size(b["requested_size"])
            slack += rest
            if rest >= 64 << 10:
                rests.append((b["size"], b["requested_size"], seg["total_size"], off))
    requested = torch.cuda.memory_stats().get("requested_bytes.all.current")
    print(f"fig {tag} allocated {torch.cuda.memory_allocated()} requested {requested} slack {slack}")
    for size, req, seg_size, off in sorted(rests):
        print(f"rest {tag} block {size} req {req} seg {seg_size} off {off}")
    large = sorted((s["address"], s["total_size"]) for s in snap if s["segment_type"] == "large")
    if large:
        low = large[0][0]
        print(
            f"segs {tag} low {low:#x} " + " ".join(f"{(a - low) / MIB:.0f}:{n / MIB:.0f}" for a, n in large)
        )
    sys.stdout.flush()


def _blocks(seg):
    off = 0
    for b in seg["blocks"]:
        yield off, b
        off += b["size"]


def host_maps(tag):
    """The process's anonymous mappings of 1 MiB or more (absolute: the segments' `low` aligns them)."""
    with open("/proc/self/maps") as f:
        maps = [line.split() for line in f]
    for parts in maps:
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if hi - lo >= MIB and len(parts) < 6:
            print(f"host {tag} {lo:#x} len {(hi - lo) / MIB:.3f} {parts[1]}")
    sys.stdout.flush()


def stacks():
    with open("/proc/self/maps") as f:
        maps = [line.split() for line in f]
    out = []
    for parts in maps:
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if hi - lo in (8 * MIB, 8 * MIB + 4096) and len(parts) < 6:
            out.append(lo)
    if out:
        low = min(out)
        print(f"stacks n {len(out)} lowest {low:#x} phase_mod64 {(low % (64 * MIB)) / MIB:.2f} MiB")
    else:
        print("stacks none")
    print(f"tasks {len(os.listdir('/proc/self/task'))}")
    sys.stdout.flush()


real_to = torch.nn.Module.to


def to(self, *args, **kwargs):
    if state["stacks"] or not any("cuda" in str(a) for a in list(args) + list(kwargs.values())):
        return real_to(self, *args, **kwargs)
    state["stacks"] = True
    if not TWIN:
        stacks()
        host_maps("before-to")
    out = real_to(self, *args, **kwargs)
    if not TWIN:
        host_maps("after-to")
    report("after-to")
    return out


real_reset = torch.cuda.reset_peak_memory_stats


def reset(*args, **kwargs):
    report(f"phase{state['phase']}")
    state["phase"] += 1
    return real_reset(*args, **kwargs)


real_half = torch.nn.Module.half


def half(self, *args, **kwargs):
    out = real_half(self, *args, **kwargs)
    report(f"after-half{state['phase']}")
    return out


torch.nn.Module.to = to
torch.cuda.reset_peak_memory_stats = reset
torch.nn.Module.half = half
try:
    runpy.run_path(script, run_name="__main__")
finally:
    report("end")
