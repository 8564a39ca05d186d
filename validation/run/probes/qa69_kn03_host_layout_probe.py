"""Session 69 probe (helper qa): blind299/kn03's host layout before `.to("cuda")` and its segments' places
at the end of phase 2, in one process, with that process's figures.

kn03 (a LiLT built on the host, then `get_peft_model(...).to("cuda")`) misses -2,752,512 allocated after
`merge_and_unload` + `.half()` against its H100 record (phase 3: 318,373,376; the session-68 slack probe's
process the same). The 11:40 layout probe's process (`fixtures/run/probes/kn68_layout_kn03_h100.txt`)
printed 316,145,152 there: kn03's figure is a draw on the GPU. Which `.to()` chunks (20 and 24 MiB) go
into the freed CPU weights' range above the context (the embedding's 89.42 MiB and the 24 9 MiB weights,
each unmapped as its copy is made: rule 11/17) and which go below B-512 depends on where that range lies
against the 32 MiB grid (rule 3), i.e. on the pool's stacks' phase (rule 17's draw; the twin takes 32 MiB
modulo 64). The twin with that phase set (a validation hack of `_map_pool_layout`'s `stacks_low`) gives
phase 3 318,373,376 (the record) at phases 2-19 modulo 32, 315,620,864 (the twin's answer) at 0 and 20-23,
316,145,152 (the layout probe) at 1 and 24-26; with 15 arenas packed and the phase at 54.1 it has the
layout probe's 109 large segments in its size order. This prints the process's own layout to check that.

    python3 probes/qa69_kn03_host_layout_probe.py blind299/kn03_*.py      (from validation/run; ~20 s)

Prints (B = the 90 MiB segment + 512 MiB: kn03's first segment is the embedding's 90 MiB, a 96 MiB chunk
directly under the context's range, rule 1; the 20 MiB one at B+72, rule 4, checks it):
- `fig` lines: each phase's figures (the script's own report lines too), the twin's as well;
- `host`: /proc/self/maps from B-700 MiB to the highest weight + 256 MiB just before the model's `.to()`
  (each mapping: offset from B, length, perms, a weight's name or file/anon), and the task count (OpenMP's
  workers);
- `freed`: the mappings of 1 MiB or more that `.to()` removed (which weights were mapped by glibc);
- `seg`: every large segment at the end of phase 2 by address (offset from B, MiB, its blocks: A/f and
  size; the 20 MiB one at B+72 holds A1572864 first), then the figures after `.half()`.
The twin prints the `fig` and `seg` lines (its maps are its CPU process's: not printed)."""

import os
import runpy
import sys

import torch

MIB = 1 << 20
script = sys.argv[1]
sys.argv = sys.argv[1:]
TWIN = "vramscope" in sys.modules
state = {"phase": 0, "maps": None, "names": {}, "done": False}


def read_maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def tasks():
    return len(os.listdir("/proc/self/task"))


real_to = torch.nn.Module.to


def to(self, *args, **kwargs):
    if state["done"] or not any("cuda" in str(a) for a in list(args) + list(kwargs.values())):
        return real_to(self, *args, **kwargs)
    state["done"] = True
    names = {}
    for n, p in list(self.named_parameters()) + list(self.named_buffers()):
        st = p.untyped_storage()
        names[st.data_ptr() // 4096 * 4096] = (n, st.nbytes())
    state["names"] = names
    state["maps"] = (read_maps(), tasks())
    out = real_to(self, *args, **kwargs)
    state["after"] = read_maps()
    return out


def segments_line(tag):
    segs = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    # the embedding's 90 MiB segment, the first made: a 96 MiB chunk under the context (B-512)
    emb = [s["address"] for s in segs if s["total_size"] == 90 * MIB]
    if not emb:
        return
    base = emb[0] + 512 * MIB
    print(f"{tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    for seg in segs:
        if seg["segment_type"] != "large":
            continue
        blocks = " ".join(
            f"{'A' if b['state'] == 'active_allocated' else 'f'}{b['size']}" for b in seg["blocks"]
        )
        off = (seg["address"] - base) / MIB
        print(f"  seg B{off:+.0f} {seg['total_size'] / MIB:.0f}: {blocks}")
    if TWIN or state["maps"] is None:
        return
    maps, ntasks = state["maps"]
    names = state["names"]
    top = max((a + n for a, (_, n) in names.items() if n >= MIB), default=base)
    lo_bound, hi_bound = base - 700 * MIB, top + 256 * MIB
    print(f"  host before .to(): tasks {ntasks}, B {base:#x}")
    prev = None
    for lo, hi, perm, name in maps:
        if hi < lo_bound or lo > hi_bound:
            continue
        kind = "file " + name.rsplit("/", 1)[-1] if name.startswith("/") else (name or "anon")
        inside = [names[a][0] for a in sorted(names) if lo <= a < hi and names[a][1] >= MIB]
        if inside:
            kind = f"w {inside[0]}" + (f" (+{len(inside) - 1})" if len(inside) > 1 else "")
        gap = (lo - prev) / MIB if prev is not None else 0.0
        print(f"  host B{(lo - base) / MIB:+10.3f} len {(hi - lo) / MIB:9.3f} gap {gap:8.3f} {perm} {kind}")
        prev = hi
    before = {(lo, hi) for lo, hi, _, name in maps if hi - lo >= MIB and not name.startswith("/")}
    after = {(lo, hi) for lo, hi, _, name in state["after"] if hi - lo >= MIB and not name.startswith("/")}
    for lo, hi in sorted(before - after, reverse=True):
        inside = [names[a][0] for a in sorted(names) if lo <= a < hi]
        print(f"  freed B{(lo - base) / MIB:+10.3f} len {(hi - lo) / MIB:8.3f} {inside[:1]}")


real_reset = torch.cuda.reset_peak_memory_stats


def reset(*args, **kwargs):
    if state["phase"] == 2:
        segments_line("fig phase2-end")
    state["phase"] += 1
    return real_reset(*args, **kwargs)


real_half = torch.nn.Module.half


def half(self, *args, **kwargs):
    out = real_half(self, *args, **kwargs)
    print(f"fig after-half: allocated {torch.cuda.memory_allocated()}")
    return out


torch.nn.Module.to = to
torch.cuda.reset_peak_memory_stats = reset
torch.nn.Module.half = half
runpy.run_path(script, run_name="__main__")
