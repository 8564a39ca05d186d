"""Gather `conv_workspace.sh`'s measurements into the fixture and the twin's table.

    python3 conv_workspace_table.py CONV_ALL.jsonl[.gz|.xz] FIXTURE.jsonl[.xz] TABLE.txt

CONV_ALL is every line `conv_workspace.py` wrote (both modes, any order of
files), and may hold lines of an earlier FIXTURE too: a later part of
`conv_workspace.sh` (CONV_PART=images2) is added to the fixture by giving both,
e.g. `xzcat FIXTURE.jsonl.xz; zcat NEW.jsonl.gz`. FIXTURE (fixtures/ops/conv_workspace_h100.jsonl.xz,
written xz-compressed when its name ends in .xz, as `xz -9e` would) gets one line per
problem, dtype and op: the workspace at each measured batch and, from the
`pressure` runs, the sizes `try_configs` tried in order until one fitted
(for the fixtures' problem, hidden 384).
TABLE (crates/engine/src/ops/cudnn_conv_h100.txt) holds the workspaces as
runs of batches over which they are affine, exactly: every measured batch is
reproduced, nothing between measured batches is claimed.
"""
import gzip
import json
import lzma
import sys
from collections import defaultdict


def read(path):
    opener = gzip.open if path.endswith(".gz") else lzma.open if path.endswith(".xz") else open
    f = opener(path, "rt")
    head = None
    sizes, tried, env = defaultdict(dict), defaultdict(dict), {}
    for line in f:
        d = json.loads(line)
        if "problem" in d:
            head = d["problem"]
            env = {k: head[k] for k in ("torch", "cudnn", "gpu", "capability")}
            continue
        if "weight" in d:  # a line of an earlier FIXTURE
            key = (d["op"], d["dtype"], d["weight"][0], d["weight"][2], d["image"][0])
            sizes[key].update({b: w for b, w in d["workspace"]})
            tried[key].update({b: t for b, t in d["tried"]})
            env = {k: d[k] for k in ("torch", "cudnn", "gpu", "capability")}
            continue
        key = (d["op"], head["dtype"], head["k"], head["patch"], head["image"])
        if head["mode"] == "sizes":
            sizes[key][d["batch"]] = d["workspace"]
        else:
            seq = [[a, s] for a, s in d["trace"] if a in ("oom", "alloc")]
            if seq and seq[0] == ["alloc", d["result_bytes"]]:
                seq = seq[1:]  # the result, allocated before the plan runs
            if d["error"] is None:  # else the result itself did not fit
                tried[key][d["batch"]] = seq
    return env, sizes, tried


def runs(points):
    """Maximal runs (b0, b1, step, w0, slope) over which w is affine in b."""
    out = []
    bs = sorted(points)
    i = 0
    while i < len(bs):
        j = i
        step = bs[i + 1] - bs[i] if i + 1 < len(bs) else 1
        slope = (points[bs[i + 1]] - points[bs[i]]) // step if i + 1 < len(bs) else 0
        while (j + 1 < len(bs) and bs[j + 1] - bs[j] == step
               and points[bs[j + 1]] - points[bs[j]] == slope * step):
            j += 1
        if j == i:
            step, slope = 1, 0
        out.append((bs[i], bs[j], step, points[bs[i]], slope))
        i = j + 1
    return out


def main():
    src, fixture, table = sys.argv[1:4]
    env, sizes, tried = read(src)
    xz = fixture.endswith(".xz")
    with lzma.open(fixture, "wt", preset=9 | lzma.PRESET_EXTREME) if xz else open(fixture, "w") as f:
        for key in sorted(sizes):
            op, dt, k, p, img = key
            f.write(json.dumps(dict(op=op, dtype=dt, weight=[k, 3, p, p], image=[img, img], stride=p, **env,
                                    workspace=sorted(sizes[key].items()),
                                    # the fixtures' problem only, to keep the file small
                                    tried=sorted(tried.get(key, {}).items()) if k == 384 else []),
                               separators=(",", ":")) + "\n")
    n = 0
    with open(table, "w") as f:
        f.write("# cuDNN's workspace for a convolution of (N, C, H, W) by (K, C, R, S) at stride\n"
                f"# (R, S), padding 0: {env['gpu']}, torch {env['torch']}, cuDNN {env['cudnn']}.\n"
                "# Made by validation/conv_workspace_table.py from validation/conv_workspace.sh's\n"
                "# measurements (fixtures/ops/conv_workspace_h100.jsonl.xz). A line: for batches\n"
                "# N = first, first+step, ..., last the workspace is bytes + slope * (N - first).\n"
                "# op dtype K C R S H W first last step bytes slope\n")
        for key in sorted(sizes):
            op, dt, k, p, img = key
            for b0, b1, step, w0, slope in runs(sizes[key]):
                f.write(f"{op} {dt} {k} 3 {p} {p} {img} {img} {b0} {b1} {step} {w0} {slope}\n")
                n += 1
    print(f"{len(sizes)} problems, {sum(map(len, sizes.values()))} batches, {n} runs")


if __name__ == "__main__":
    main()
