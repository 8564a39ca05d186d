"""blind338/ma01's timed cuDNN plans: each benchmark sweep's against the twin's table and ma01's own run.

    python mq78_ma01_plans_compare.py SWEEP_DIR [SWEEP_DIR ...]     (on the dev machine, CPU only)

SWEEP_DIR is a `conv_sweep.py run-benchmark validation/run/benchmark_problems_mq78_ma01.json DIR ...`
output (its w*.jsonl). For each problem and operation the line gives the timed plan's workspace (the
second call's requested bytes beyond its outputs, as conv_benchmark_table.py reads a sweep) in every
sweep, the table's `plan_workspace` (python/vramscope/cudnn_benchmark_h200.json.xz: session 74's sweep,
`cudnn_benchmark_sweep_blind338_h100.tar.xz`, 4 workers at once) and that of ma01's own H100 run
(`truth_misses_s75_h100.tar.xz`, its later calls). Session 78 (helper mq): the table and ma01's run
disagree in 20 of the 88 bf16 batch-4 operations whose table entry has a plan (8 of 30 forwards, whose
search workspaces all agree: the same plans were timed); with ma01's plans the twin answers all 25 of
ma01's H100 figures (5 phases x allocated, peaks, reserved, requested) exactly, with the table's 12.
The dgrad of (19, 256, 1, 1) differs by a layout copy, not a plan.
Does a sweep choose the same plan twice, and one worker as four at once?
"""

import glob
import json
import lzma
import os
import sys
import tarfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
TABLE = os.path.join(ROOT, "python", "vramscope", "cudnn_benchmark_h200.json.xz")
TRUTH = os.path.join(ROOT, "fixtures", "run", "truth_misses_s75_h100.tar.xz")


def key(op, x, w, stride, padding, dilation, groups, cl):
    return (op, tuple(x), tuple(w), tuple(stride), tuple(padding), tuple(dilation), groups, cl)


def truth_plans():
    """ma01's own run: each bf16 problem's workspace at its later calls (the timed plan's)."""
    out = {}
    with tarfile.open(TRUTH) as tar:
        member = next(m for m in tar.getmembers() if "/ma01_" in m.name and m.name.endswith(".jsonl"))
        for line in tar.extractfile(member):
            d = json.loads(line)
            a, op = d.get("args"), d.get("op")
            if op == "convolution" and not a[6]:
                x, w, st, pad, dil, g, kind = a[0], a[1], a[3], a[4], a[5], a[8], "forward"
            elif op in ("convolution_backward[0]", "convolution_backward[1]"):
                x, w, st, pad, dil, g = a[1], a[2], a[4], a[5], a[6], a[9]
                kind = "dgrad" if op.endswith("[0]") else "wgrad"
            else:
                continue
            if x[2] != "bfloat16":
                continue
            k = key(kind, x[0], w[0], st, pad, dil, g, x[1][1] == 1)
            out.setdefault(k, []).append(d["requested"] - sum(d["new"]))
    return {k: sorted(set(v[1:])) for k, v in out.items() if len(v) > 1}


def main(dirs):
    table = {}
    for e in json.load(lzma.open(TABLE))["problems"]:
        if "plan_workspace" in e:
            k = key(
                e["op"],
                e["input"],
                e["weight"],
                e["stride"],
                e["padding"],
                e["dilation"],
                e["groups"],
                e["channels_last"],
            )
            table[(e["dtype"], k)] = e["plan_workspace"]
    truth = truth_plans()
    sweeps = []
    for d in dirs:
        plans = {}
        for path in glob.glob(os.path.join(d, "w*.jsonl")):
            for line in open(path):
                r = json.loads(line)
                it = r["item"]
                for op, (_, second) in r["ops"].items():
                    k = key(
                        op,
                        [it["n"], *it["x"]],
                        it["w"],
                        it["stride"],
                        it["padding"],
                        it["dilation"],
                        it["groups"],
                        it["layout"] == "nhwc",
                    )
                    plans[k] = second["requested"] - sum(second["new"])
        sweeps.append(plans)
    print("op      input                 weight              dilation  table  ma01-run  sweeps")
    for k in sorted(set().union(*sweeps) if sweeps else truth):
        t, own = table.get(("bfloat16", k)), truth.get(k)
        flag = "" if own is None or own == [t] else "  <- differ"
        seen = [s.get(k) for s in sweeps]
        print(f"{k[0]:7} {k[1]!s:21} {k[2]!s:19} {k[5]!s:9} {t!s:>6} {own!s:>9}  {seen}{flag}")


if __name__ == "__main__":
    main(sys.argv[1:])
