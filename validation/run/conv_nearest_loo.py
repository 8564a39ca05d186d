"""How well the nearest measured problem stands in for an unmeasured cuDNN convolution.

    python validation/run/conv_nearest_loo.py [crates/engine/src/ops/cudnn_conv_problems.txt]

Leaves each line of the problem table out in turn (a line is one problem at every batch
measured) and predicts each of its batches from the other lines of its group, as
`cudnn_conv_nearest_workspace` (crates/engine/src/ops/conv.rs) does: same operation graph,
dtype, layout, transposition, weight, stride, padding, dilation, output padding, groups and
input channels; the nearest in batch and spatial size (sum of absolute log ratios, the smaller
batch then the smaller sizes on a tie); its bytes scaled by batch x spatial size. Prints, for
that rule and for assuming no workspace, how many predictions are exact, within 1 MiB, and the
mean absolute error, over every entry whose group holds another line.
"""

import collections
import math
import os
import sys

TABLE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "..",
    "crates",
    "engine",
    "src",
    "ops",
    "cudnn_conv_problems.txt",
)


def load(path):
    groups = collections.defaultdict(list)
    for line in open(path):
        if line.startswith("#") or " | " not in line:
            continue
        key, pairs = line.split(" | ")
        f = key.split()
        sizes = [int(x) for x in f[4].split(",")]
        group = (*f[:4], str(sizes[0]), *f[5:])
        groups[group].append((sizes[1:], {int(b): int(v) for b, v in (p.split(":") for p in pairs.split())}))
    return groups


def nearest(lines, spatial, batch):
    """(bytes, batch, spatial) of the rule's neighbour among `lines`."""
    size = lambda v: max(math.prod(v), 1)  # noqa: E731
    ln = lambda a, b: abs(math.log(max(a, 1) / max(b, 1)))  # noqa: E731
    best = min(
        ((ln(size(s), size(spatial)) + ln(n, batch), n, s, v) for s, d in lines for n, v in d.items()),
        key=lambda c: (c[0], c[1], c[2]),
    )
    _, n, s, v = best
    have = max(n, 1) * size(s)
    return (v * max(batch, 1) * size(spatial) + have // 2) // have


def main():
    groups = load(sys.argv[1] if len(sys.argv) > 1 else TABLE)
    stats = {"nearest": collections.Counter(), "none": collections.Counter()}
    entries = 0
    for lines in groups.values():
        for i, (spatial, measured) in enumerate(lines):
            others = lines[:i] + lines[i + 1 :]
            if not others:
                continue
            for batch, bytes_ in measured.items():
                entries += 1
                for rule, guess in (("nearest", nearest(others, spatial, batch)), ("none", 0)):
                    s = stats[rule]
                    s["exact"] += guess == bytes_
                    s["1MiB"] += abs(guess - bytes_) <= 1 << 20
                    s["abs"] += abs(guess - bytes_)
    print(f"{entries} entries whose group holds another measured line")
    for rule, s in stats.items():
        print(
            f"{rule:8} exact {s['exact'] / entries:.1%}, within 1 MiB {s['1MiB'] / entries:.1%},"
            f" mean error {s['abs'] / entries / 2**20:.2f} MiB"
        )


if __name__ == "__main__":
    main()
