"""The search workspaces of cuDNN's benchmark mode for the twin, from ops_truth.py's GPU records.

    python conv_benchmark_table.py GPU.jsonl [GPU.jsonl ...] | xz -9e > TABLE
                    (TABLE: python/vramscope/cudnn_benchmark_h200.json.xz)

Each GPU.jsonl is ops_truth.py's record of a script run with `torch.backends.cudnn.benchmark = True`.
A convolution problem's first call there allocates its output, the search's workspace (as large as
the largest plan's: `generate_and_filter_plans` in cudnn/Conv_v8.cpp), frees it, empties the cache and
runs the timed plan with its own workspace; later calls run the plan alone. The search workspace is
the first call's bytes beyond its outputs less the plan's workspace, which the twin's cuDNN table
gives for the heuristics' plan (`Device.conv_workspace`; on blind23/w01's batch-64 problems, whose
later calls show the timed plan's, the two differ by at most 272 bytes). Forward problems only (transposed
ones too: a transposed convolution's forward is cuDNN's data gradient, timed by the same
`run_single_conv`), from `convolution` records and from the composites (`conv2d`, `conv_transpose3d`)
that a dispatch mode sees under inference_mode.

    python conv_benchmark_table.py GPU.jsonl:HISTORY.pickle ...

With the same script's memory history (history.py, frames on) the backward's searches are read too:
a `convolution_backward`'s first call searches the data gradient's plans, then the weight
gradient's, each in one allocation of `generate_and_filter_plans` (none where the largest plan needs
no workspace), whose sizes the history gives in order (its frames name `raw_cudnn_convolution_
backward_input_out` or `..._weight_out`, the transposed convolution's data gradient `..._forward_out`
under `cudnn_convolution_transpose_backward_input`). Each record's searches are taken from that order
while their sum is what its first call requested beyond its second (the plans alone); a problem
whose sum does not match is reported on stderr and left out.

    python conv_benchmark_table.py [TABLE.json[.xz]] [GPU.jsonl ...] [--sweep-gpu H100] \
        --sweep DIR [DIR ...] | xz -9e > ...
    python conv_benchmark_table.py --affine DIR [DIR ...]     (is the search workspace affine in the batch?)

Adds `conv_sweep.py run-benchmark`'s lines (DIR/w*.jsonl): each item's forward, dgrad and wgrad
called twice, so a search workspace is the first call's requested bytes beyond its outputs less the
second's (the timed plan's workspace, measured, not the heuristics'), the first call holding one
allocation more than the second (none more where the largest plan needs no workspace); an op whose
counts say otherwise is reported on stderr and left out. Its entry also holds `plan_workspace`, the
second call's bytes beyond its outputs and layout copies (`conv_table.workspace`): the timed plan's
workspace, which the twin takes for the problem's calls under benchmark mode in place of the
heuristics' (timed on a GPU the sweep's workers share: a lone process may time another plan
fastest). The layout is the twin's
`_channels_last` of the recorded operands (`cudnn_conv_suggest_memory_format`): the forward's of the
input and the weight, the dgrad's of the gradient and the weight, the wgrad's of the input and the
gradient, as `_kernels/conv.py` looks them up. A problem measured twice with different bytes is
reported on stderr and its first reading kept (the scripts' records first).
"""

import glob
import json
import os
import sys

from vramscope._native import Device


def _channels_last(shape, strides):
    """`is_channels_last_strides_2d`'s reading of a 4-D tensor (sizes of 1 taken as they come)."""
    if len(shape) != 4:
        return False
    _, c, h, w = shape
    return list(strides) == [h * w * c, 1, w * c, c]


def forward_args(op, args):
    """A forward record's (input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups), or None: `convolution` as it comes, and the composites a dispatch mode sees in inference
    mode (`conv2d` (input, weight, bias, stride, padding, dilation, groups), `conv_transpose3d` (input,
    weight, bias, stride, padding, output_padding, groups, dilation)) with their trailing defaults."""
    if op == "convolution":
        return list(args[:9])
    if op in ("conv1d", "conv2d", "conv3d") and not isinstance(args[4] if len(args) > 4 else 0, str):
        nd = int(op[4])
        full = list(args) + [None, [1] * nd, [0] * nd, [1] * nd, 1][len(args) - 2 :]
        x, w, b, stride, padding, dilation, groups = full[:7]
        return [x, w, b, stride, padding, dilation, False, [0] * nd, groups]
    if op in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
        nd = int(op[-2])
        full = list(args) + [None, [1] * nd, [0] * nd, [0] * nd, 1, [1] * nd][len(args) - 2 :]
        x, w, b, stride, padding, out_pad, groups, dilation = full[:8]
        return [x, w, b, stride, padding, dilation, True, out_pad, groups]
    return None


