"""Residuals of `vramscope._rnn._fitted` against a sweep's GPU measurements (validation/run/rnn_sweep.py).

    PYTHONPATH=python python validation/run/rnn_fit_check.py \
        fixtures/run/rnn_sweep_uni_h200.jsonl.xz [uni|bi|proj]

(a sweep as rnn_sweep.py wrote it, or xz-compressed as the fixtures keep it)

For every problem the formula answers (its domain), measured minus formula of the training workspace
(also the backward's), the reserve and the inference workspace, grouped by set, mode, packed or not,
one or more layers and dropout: how many are exact, and the least and largest residual in bytes.
`uni` and `bi` take the problems of one direction without projection, `proj` the LSTMs with
projections of both directions.
"""

import collections
import json
import lzma
import sys

import torch
from vramscope import _rnn


def fitted(r, train):
    if r["lengths"] is not None:
        tokens = sum(r["lengths"])
    else:
        tokens = r["batch"] * r["seq_length"]
    return _rnn._fitted(
        _rnn.MODES[r["mode"]],
        getattr(torch, r["dtype"]),
        r["input_size"],
        r["hidden_size"],
        r["proj_size"],
        r["num_layers"],
        r["bidirectional"],
        r["dropout"] if train else 0.0,
        train,
        r["batch"],
        r["seq_length"],
        tokens,
        r["lengths"] is not None,
    )


def main():
    path = sys.argv[1]
    which = sys.argv[2] if len(sys.argv) > 2 else "uni"
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in lzma.open(path, "rt") if path.endswith(".xz") else open(path):
        r = json.loads(line)
        if r["set"] == "meta" or r.get("error"):
            continue
        if which == "proj" and not r["proj_size"]:
            continue
        if which != "proj" and (r["proj_size"] or r["bidirectional"] != (which == "bi")):
            continue
        mode = "rnn" if r["mode"].startswith("rnn") else r["mode"]
        if which == "proj":
            mode = "bi" if r["bidirectional"] else "uni"
        key = (
            r["set"],
            mode,
            "packed" if r["lengths"] else "unpacked",
            min(r["num_layers"], 2),
            r["dropout"] > 0,
        )
        g = groups[key]
        g["problems"].append(1)
        train = fitted(r, True)
        if train is not None:
            g["train ws"].append(r["train_workspace"] - train["workspace"])
            g["backward ws"].append(r["backward_workspace"] - train["backward_workspace"])
            g["reserve"].append(r["reserve"] - train["reserve"])
        infer = fitted(r, False)
        if infer is not None:
            g["infer ws"].append(r["infer_workspace"] - infer["workspace"])
    totals = collections.defaultdict(lambda: collections.defaultdict(list))
    for key in sorted(groups):
        g = groups[key]
        set_name, mode, packed, layers, dropout = key
        name = f"{set_name} {mode} {packed} {'L>=2' if layers > 1 else 'L=1'}{' dropout' if dropout else ''}"
        cells = []
        for field in ("train ws", "backward ws", "reserve", "infer ws"):
            v = g[field]
            totals[set_name][field] += v
            cells.append(
                f"{field} {sum(d == 0 for d in v)}/{len(v)} [{min(v, default=0)}, {max(v, default=0)}]"
            )
        print(f"{name} ({len(g['problems'])}): " + "; ".join(cells))
    for set_name, t in totals.items():
        cells = [
            f"{f} {sum(d == 0 for d in v)}/{len(v)} [{min(v, default=0)}, {max(v, default=0)}]"
            for f, v in t.items()
        ]
        print(f"ALL {set_name}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
