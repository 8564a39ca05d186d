"""How well the nearest measured problem stands in for an unmeasured cuDNN convolution.

    python validation/run/conv_nearest_loo.py [crates/engine/src/ops/cudnn_conv_problems.txt.xz]

Two leave-out tests of `cudnn_conv_nearest_workspace` (crates/engine/src/ops/conv.rs), each
against assuming no workspace:

- "same kind": each line of the problem table (one problem at every batch measured) is left out
  in turn and each of its batches predicted from the other lines of its kind (same operation
  graph, dtype, layout, transposition, weight, stride, padding, dilation, output padding, groups
  and input channels): the nearest in batch and spatial size, its bytes scaled by batch x spatial
  size. Over every entry whose kind holds another line.
- "same kernel": each kind is left out whole and its entries predicted from the other kinds of
  its kernel (the kind with other channels; groups as none, depthwise or other): the nearest in
  batch, spatial size, input and output channels, its bytes also scaled by the square root of
  input x output channels. Over every entry whose kernel holds another kind.
- "same shape": each kernel is left out whole and its entries predicted, as in "same kernel", from
  the other kernels of its shape (the kernel with other padding and dilation). Over every entry
  whose shape holds another kernel.

Distances are sums of absolute log ratios; ties go to the smaller batch, then the smaller sizes
and channels. "nearest" scales the neighbour's bytes by the ratio of batch x spatial size,
"growth" (the rule since session 49) by that ratio raised to the neighbour line's own growth with
the batch (`line_growth`). Prints how many predictions are exact, within 1 MiB, the mean absolute
error and the 99th percentile of the absolute error.
"""

import collections
import lzma
import math
import os
import sys

import numpy as np

TABLE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "..",
    "crates",
    "engine",
    "src",
    "ops",
    "cudnn_conv_problems.txt.xz",
)


def load(path):
    """{kernel: {kind: [(batch, spatial sizes, in channels, out channels, bytes), ...]}}."""
    kernels = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in lzma.open(path, "rt") if path.endswith(".xz") else open(path):
        if line.startswith("#") or " | " not in line:
            continue
        key, pairs = line.split(" | ")
        f = key.split()
        sizes = [int(x) for x in f[4].split(",")]
        weight = [int(x) for x in f[5].split(",")]
        groups = int(f[10])
        cin, spatial = sizes[0], tuple(sizes[1:])
        cout = weight[1] * groups if f[3] == "1" else weight[0]
        grouping = "dense" if groups == 1 else "depthwise" if groups == cin else "grouped"
        kind = (*f[:4], cin, *f[5:])
        kernel = (*f[:4], len(spatial), tuple(weight[2:]), *f[6:10], grouping)
        for p in pairs.split():
            b, v = p.split(":")
            kernels[kernel][str(kind)].append((int(b), spatial, cin, cout, int(v), line))
    return kernels


def arrays(entries):
    """The entries sorted as the tie-break orders them: their log features (batch, spatial size,
    in and out channels), bytes, kinds and lines."""
    entries = sorted(entries, key=lambda e: (e[0], e[1], e[2], e[3]))
    feats = np.log(
        np.array([[max(e[0], 1), max(math.prod(e[1]), 1), max(e[2], 1), max(e[3], 1)] for e in entries])
    )
    values = np.array([e[4] for e in entries], dtype=np.float64)
    kinds = np.unique([e[6] for e in entries], return_inverse=True)[1]
    lines = np.unique([e[5] for e in entries], return_inverse=True)[1]
    return feats, values, kinds, lines


def predict(fq, fc, vc, channels, lc=None):
    """The rule's estimates for the queries' features `fq` from the candidates' `fc`, `vc`; with
    the candidates' lines `lc`, the scale raised to the nearest line's growth (`line_growth`)."""
    d = np.abs(fq[:, None, 1] - fc[None, :, 1])
    if channels:
        d = d + np.abs(fq[:, None, 2] - fc[None, :, 2]) + np.abs(fq[:, None, 3] - fc[None, :, 3])
    d = d + np.abs(fq[:, None, 0] - fc[None, :, 0])
    j = d.argmin(1)
    scale = np.exp(fq[:, 0] + fq[:, 1] - fc[j, 0] - fc[j, 1])
    chan = np.exp((fq[:, 2] + fq[:, 3] - fc[j, 2] - fc[j, 3]) / 2) if channels else 1.0
    if lc is not None:
        scale = scale ** growth(fc, vc, lc, j, scale * chan > 1)
    return np.round(vc[j] * scale * chan)


