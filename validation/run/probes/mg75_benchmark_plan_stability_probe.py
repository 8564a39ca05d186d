"""Session 75 probe (helper mg): is cuDNN benchmark mode's timed plan (its workspace) the same from run to
run, and does a lone worker pick what four workers sharing the GPU pick?

blind338/ma01's H100 per-op truth (session 75, OPS_TRUTH_ALL) shows the timed plan's workspace of 18
of its 85 benchmark-mode problems (same operands as the sweep's) differing from
`cudnn_benchmark_sweep_blind338_h100.tar.xz` (4 workers of `conv_sweep.py run-benchmark` on one GPU),
e.g. wgrad (4, 256, 64, 64) x (256, 2048, 3, 3) dilation 36: 18,875,679 bytes in the script, 1,280 in
the sweep; with the script's own plans the twin answers ma01's 5 phases exactly (1 of 5 with the
sweep's). lx05 and blind335's sweep: 7 of 67 differ. The timing that picks the plan (`benchmark_plans`,
cudnn/Conv_v8.cpp) may be skewed by the other workers' kernels, or be too close to call between plans.

This runs `conv_sweep.py run-benchmark` over `benchmark_problems_blind338.json` (110 items) and
`benchmark_problems_blind335.json` (23) three times, one after another: one worker (A), one worker again (B),
four workers at once (C), each worker a process of its own, into $OUT/mg75/{A,B,C}_{338,335}/. Then prints,
per pair of runs, how many (item, op) timed plans agree, and each disagreement. Plain python3 from
validation/run, about 3 minutes, under 10 GB.

`--twin` prints the twin's answer instead: the plan workspaces it takes (`cudnn_benchmark_h200.json.xz`,
the same for every run by construction), in the same format, from the committed 4-worker sweeps."""

import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
run_dir = os.path.dirname(here)
root = os.path.dirname(os.path.dirname(run_dir))
SETS = ("338", "335")


def plans(d):
    """{(index, op): the second call's bytes beyond its outputs} of a run-benchmark OUTDIR: the timed plan's
    workspace (the sweep's operands are in the problem's layout: no copies)."""
    out = {}
    for f in glob.glob(os.path.join(d, "**", "w*.jsonl"), recursive=True):
        for line in open(f):
            r = json.loads(line)
            for op, calls in r["ops"].items():
                if len(calls) > 1:
                    c = calls[1]
                    out[(r["index"], op)] = c["requested"] - sum(c["new"])
    return out


def compare(name_a, a, name_b, b):
    both = sorted(set(a) & set(b))
    diff = [k for k in both if a[k] != b[k]]
    print(f"MG75 {name_a} vs {name_b}: {len(both) - len(diff)} of {len(both)} agree")
    for k in diff:
        print(f"MG75   item {k[0]} {k[1]}: {name_a} {a[k]} {name_b} {b[k]}")


def sweep(problems, outdir, workers):
    procs = [
        subprocess.Popen(
            [sys.executable, "conv_sweep.py", "run-benchmark", problems, outdir, "600", str(w), str(workers)],
            cwd=run_dir,
        )
        for w in range(workers)
    ]
    for p in procs:
        p.wait()


def committed(s):
    """The committed 4-worker sweep's plans of set `s` (session 74/75's GPU calls)."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(
            os.path.join(root, f"fixtures/run/cudnn_benchmark_sweep_blind{s}_h100.tar.xz")
        ) as t:
            t.extractall(tmp)
        return plans(tmp)


def main():
    if "--twin" in sys.argv:
        # the twin takes the committed sweep's plan for every run (its table holds them)
        for s in SETS:
            swept = committed(s)
            print(f"MG75 set {s}: {len(swept)} (item, op) plans, each run the table's")
            for a, b in (("A", "B"), ("A", "C"), ("B", "C"), ("C", "sweep")):
                compare(f"{a}_{s}", swept, f"{b}_{s}", swept)
        return
    out = os.path.join(os.environ.get("OUT", "/tmp"), "mg75")
    for s in SETS:
        problems = os.path.join(run_dir, f"benchmark_problems_blind{s}.json")
        runs = {}
        for tag, workers in (("A", 1), ("B", 1), ("C", 4)):
            d = os.path.join(out, f"{tag}_{s}")
            sweep(problems, d, workers)
            runs[tag] = plans(d)
            print(f"MG75 run {tag} set {s}: {len(runs[tag])} (item, op) plans", flush=True)
        runs["sweep"] = committed(s)
        for a, b in (("A", "B"), ("A", "C"), ("B", "C"), ("C", "sweep")):
            compare(f"{a}_{s}", runs[a], f"{b}_{s}", runs[b])


if __name__ == "__main__":
    main()