def _backward_searches(history):
    """The backward's search allocations of a memory history, in order: [(dgrad|wgrad, bytes)]."""
    import pickle

    with open(history, "rb") as f:
        snapshot = pickle.load(f)
    out = []
    for e in snapshot["device_traces"][0]:
        if e["action"] != "alloc":
            continue
        names = [f["name"] for f in e["frames"]]
        if not any(n.startswith("at::native::generate_and_filter_plans") for n in names):
            continue
        if not any(n.startswith("at::native::convolution_backward(") for n in names):
            continue
        raw = next(n for n in names if n.startswith("at::native::raw_cudnn"))
        out.append(("wgrad" if "backward_weight" in raw else "dgrad", e["size"]))
    return out


def backward_problems(path, history):
    """The dgrad and wgrad search workspaces of a benchmark-mode script's first backward calls."""
    searches, at = _backward_searches(history), 0
    first, second, order = {}, {}, []
    for line in open(path):
        r = json.loads(line)
        if r.get("op") != "convolution_backward":
            continue
        key = json.dumps([r["args"][0][0], r["args"][1][0], r["args"][2][0], r["args"][3:]])
        if key not in first:
            first[key] = r
            order.append(key)
        elif key not in second:
            second[key] = r
    problems = []
    for key in order:
        r = first[key]
        grad, x, w, _bias, stride, padding, dilation, transposed, out_pad, groups, mask = r["args"][:11]
        asked = [k for k, m in zip(("dgrad", "wgrad"), mask[:2], strict=True) if m]
        extra = r["requested"] - sum(r["new"])
        need = extra - (second[key]["requested"] - sum(second[key]["new"])) if key in second else None
        got, total = [], 0
        while at < len(searches) and len(got) < len(asked) and (need is None or total < need):
            if searches[at][0] not in asked[len(got) :]:
                break
            got.append(searches[at])
            total += searches[at][1]
            at += 1
        if need is not None and total != need:
            print(f"{key}: searches {got} do not sum to {need}", file=sys.stderr)
            continue
        taken = dict(got)
        for op in asked:
            a, b = (grad, w) if op == "dgrad" else (x, grad)
            entry = {"transposed": True, "output_padding": out_pad} if transposed else {}
            entry.update(
                {
                    "op": op,
                    "dtype": x[2],
                    "input": x[0],
                    "weight": w[0],
                    "stride": stride,
                    "padding": padding,
                    "dilation": dilation,
                    "groups": groups,
                    "channels_last": _channels_last(a[0], a[1]) or _channels_last(b[0], b[1]),
                    "search_workspace": taken.get(op, 0),
                }
            )
            problems.append(entry)
    return problems


def _suggests(op, args):
    """The twin's `_channels_last` (cudnn_conv_suggest_memory_format) of an op's recorded operands."""
    import torch
    from vramscope._kernels.conv import _channels_last

    def meta(d):
        return torch.empty_strided(d[0], d[1], dtype=getattr(torch, d[2]), device="meta")

    if op == "forward":
        a, b = args[0], args[1]
    elif op == "dgrad":
        a, b = args[0], args[2]
    else:
        a, b = args[1], args[0]
    return _channels_last(meta(a), meta(b))


def item_entry(op, item, channels_last):
    """The table entry's problem of one op (forward, dgrad, wgrad) of a `conv_sweep.py` item: its sizes
    with the item's batch, channels-last as given; transposed and output_padding only where transposed."""
    entry = {"transposed": True, "output_padding": item["output_padding"]} if item["transposed"] else {}
    entry.update(
        {
            "op": op,
            "dtype": item["dtype"],
            "input": [item["n"], *item["x"]],
            "weight": item["w"],
            "stride": item["stride"],
            "padding": item["padding"],
            "dilation": item["dilation"],
            "groups": item["groups"],
            "channels_last": channels_last,
        }
    )
    return entry