def growth(fc, vc, lc, j, up):
    """`line_growth` (ops/conv.rs): the exponent of the nearest line's bytes in its batch between
    the nearest entry and the line's next batch towards the query, clamped to 0..1."""
    order = np.lexsort((fc[:, 0], lc))
    prev = np.full(len(fc), -1)
    nxt = np.full(len(fc), -1)
    same = lc[order][1:] == lc[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    prev[order[1:][same]] = order[:-1][same]
    p = np.where(up, np.where(nxt[j] >= 0, nxt[j], prev[j]), np.where(prev[j] >= 0, prev[j], nxt[j]))
    has = p >= 0
    p = np.where(has, p, 0)
    v1, v2 = vc[j], vc[p]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where((v1 > 0) & (v2 > 0), np.log(v2 / v1) / (fc[p, 0] - fc[j, 0]), 1.0)
    e = np.where(v1 == v2, 0.0, e)
    return np.where(has, np.clip(e, 0, 1), 1.0)


def tally(stats, guess, truth):
    stats["n"] += len(truth)
    stats["exact"] += int((guess == truth).sum())
    stats["1MiB"] += int((np.abs(guess - truth) <= 1 << 20).sum())
    stats["abs"] += float(np.abs(guess - truth).sum())
    stats.setdefault("errs", []).append(np.abs(guess - truth))


def main():
    kernels = load(sys.argv[1] if len(sys.argv) > 1 else TABLE)
    stats = collections.defaultdict(collections.Counter)
    for kinds in kernels.values():
        feats, values, kind_of, line_of = arrays([(*e, k) for k, es in kinds.items() for e in es])
        for k in np.unique(kind_of):
            own = kind_of == k
            # same kind: leave each line out
            for line in np.unique(line_of[own]):
                q = own & (line_of == line)
                c = own & ~q
                if c.any():
                    tally(
                        stats["same kind", "nearest"],
                        predict(feats[q], feats[c], values[c], False),
                        values[q],
                    )
                    tally(
                        stats["same kind", "growth"],
                        predict(feats[q], feats[c], values[c], False, line_of[c]),
                        values[q],
                    )
                    tally(stats["same kind", "none"], np.zeros(q.sum()), values[q])
            # same kernel: leave the kind out
            if not own.all():
                c = ~own
                tally(
                    stats["same kernel", "nearest"],
                    predict(feats[own], feats[c], values[c], True),
                    values[own],
                )
                tally(
                    stats["same kernel", "growth"],
                    predict(feats[own], feats[c], values[c], True, line_of[c]),
                    values[own],
                )
                tally(stats["same kernel", "none"], np.zeros(own.sum()), values[own])
    shapes = collections.defaultdict(list)
    for kernel in kernels:
        shapes[(*kernel[:7], *kernel[9:])].append(kernel)
    for group in shapes.values():
        if len(group) < 2:
            continue
        entries = [
            (*e, str(i)) for i, kernel in enumerate(group) for es in kernels[kernel].values() for e in es
        ]
        feats, values, kernel_of, line_of = arrays(entries)
        for i in np.unique(kernel_of):
            own = kernel_of == i
            c = ~own
            tally(stats["same shape", "nearest"], predict(feats[own], feats[c], values[c], True), values[own])
            tally(
                stats["same shape", "growth"],
                predict(feats[own], feats[c], values[c], True, line_of[c]),
                values[own],
            )
            tally(stats["same shape", "none"], np.zeros(own.sum()), values[own])
    for (test, rule), s in stats.items():
        n = s["n"]
        print(
            f"{test:11} {rule:8} {n} entries: exact {s['exact'] / n:.1%}, within 1 MiB {s['1MiB'] / n:.1%},"
            f" mean error {s['abs'] / n / 2**20:.2f} MiB,"
            f" 99th percentile {np.percentile(np.concatenate(s['errs']), 99) / 2**20:.1f} MiB"
        )


if __name__ == "__main__":
    main()
