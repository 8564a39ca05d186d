"""At each phase report of a validation script: the caching allocator's blocks and segments, pool by pool.

    python3 probes/m274_phase_slack_s62.py SCRIPT [ARGS...]                  (from validation/run; the GPU)
    vramscope run --gpu h100 probes/m274_phase_slack_s62.py SCRIPT [ARGS...]  (the twin: the same lines)

SCRIPT runs in this process as `__main__` (runpy, as record.py runs it). Every call of
`torch.cuda.reset_peak_memory_stats()` (the scripts' `report(tag)` makes one right after printing its
figures) first prints one `slack` line from `torch.cuda.memory_snapshot()`, and one more at the end:

    slack N pool P: segments S bytes B | active A requested R unsplit U | unsplit blocks (size, req) x k, ...

per pool (large, small): the segments and their bytes, the active blocks' bytes (the allocated figure) and
requests, and U = A - R rounded per block beyond 512 (the rest of a block left unsplit: a large-pool block's
rest of 1 MiB or less is kept in it, `should_split`); then `segs P: sizes` (the large pool's segment sizes in
address order). Session 62, helper m274: blind274/jo02, jo05 and blind275/jp01 miss the H100's allocated
figure by 0.4-5.9 MB (jp04 its phase-2 peak by 1 MiB, jo02 the reserved by 54 MiB) while the records'
`requested` figure (the live requests' bytes at the phase's end) equals the twin's in each of those
phases: the same requests are live, held in other blocks (at jp04's peak not recorded). The twin holds
16-24 MB of unsplit rests there; where the GPU's U is the twin's less the allocated figure's difference,
the miss is placement (which free block a request took: best fit, ties broken by address, so the
segments' address order, `segs`, decides), and `block_diff.py --place` on a memory history (history.py)
finds the first allocation placed otherwise. One process, as long as SCRIPT (10-30 s on the H100). The
twin's lines for the four: m274_phase_slack_s62_twin_h100.txt.
"""

import os
import runpy
import sys

_state = {"n": 0}


def _summary(torch, tag):
    snap = torch.cuda.memory_snapshot()
    for pool in ("large", "small"):
        segs = [s for s in snap if s["segment_type"] == pool]
        act = req = uns = 0
        pairs = {}
        for s in segs:
            for b in s["blocks"]:
                if b["state"] != "active_allocated":
                    continue
                r = b.get("requested_size", b["size"])
                act += b["size"]
                req += r
                rounded = max(512, -(-r // 512) * 512)
                if b["size"] > rounded:
                    uns += b["size"] - rounded
                    pairs[(b["size"], r)] = pairs.get((b["size"], r), 0) + 1
        top = sorted(pairs.items(), key=lambda kv: -(kv[0][0] - kv[0][1]) * kv[1])[:40]
        print(
            f"slack {tag} pool {pool}: segments {len(segs)} bytes {sum(s['total_size'] for s in segs)} | "
            f"active {act} requested {req} unsplit {uns} | unsplit blocks "
            + ", ".join(f"({a}, {r}) x {c}" for (a, r), c in top),
            flush=True,
        )
    large = sorted((s["address"], s["total_size"]) for s in snap if s["segment_type"] == "large")
    print(f"segs {tag} large: {[t for _, t in large]}", flush=True)


def _wrap(torch):
    reset = torch.cuda.reset_peak_memory_stats

    def wrapped(*args, **kwargs):
        _summary(torch, _state["n"])
        _state["n"] += 1
        return reset(*args, **kwargs)

    torch.cuda.reset_peak_memory_stats = wrapped


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    import torch  # imported first (no CUDA work): the script's own `import torch` gets this module

    _wrap(torch)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        _summary(torch, "end")


if __name__ == "__main__":
    main()