def sweep_problems(dirs):
    """The search workspaces of `conv_sweep.py run-benchmark`'s lines in dirs, in the table's form."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import conv_table

    problems = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "w*.jsonl"))):
            for line in open(path):
                r = json.loads(line)
                item = r["item"]
                for op in ("forward", "dgrad", "wgrad"):
                    first, second = r["ops"][op]
                    extra = [c["requested"] - sum(c["new"]) for c in (first, second)]
                    more = first["count"] - len(first["new"]) - (second["count"] - len(second["new"]))
                    search = extra[0] - extra[1]
                    if (more, search > 0) not in ((0, False), (1, True)) or search < 0:
                        print(
                            f"{path} item {r['index']} {op}: {more} more allocations, {search} bytes",
                            file=sys.stderr,
                        )
                        continue
                    entry = item_entry(op, item, _suggests(op, first["args"]))
                    entry["search_workspace"] = search
                    entry["free"] = r["free"]  # the device's free memory before the item
                    plan = conv_table.workspace(conv_table._name(second), second)
                    if plan is not None:
                        entry["plan_workspace"] = plan
                    problems.append(entry)
    return problems


def _key(p):
    """The twin's lookup key of a table entry (`vramscope._kernels.conv.benchmark_key`)."""
    from vramscope._kernels.conv import benchmark_key

    return benchmark_key(p)


def cudnn_key(p):
    """The problem's `CacheKeyWrapper` in cudnn/Conv_v8.cpp, less the thread and alignments: cuDNN's
    operation and its x (a transposed convolution's forward is the backward-data operation on its
    output, its data gradient the forward operation on its output's gradient, its weight gradient
    the backward-filter operation with that gradient as x), as the twin's `_benchmark_cache_key`."""
    x = list(p["input"])
    if p.get("transposed"):
        w, s, pad, d, o = p["weight"], p["stride"], p["padding"], p["dilation"], p["output_padding"]
        sizes = zip(x[2:], w[2:], s, pad, d, o, strict=True)
        x = [x[0], w[1] * p["groups"]] + [
            (i - 1) * a - 2 * b + c * (k - 1) + e + 1 for i, k, a, b, c, e in sizes
        ]
        op = {"forward": "backward_data", "dgrad": "forward", "wgrad": "backward_filter"}[p["op"]]
    else:
        op = {"forward": "forward", "dgrad": "backward_data", "wgrad": "backward_filter"}[p["op"]]
    rest = (p["stride"], p["padding"], p["dilation"])
    return (op, p["dtype"], tuple(x), tuple(p["weight"]), *map(tuple, rest), p["groups"], p["channels_last"])


def same_search(problems):
    """Entries of one cuDNN problem (`cudnn_key`) take its one search: a script's first call that
    found the plan its thread timed for the other (ft04's plain weight gradients after their
    transposed twins') requested none, read as 0; a disagreement of two non-zero readings is
    reported on stderr and left."""
    searched = {}
    for p in problems:
        if p["search_workspace"]:
            searched.setdefault(cudnn_key(p), set()).add(p["search_workspace"])
    for k, found in searched.items():
        if len(found) > 1:
            print(f"one cuDNN problem, several searches: {k}: {sorted(found)}", file=sys.stderr)
    for p in problems:
        found = searched.get(cudnn_key(p), set())
        if len(found) == 1 and not p["search_workspace"]:
            (p["search_workspace"],) = found
            print(
                f"{_key(p)}: 0 read (the plan found), {p['search_workspace']} as its cuDNN problem's",
                file=sys.stderr,
            )
    return problems


def merged(*groups):
    """The groups' entries, each problem once (the first reading kept; a disagreement on stderr)."""
    out, seen = [], {}
    for group in groups:
        for p in group:
            k = _key(p)
            if k in seen:
                if seen[k] != p["search_workspace"]:
                    print(
                        f"disagree: {k}: {seen[k]} kept, {p['search_workspace']} measured again",
                        file=sys.stderr,
                    )
                continue
            seen[k] = p["search_workspace"]
            out.append(p)
    return out


def affine(problems):
    """conv_sweep.py's leave-one-out test of 'affine in the batch between measured batches' on the
    search workspaces (a problem's entries at several batches): prints the counts."""
    import conv_sweep

    groups = {}
    for p in problems:
        k = _key(dict(p, input=[None, *p["input"][1:]]))
        groups.setdefault(k, {})[p["input"][0]] = p["search_workspace"]
    groups = {k: g for k, g in groups.items() if len(g) >= 3}
    for strict in (False, True):
        conv_sweep.loo("search workspaces", groups, strict)


