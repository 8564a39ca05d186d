"""How the GPU laid out the first segments of each NCCL process (for docs/driver-placement.md).

    python3 validation/multi/segment_runs.py TRACE.json [...]

Each TRACE.json is one of multi_cases.py's traces ([action, addr, size, stream, frames] per entry;
fixtures/multi/traces_*.tar.xz unpacked). Prints per trace the first segment's address modulo 32 MiB,
how many segments from the first on each start where the one before ends (a run upward, as best fit
at the low end of one large hole gives; the single-process rules of `driver_va.rs` put each new chunk
below the last instead), and the segments made below 0x7000_0000_0000; then the totals.
"""

import json
import sys

MIB = 1 << 20


def layout(trace):
    segs = [(e[1], e[2]) for e in trace if e[0] == "segment_alloc"]
    run = 1
    while run < len(segs) and segs[run][0] == segs[run - 1][0] + segs[run - 1][1]:
        run += 1
    low = sum(a < 0x7000_0000_0000 for a, _ in segs)
    return segs[0][0] % (32 * MIB) // MIB, run, len(segs), low


def main():
    mods, runs = {}, []
    for path in sys.argv[1:]:
        mod, run, n, low = layout(json.load(open(path)))
        mods[mod] = mods.get(mod, 0) + 1
        runs.append(run)
        print(f"{path}: first segment at {mod} MiB mod 32, {run} of {n} segments upward from it, {low} low")
    print(
        f"{len(runs)} traces; first segment mod 32 MiB: {mods}; upward runs {min(runs)} to {max(runs)} "
        f"segments (median {sorted(runs)[len(runs) // 2]})"
    )


if __name__ == "__main__":
    main()
