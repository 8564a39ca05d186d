"""Compare the twin's allocator trace of one rank with the GPU's, entry by entry.

    python3 validation/multi/trace_diff.py VRAMSCOPE CASE RANK TRACE_DIR [N] [--cases CASES.json]
        [--from K] [--all]

TRACE_DIR holds CASE.rank{RANK}.trace.json (one of fixtures/multi/traces_*.tgz unpacked). Runs
`vramscope estimate ... --snapshot` for the case of CASES.json (validation/multi/multi_cases.json
unless given; FSDP and DDP alike) and prints the first entry (action, size, stream) where the two
differ, with the GPU's Python frames around it. `--from K` starts the comparison at entry K of
both; `--all` prints every differing entry (one line each) instead of stopping at the first.
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from answers import case_args  # noqa: E402


def main():
    argv = sys.argv[1:]
    opts = {}
    for flag in ("--cases", "--from"):
        if flag in argv:
            i = argv.index(flag)
            opts[flag] = argv[i + 1]
            del argv[i:i + 2]
    every = "--all" in argv
    argv = [a for a in argv if a != "--all"]
    binary, name, rank, tdir = argv[0], argv[1], int(argv[2]), argv[3]
    n = int(argv[4]) if len(argv) > 4 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    path = opts.get("--cases", os.path.join(here, "multi_cases.json"))
    c = next(c for c in json.load(open(path)) if c["name"] == name)
    tmp = tempfile.mkdtemp()
    json.dump(c["config"], open(os.path.join(tmp, "config.json"), "w"))
    args = case_args(binary, c, n, "h200", os.path.join(tmp, "config.json"))
    if c["parallel"] == "fsdp":
        args += ["--fsdp-rank", str(rank)]
    args += ["--snapshot", os.path.join(tmp, "twin.pickle")]
    p = subprocess.run(args, capture_output=True, text=True)
    if not os.path.exists(os.path.join(tmp, "twin.pickle")):
        sys.exit(f"vramscope estimate failed: {p.stderr.strip()}")
    snap = pickle.load(open(os.path.join(tmp, "twin.pickle"), "rb"))
    tw = [(e["action"], e["size"], e.get("stream", 0)) for e in snap["device_traces"][0]
          if e["action"] in ("alloc", "free_requested")]
    gp = [e for e in json.load(open(os.path.join(tdir, f"{name}.rank{rank}.trace.json")))
          if e[0] in ("alloc", "free_requested")]
    print(f"twin {len(tw)} entries, GPU {len(gp)}")
    start = int(opts.get("--from", 0))
    streams = {}  # the GPU's stream ids, in the twin's numbering (by first use)
    found = False
    for i, (a, g) in enumerate(zip(tw, gp, strict=False)):
        same_stream = streams.setdefault(g[3], a[2]) == a[2]
        if i < start:
            continue
        if a[:2] != (g[0], g[2]) or not same_stream:
            if every:
                print(i, a, (g[0], g[2], g[3]), g[4][:1])
                found = True
                continue
            for j in range(max(0, i - 6), min(i + 10, len(gp))):
                print(j, tw[j] if j < len(tw) else None, (gp[j][0], gp[j][2], gp[j][3]), gp[j][4][:2])
            return
    if not found:
        print("the same actions, sizes and streams")


if __name__ == "__main__":
    main()
