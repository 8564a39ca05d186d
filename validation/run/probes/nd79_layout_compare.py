"""Compare where two runs' segments lie (CPU): nd79_layout_at_end.py outputs (.json) or memory snapshots
(.pickle / .pickle.xz: the history's or the twin's `vramscope run --snapshot`), each read as its segments
(address, size) at the end. Prints both, highest first, as MiB below each run's highest segment end,
with a mark where the size or the place differs; then each run's phase figures where a .json has them.

    python validation/run/probes/nd79_layout_compare.py plain.json hist.json
"""

import json
import lzma
import pickle
import sys


def load(path):
    if path.endswith(".json"):
        d = json.load(open(path))
        return [(s["address"], s["total_size"]) for s in d["segments"]], d.get("phases")
    op = lzma.open if path.endswith(".xz") else open
    with op(path, "rb") as f:
        snap = pickle.load(f)
    return [(s["address"], s["total_size"]) for s in snap["segments"]], None


def main():
    (a, pa), (b, pb) = load(sys.argv[1]), load(sys.argv[2])
    rows = []
    for segs in (a, b):
        top = max(x + n for x, n in segs)
        rows.append(sorted(((top - x - n) / 2**20, n >> 20) for x, n in segs))
    print(f"{len(a)} and {len(b)} segments; MiB below the highest end (end offset, size MiB)")
    for k in range(max(map(len, rows))):
        x = rows[0][k] if k < len(rows[0]) else None
        y = rows[1][k] if k < len(rows[1]) else None
        fx = f"{x[0]:9.1f} {x[1]:4d}" if x else ""
        fy = f"{y[0]:9.1f} {y[1]:4d}" if y else ""
        print(f"{k:4d} {fx:15s} | {fy:15s}{'' if x == y else '  <'}")
    for name, ph in ((sys.argv[1], pa), (sys.argv[2], pb)):
        if ph:
            print(name, [(p["peak_allocated"], p["reserved"]) for p in ph])


if __name__ == "__main__":
    main()
