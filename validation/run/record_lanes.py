"""Plan blind sets' GPU runs as parallel lanes of `record.sh` that fit the GPU's memory together.

    python3 validation/run/record_lanes.py plan MEM_GB [--lanes N] [--gpu h100] SET... > PLAN.txt
    bash validation/run/record_lanes.sh OUTDIR PLAN.txt            (on the GPU machine)

`plan` reads each set's blind answers (`fixtures/run/answers_blindN_GPU.jsonl[.xz]`) for every
script's largest peak reserved, and deals the scripts into at most N lanes (default 4) so that the
lanes' largest peaks add up to at most MEM_GB (decimal GB): each lane runs its scripts one after
another, so only one script per lane holds memory at a time. The scripts, largest first, are cut
into equal runs, one a lane, as many lanes as fit. A script without an answer counts as
`--default` GB (20). A script bigger than MEM_GB alone is refused. One plan line per lane: the
lane's name, then the scripts' paths (relative to validation/run/). Runs on the dev machine: the
fixtures stay there (the GPU machine gets the plan, not the answers).
"""

from __future__ import annotations

import argparse
import glob
import json
import lzma
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "fixtures", "run")


def peaks(set_name, gpu, fixtures=FIXTURES):
    """{script stem: largest peak reserved in bytes} from the set's blind answers ({} if none)."""
    base = os.path.join(fixtures, f"answers_{set_name}_{gpu}.jsonl")
    path = base if os.path.exists(base) else base + ".xz"
    if not os.path.exists(path):
        return {}
    opener = lzma.open if path.endswith(".xz") else open
    out = {}
    with opener(path, "rt") as f:
        for line in f:
            rec = json.loads(line)
            out[rec["script"]] = max(out.get(rec["script"], 0), rec.get("peak_reserved") or 0)
    return out


def deal(sizes, mem, lanes):
    """Lanes (lists of names) for `sizes` ({name: bytes}) whose largest members sum to at most `mem`.

    The scripts, largest first, are cut into equal runs (one a lane), as many lanes as `lanes` allows
    and `mem` holds: a lane's largest is its first. Raises ValueError for a script larger than `mem`."""
    order = sorted(sizes, key=lambda n: (-sizes[n], n))
    if order and sizes[order[0]] > mem:
        raise ValueError(f"{order[0]} peaks at {sizes[order[0]]:,} bytes, more than the {mem:,} given")
    for n in range(min(lanes, len(order)), 0, -1):
        size = -(-len(order) // n)
        cut = [order[i : i + size] for i in range(0, len(order), size)]
        if sum(sizes[lane[0]] for lane in cut) <= mem:
            return cut
    return []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="print the lanes for SETs (blind287 or 287)")
    p.add_argument("mem_gb", type=float, help="GPU memory the lanes may share, decimal GB (H100: 80)")
    p.add_argument("sets", nargs="+")
    p.add_argument("--lanes", type=int, default=4)
    p.add_argument("--gpu", default="h100", help="whose answers give the peaks (h100 or h200)")
    p.add_argument("--default", type=float, default=20.0, help="GB for a script without an answer")
    args = ap.parse_args(argv)
    sizes, paths = {}, {}
    for s in args.sets:
        name = s if s.startswith("blind") else f"blind{s}"
        found = sorted(glob.glob(os.path.join(HERE, name, "*.py")))
        if not found:
            ap.error(f"no scripts in validation/run/{name}/ (expected SET as blind287 or 287)")
        known = peaks(name, args.gpu)
        for f in found:
            stem = os.path.splitext(os.path.basename(f))[0]
            sizes[stem] = known.get(stem, int(args.default * 1e9))
            paths[stem] = os.path.relpath(f, HERE)
    try:
        lanes = deal(sizes, int(args.mem_gb * 1e9), args.lanes)
    except ValueError as e:
        ap.error(str(e))
    for i, lane in enumerate(lanes):
        print(f"lane{i} " + " ".join(paths[n] for n in lane))
    biggest = sum(sizes[lane[0]] for lane in lanes)
    print(f"# {len(sizes)} scripts in {len(lanes)} lanes; the lanes' largest peaks add to {biggest / 1e9:.1f} GB", file=sys.stderr)


if __name__ == "__main__":
    main()
