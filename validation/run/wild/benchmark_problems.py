"""The wild programs' cuDNN benchmark-mode searches that the twin's table lacks, as `conv_sweep.py
run-benchmark`'s PROBLEMS.

    python benchmark_problems.py OUT.json LOG.jsonl [LOG.jsonl ...]   (the problems, deduplicated)
    python benchmark_problems.py --check PROBLEMS.json [K]             (a dry parse, on the CPU; K: also
                                                                       run-benchmark K items there)

Each LOG is what `convlog/sitecustomize.py` wrote while the twin ran a program (VRAMSCOPE_CONVLOG):
one line per benchmark-table lookup that found no measured entry (`estimated` where
`_benchmark_between` put it on the line through measured batches). A problem is the convolution as
the twin looks it up, batch, dtype and layout included (`_benchmark_entry`'s key: the input's sizes,
the weight's, stride, padding, dilation, groups, channels-last, transposed, output_padding); its
forward, data gradient and weight gradient are one item of `run-benchmark` (which calls all three),
so the lookups of the three ops fold into one item ("ops" lists those the programs called). Each
item names its batch ("n"), dtype and layout ("nhwc" where the twin's `cudnn_conv_suggest_memory_format`
says channels-last), so `conv_sweep.items` takes it alone, not crossed with the sweep's batches.
Order: the problems no measured batch bounds first, then the estimated ones, each first seen first
(the LOGs in the order given), so a call cut short by its deadline has measured what matters most.

`--check` reads PROBLEMS through `conv_sweep.items` and checks that each item's forward, dgrad and
wgrad give, as `conv_benchmark_table.py --sweep` would key them, the keys the twin looks up
(`vramscope._kernels.conv.benchmark_key`), and prints how many the table holds now. With K, it
also runs `run-benchmark` on the CPU over K small items (one of each dtype, layout, dimension and
transposed kind at least; the CPU's records say 0 bytes) and reads them back through
`conv_benchmark_table.sweep_problems`: every entry must carry its item's twin key.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.dirname(HERE)

FIELDS = ("stride", "padding", "dilation", "transposed", "output_padding", "groups")


def build(logs):
    problems, order = {}, []
    for path in logs:
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            p = {"x": r["x"][1:], "w": r["w"], **{k: r[k] for k in FIELDS}}
            p.update(n=r["x"][0], dtype=r["dtype"], layout="nhwc" if r["channels_last"] else "nchw")
            key = json.dumps(p, sort_keys=True)
            q = problems.get(key)
            if q is None:
                q = problems[key] = dict(p, tier=0, models=[], ops=[], estimated=True)
                order.append(key)
            q["estimated"] = q["estimated"] and r["estimated"]
            if r["script"] and r["script"] not in q["models"]:
                q["models"].append(r["script"])
            if r["op"] not in q["ops"]:
                q["ops"].append(r["op"])
    out = [problems[k] for k in order]
    return [p for p in out if not p["estimated"]] + [p for p in out if p["estimated"]]


def table_keys(item):
    """The keys `conv_benchmark_table.sweep_problems` gives the item's three ops (channels-last as
    the layout the item's operands have)."""
    import conv_benchmark_table

    return [
        conv_benchmark_table.item_entry(op, item, item["layout"] == "nhwc")
        for op in ("forward", "dgrad", "wgrad")
    ]


def cpu_check(conv_sweep, conv, every, k):
    """`run-benchmark` on the CPU over the K smallest items (each layout, dtype, dimension and the
    transposed kind among them), then `conv_benchmark_table.sweep_problems` over its lines: each op's
    entry must carry the twin's key of its item (the layout as `_suggests` reads it off the records)."""
    import tempfile

    import conv_benchmark_table

    kinds = {}
    for i, it in enumerate(every):
        kind = (it["dtype"], it["layout"], len(it["x"]), it["transposed"])
        kinds.setdefault(kind, []).append((conv_sweep.operand_bytes(it), i))
    chosen = sorted({min(v)[1] for v in kinds.values()})
    rest = sorted((conv_sweep.operand_bytes(it), i) for i, it in enumerate(every) if i not in chosen)
    chosen = sorted(chosen + [i for _, i in rest[: max(0, k - len(chosen))]])
    sub = [every[i] for i in chosen]
    with tempfile.TemporaryDirectory() as d:
        json.dump(sub, open(os.path.join(d, "p.json"), "w"))
        conv_sweep.run_benchmark(os.path.join(d, "p.json"), os.path.join(d, "b"), 600, device="cpu")
        entries = conv_benchmark_table.sweep_problems([os.path.join(d, "b")])
    want = sorted(conv.benchmark_key(e) for it in sub for e in table_keys(it))
    got = sorted(conv.benchmark_key(e) for e in entries)
    assert got == want, [k for k in want if k not in got][:3]
    print(f"cpu: {len(sub)} items run, {len(entries)} entries, every one keyed as the twin looks it up")


def check(path, cpu=0):
    sys.path.insert(0, RUN)
    sys.path.insert(0, os.path.join(os.path.dirname(RUN), "..", "python"))
    import conv_sweep
    from vramscope._kernels import conv

    problems = json.load(open(path))
    every = conv_sweep.items(problems)
    assert len(every) == len(problems), (len(every), len(problems))
    table = conv._benchmark_entries()
    held = big = 0
    for p, item in zip(problems, every, strict=True):
        assert item["n"] == p["n"] and item["dtype"] == p["dtype"] and item["layout"] == p["layout"]
        conv_sweep._conv_args(item)
        big += conv_sweep.operand_bytes(item) > conv_sweep.MAX_OPERAND_BYTES
        for e in table_keys(item):
            held += conv.benchmark_key(e) in table
        for e in table_keys(item):
            # the key the twin builds in `_benchmark_entry` from the same fields
            twin = (
                e["op"],
                item["dtype"],
                (item["n"], *item["x"]),
                tuple(item["w"]),
                tuple(item["stride"]),
                tuple(item["padding"]),
                tuple(item["dilation"]),
                item["groups"],
                item["layout"] == "nhwc",
                item["transposed"],
                tuple(item["output_padding"]),
            )
            assert conv.benchmark_key(e) == twin, (conv.benchmark_key(e), twin)
    if cpu:
        cpu_check(conv_sweep, conv, every, cpu)
    est = sum(p["estimated"] for p in problems)
    print(
        f"{path}: {len(problems)} items ({len(problems) - est} unbounded, {est} estimated), "
        f"{3 * len(problems)} op calls; {held} of their op keys in the table now; "
        f"{big} over run-benchmark's operand limit ({conv_sweep.MAX_OPERAND_BYTES} bytes, skipped there)"
    )
    models = sorted({m for p in problems for m in p["models"]})
    for m in models:
        print(f"  {m}: {sum(m in p['models'] for p in problems)}")


def main():
    if sys.argv[1:2] == ["--check"]:
        return check(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    out, logs = sys.argv[1], sys.argv[2:]
    problems = build(logs)
    with open(out, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(p) for p in problems) + "\n]\n")
    print(f"{len(problems)} problems from {len(logs)} logs", file=sys.stderr)


if __name__ == "__main__":
    main()
