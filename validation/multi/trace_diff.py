"""Compare the twin's allocator trace of one rank with the GPU's, entry by entry.

    python3 validation/multi/trace_diff.py VRAMSCOPE CASE RANK TRACE_DIR [N]

TRACE_DIR holds CASE.rank{RANK}.trace.json (fixtures/multi/traces_h200_n2.tgz unpacked). Runs
`vramscope estimate ... --snapshot` for the case of validation/multi/multi_cases.json and prints
the first entry (action, size) where the two differ, with the GPU's Python frames around it.
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile


def main():
    binary, name, rank, tdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    c = next(c for c in json.load(open(os.path.join(here, "multi_cases.json"))) if c["name"] == name)
    tmp = tempfile.mkdtemp()
    json.dump(c["config"], open(os.path.join(tmp, "config.json"), "w"))
    args = [binary, "estimate", "--config", os.path.join(tmp, "config.json"), "--mode", "train",
            "--batch", str(c["batch"]), "--seq", str(c["seq"]), "--weights", c.get("weights", "fp32"),
            "--gpu", "h200", "--fsdp", str(n), "--fsdp-rank", str(rank),
            "--snapshot", os.path.join(tmp, "twin.pickle")]
    if c.get("checkpointing"):
        args.append("--checkpointing")
    if c.get("param_dtype"):
        args += ["--fsdp-param-dtype", c["param_dtype"]]
    if not c.get("reshard", True):
        args.append("--fsdp-no-reshard")
    subprocess.run(args, capture_output=True)
    snap = pickle.load(open(os.path.join(tmp, "twin.pickle"), "rb"))
    tw = [(e["action"], e["size"], e.get("stream", 0)) for e in snap["device_traces"][0]
          if e["action"] in ("alloc", "free_requested")]
    gp = [e for e in json.load(open(os.path.join(tdir, f"{name}.rank{rank}.trace.json")))
          if e[0] in ("alloc", "free_requested")]
    print(f"twin {len(tw)} entries, GPU {len(gp)}")
    streams = {}  # the GPU's stream ids, in the twin's numbering (by first use)
    for i, (a, g) in enumerate(zip(tw, gp, strict=False)):
        same_stream = streams.setdefault(g[3], a[2]) == a[2]
        if a[:2] != (g[0], g[2]) or not same_stream:
            for j in range(max(0, i - 6), min(i + 10, len(gp))):
                print(j, tw[j] if j < len(tw) else None, (gp[j][0], gp[j][2], gp[j][3]), gp[j][4][:2])
            return
    print("the same actions, sizes and streams")


if __name__ == "__main__":
    main()
