"""cuDNN benchmark mode's timed plans in a script's own GPU run against a `conv_sweep.py run-benchmark` sweep.

    python benchmark_plans.py SCRIPT_OPS.jsonl SWEEP [--json OUT.json]

SCRIPT_OPS.jsonl is ops_truth.py's OPS_TRUTH_ALL output of a script on the GPU (a `.jsonl` path, or
ARCHIVE.tar.xz:MEMBER_SUFFIX for one inside an archive); SWEEP a run-benchmark OUTDIR or its archive
(`fixtures/run/cudnn_benchmark_sweep_*.tar.xz`). `run_single_conv` (cudnn/Conv_v8.cpp) times the
candidate plans at a problem's first call and keeps the fastest in `benchmark_cache`; every later call
allocates only that plan's workspace. So the timed plan's workspace is what a call finding the plan
cached allocates beyond its outputs: the sweep's second call of each op, the script's second
`convolution` of a problem, and its first `convolution_backward[0]` (dgrad) / `[1]` (wgrad) (ops_truth.py
calls them after the full backward, which timed the plans). Calls whose arguments (sizes, strides, dtypes,
parameters, output mask) equal the sweep item's are compared: their operands are already in the plan's
layout, so the bytes are the workspace alone. Printed: how many agree, and each that does not
(session 75: blind338/ma01's run against the 4-worker sweep of its problems, 18 of 85 differ).
`--json` writes the script's disagreeing plans as {"op|dtype|input|weight|stride|padding|dilation": bytes}.
"""

import collections
import glob
import io
import json
import os
import sys
import tarfile


def _lines(path):
    """The text lines of `path`, or of the member of ARCHIVE:SUFFIX whose name ends in SUFFIX."""
    if ".tar.xz:" in path:
        archive, suffix = path.split(".tar.xz:", 1)
        with tarfile.open(archive + ".tar.xz") as tar:
            (member,) = [m for m in tar.getmembers() if m.name.endswith(suffix)]
            return io.TextIOWrapper(tar.extractfile(member)).read().splitlines()
    return open(path).read().splitlines()


def _sweep_lines(sweep):
    """Every w*.jsonl line of a run-benchmark OUTDIR or archive."""
    if os.path.isdir(sweep):
        return [
            line
            for f in sorted(glob.glob(os.path.join(sweep, "**", "w*.jsonl"), recursive=True))
            for line in open(f)
        ]
    out = []
    with tarfile.open(sweep) as tar:
        for m in tar.getmembers():
            if m.isfile() and os.path.basename(m.name).startswith("w") and m.name.endswith(".jsonl"):
                out += io.TextIOWrapper(tar.extractfile(m)).read().splitlines()
    return out


def _extra(rec):
    return rec["requested"] - sum(rec["new"])


def sweep_plans(sweep):
    """{(op, args as JSON): the second call's bytes beyond its outputs} of a sweep."""
    out = {}
    for line in _sweep_lines(sweep):
        r = json.loads(line)
        for op, calls in r.get("ops", {}).items():
            if len(calls) > 1:
                out[(op, json.dumps(calls[1]["args"]))] = _extra(calls[1])
    return out


#: ops_truth.py's op names of the calls that find a plan cached, by the sweep's op
KINDS = {"convolution": "forward", "convolution_backward[0]": "dgrad", "convolution_backward[1]": "wgrad"}


def script_plans(lines):
    """{(op, args as the sweep writes them): bytes beyond the outputs} of a script's calls that find the
    plan cached: a forward's second call, a backward's first split call. The sweep passes no bias sizes
    and the one-op output mask."""
    seen = collections.Counter()
    out = {}
    for line in lines:
        r = json.loads(line)
        kind = KINDS.get(r.get("op"))
        if kind is None:
            continue
        args = r["args"]
        if kind != "forward":
            args = [*args[:3], None, *args[4:-1], [kind == "dgrad", kind == "wgrad", False]]
        key = (kind, json.dumps(args))
        seen[key] += 1
        if seen[key] == (2 if kind == "forward" else 1):
            out[key] = _extra(r)
    return out


def compare(script, swept):
    """(agreeing count, [(op, args, script bytes, sweep bytes)] of the calls both hold that differ)."""
    both = [k for k in script if k in swept]
    diff = [(k[0], json.loads(k[1]), script[k], swept[k]) for k in both if script[k] != swept[k]]
    return len(both) - len(diff), diff


def _name(op, args):
    x, w = (args[0], args[1]) if op == "forward" else (args[1], args[2])
    stride, padding, dilation = (args[3:6]) if op == "forward" else (args[4:7])
    return "|".join(map(str, (op, x[2], x[0], w[0], stride, padding, dilation)))


def main(argv):
    script = script_plans(_lines(argv[0]))
    agree, diff = compare(script, sweep_plans(argv[1]))
    print(f"{agree} of {agree + len(diff)} timed plans agree ({len(script)} in the script's run)")
    for op, args, s, w in diff:
        print(f"  {_name(op, args)}: script {s}, sweep {w}")
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump({_name(op, args): s for op, args, s, _ in diff}, f, indent=0)


if __name__ == "__main__":
    main(sys.argv[1:])