def main():
    if sys.argv[1:2] == ["--affine"]:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        affine(sweep_problems(sys.argv[2:]))
        return
    dev = Device("h200")
    problems, seen = [], set()
    argv = sys.argv[1:]
    gpu = None
    if "--sweep-gpu" in argv:
        # the sweeps' GPU where it is not an H200 (its entries say so: `gpu`)
        i = argv.index("--sweep-gpu")
        gpu = argv[i + 1]
        del argv[i : i + 2]
    sweeps = argv[argv.index("--sweep") + 1 :] if "--sweep" in argv else []
    tables = []
    for arg in argv[: len(argv) - len(sweeps) - bool(sweeps)]:
        if arg.endswith((".json", ".json.xz")):
            # a table this script wrote: its entries as they are (the scripts' readings)
            import lzma

            with (lzma.open if arg.endswith(".xz") else open)(arg, "rt") as f:
                tables += json.load(f)["problems"]
            continue
        path, _, history = arg.partition(":")
        if history:
            problems += backward_problems(path, history)
        for line in open(path):
            r = json.loads(line)
            args = forward_args(r.get("op"), r.get("args"))
            if args is None:
                continue
            x, w, _, stride, padding, dilation, transposed, out_pad, groups = args
            # cudnn_conv_suggest_memory_format: channels-last if the input or the weight is
            cl = _channels_last(x[0], x[1]) or _channels_last(w[0], w[1])
            key = (x[2], tuple(x[0]), tuple(w[0]), tuple(stride), tuple(padding), tuple(dilation), groups, cl)
            key += (bool(transposed), tuple(out_pad))
            if key in seen:
                continue
            seen.add(key)
            extra = r["requested"] - sum(r["new"])
            problem = ("forward", x[2], x[0], w[0], stride, padding, dilation, groups)
            layout = {"transposed": bool(transposed), "output_padding": out_pad, "channels_last": cl}
            plan = dev.conv_workspace(*problem, **layout)
            if plan is None:
                # the twin's stand-in for an unmeasured plan: the nearest measured problem, scaled
                nearest = dev.conv_workspace_nearest(*problem, **layout)
                plan = nearest[0] if nearest else 0
            extra_fields = {"transposed": True, "output_padding": out_pad} if transposed else {}
            problems.append(
                {
                    **extra_fields,
                    "op": "forward",
                    "dtype": x[2],
                    "input": x[0],
                    "weight": w[0],
                    "stride": stride,
                    "padding": padding,
                    "dilation": dilation,
                    "groups": groups,
                    "channels_last": cl,
                    "search_workspace": extra - plan,
                }
            )
    swept = sweep_problems(sweeps)
    if gpu:
        for p in swept:
            p["gpu"] = gpu
    problems = same_search(merged(tables, problems, swept))
    doc = {
        "about": (
            "cuDNN benchmark mode's search workspace (bytes) by convolution problem (forward, dgrad, "
            "wgrad), measured on an H200 (sm_90), torch 2.11.0+cu130, cuDNN 9.19 "
            "(validation/run/conv_benchmark_table.py). Entries without plan_workspace: ops_truth.py's "
            "first call of each problem in fixtures/run/truth_blind23_h200.tar.xz's w01, "
            "truth_blind176_h200.tar.xz's ft04 and truth_blind242_h200.tar.xz's ii01-ii03 (the sweep's "
            "problems read first), a forward's less its outputs and the heuristics' plan "
            "workspace, a backward's from the H200 history. Entries with plan_workspace: conv_sweep.py "
            "run-benchmark (fixtures/run/cudnn_benchmark_sweep_h200.tar.xz), the first call's bytes "
            "beyond its outputs less the second's; plan_workspace the second's (the timed plan's), free "
            "the device's free memory before the item. Entries with gpu H100: the same sweep of the 596 "
            "problems the wild programs looked up and the table lacked "
            "(fixtures/run/wild_benchmark_problems.json) on an H100 80GB HBM3 "
            "(fixtures/run/cudnn_benchmark_sweep_wild_h100.tar.xz, session 61): its free memory (70.7 to "
            "84.5 GB, not an H200's ~150) bounded the plans each search kept; their searches reach 11.7 "
            "GB, 14% of it, and their timed plans are the H100's fastest. Likewise on an H100 (session "
            "74): the 110 items of validation/run/benchmark_problems_blind338.json "
            "(fixtures/run/cudnn_benchmark_sweep_blind338_h100.tar.xz), and (session 75) the 23 items of "
            "validation/run/benchmark_problems_blind335.json "
            "(fixtures/run/cudnn_benchmark_sweep_blind335_h100.tar.xz)."
        ),
        "problems": problems,
    }
    print("{")
    print(f' "about": {json.dumps(doc["about"])},')
    print(' "problems": [')
    print(",\n".join("  " + json.dumps(p, sort_keys=True) for p in problems))
    print(" ]")
    print("}")


if __name__ == "__main__":
    main()
