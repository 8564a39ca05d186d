"""Compare the twin's answers with what the GPUs recorded, every rank's every phase.

    python3 validation/multi/compare.py fixtures/multi/multi_h200_n2.jsonl ANSWERS.jsonl

Prints per case: phases within 0.5% peak allocated and 2% peak reserved, phases exact in all four
figures (allocated, peak allocated, reserved, peak reserved), and the worst phase.
"""
import json
import sys
from collections import defaultdict

K = ["allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "peak_reserved_bytes"]


def main():
    gpu = [json.loads(x) for x in open(sys.argv[1])]
    ans = [json.loads(x) for x in open(sys.argv[2])]
    A = {(a["case"], a["rank"], a["phase"]): a for a in ans if "phase" in a}
    unsupported = {a["case"]: a["unsupported"] for a in ans if "unsupported" in a}
    res = defaultdict(list)
    for g in gpu:
        if g["phase"] in ("init", "error"):
            continue
        a = A.get((g["case"], g["rank"], g["phase"]))
        if a is None:
            continue
        ea = (a["peak_allocated_bytes"] - g["peak_allocated_bytes"]) / g["peak_allocated_bytes"]
        er = (a["peak_reserved_bytes"] - g["peak_reserved_bytes"]) / g["peak_reserved_bytes"]
        res[g["case"]].append((g["rank"], g["phase"], ea, er, all(a[k] == g[k] for k in K)))
    tot = [0, 0, 0]
    for c, v in res.items():
        ok = sum(abs(x[2]) <= 0.005 and abs(x[3]) <= 0.02 for x in v)
        ex = sum(x[4] for x in v)
        w = max(v, key=lambda x: (abs(x[2]), abs(x[3])))
        tot = [tot[0] + ok, tot[1] + ex, tot[2] + len(v)]
        print(f"{c:32s} {ok:3d}/{len(v)} within, {ex:3d} exact; worst {w[1]} rank {w[0]}: "
              f"allocated {w[2] * 100:+.3f}%, reserved {w[3] * 100:+.3f}%")
    for c, m in unsupported.items():
        print(f"{c:32s} not modelled: {m}")
    print(f"total: {tot[0]}/{tot[2]} rank-phases within tolerance, {tot[1]} exact")


if __name__ == "__main__":
    main()
