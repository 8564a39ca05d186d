"""Session 75 probe (helper lv): blind333/lv01's host layout before `.to("cuda")`, its segments' places
after phase 0 and 1, and its phase figures, in one process.

lv01 (an encoder classifier built on the host, `set_per_process_memory_fraction(0.1)` with
`garbage_collection_threshold:0.5,max_split_size_mb:96`) misses phase 1's reserved by +1,044,381,696
against its H100 record. Its H100 history (fixtures/run/history_lv01_s74_h100.pickle.xz) replays EXACT
through the allocator twin at the H100's addresses, and the twin's own history (the same script under
`vramscope run`) replays EXACT at the twin's: the allocator's rules (the fraction's limit from the total
85,017,493,504, the threshold's collections) are the GPU's. Both histories hold the same requests in the
same order up to the first collection that differs (entry 2,499); before it, from entry 1,161, blocks of
equal size land in other segments (the lower address wins a tie), because the segments lie elsewhere:
from the 4th segment (the first 20 MiB `.to()` chunk) the twin's offsets from the first segment differ
(H100 B+1600, twin B+1632 at the median stacks' phase). Which `.to()` chunks go into the freed weights'
range and into rule 17's 64 MiB gaps between OpenMP's arenas (11 workers took a share of `pos`'s
393,216-element `zeros`) follows the stacks' phase, which worker's arena took glibc's hint (a race) and
which weights glibc mapped: draws of the process. This prints them, to check against the twin's rule 17.

    python3 probes/lv75_lv01_host_layout_probe.py blind333/lv01_*.py      (from validation/run; ~20 s)

Run it twice on one machine: two processes that print different `fig phase1` lines make phase 1's
reserved figure a draw of the process.

Prints (B = the first segment, the embedding's 94 MiB (98,566,144-byte) one, + 512 MiB: a 96 MiB chunk
directly under the context's range, rule 1; the first 20 MiB segment at B+72, rule 4, checks it):
- `fig` lines: each phase's figures (the script's own report lines too), the twin's as well;
- `host`: /proc/self/maps from B-700 MiB to the highest weight + 256 MiB just before the model's `.to()`
  (offset from B, length, perms, a weight's name or file/anon) and the task count (OpenMP's workers);
- `freed`: the mappings of 1 MiB or more that `.to()` removed (which weights glibc mapped);
- `seg`: every segment in the order made at the end of phases 0 and 1 (offset from B, MiB).
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
    # (here, after the script set PYTORCH_CUDA_ALLOC_CONF and CUDA started: the twin reads the settings
    # at a history call made before its first allocation, so a call at the top would lose them)
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None, stacks="python", max_entries=100_000
    )
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
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    made = [e for e in trace if e["action"] == "segment_alloc"]
    if not made:
        return None
    base = made[0]["addr"] + 512 * MIB
    print(f"fig {tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    print(
        f"  seg {tag}: " + " ".join(f"{e['size'] / MIB:.0f}@B{(e['addr'] - base) / MIB:+.0f}" for e in made)
    )
    return base


def host_lines(base):
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
    if state["phase"] in (0, 1):
        base = segments_line(f"phase{state['phase']}-end")
        if state["phase"] == 0 and base is not None and not TWIN and state["maps"] is not None:
            host_lines(base)
    state["phase"] += 1
    return real_reset(*args, **kwargs)


torch.nn.Module.to = to
torch.cuda.reset_peak_memory_stats = reset
runpy.run_path(script, run_name="__main__")
