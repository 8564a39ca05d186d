"""Compare the per-op allocator truth of a script on a GPU with the twin's, op by op.

    python ops_diff.py GPU.jsonl TWIN.jsonl

GPU.jsonl is ops_truth.py's output on the GPU (lines only for ops that allocate more than they return),
TWIN.jsonl the same script's under `OPS_TRUTH_ALL=1 vramscope run ops_truth.py SCRIPT` (a line per op).
Ops are matched by name and arguments (shapes, strides, dtypes, values), in order. Printed: each op whose
allocations (count, requested bytes) differ, with how often, then the ops each side ran that the other
did not.
"""

import collections
import json
import sys


def same_call(r):
    """The op as both sides name it: the twin's tensors are `meta` in kwargs where the GPU's are
    `cuda`, and where the GPU's `_batch_norm_impl_index` picked cuDNN it ran `cudnn_batch_norm`
    (native_batch_norm's schema) and `cudnn_batch_norm_backward` (input, grad, weight, ...) where
    the twin sees the native ops: both backwards are keyed by (grad, input, weight)."""
    op, args = r["op"], r["args"]
    kwargs = r["kwargs"].replace("device(type='meta')", "device(type='cuda', index=0)")
    if op == "cudnn_batch_norm":
        op = "native_batch_norm"
    elif op == "cudnn_batch_norm_backward":
        op, args = "batch_norm_backward", [args[1], args[0], args[2]]
    elif op == "native_batch_norm_backward":
        op, args = "batch_norm_backward", args[:3]
    return op, json.dumps(args), json.dumps(kwargs)


def load(path):
    recs, seen = collections.defaultdict(list), {}
    for line in open(path):
        r = json.loads(line)
        if "seen" in r:
            seen = r["seen"]
            continue
        key = same_call(r)
        recs[key].append((len(r["new"]), sum(r["new"]), r["count"], r["requested"]))
    return recs, seen


def main():
    gpu, gseen = load(sys.argv[1])
    twin, tseen = load(sys.argv[2])
    diffs = collections.Counter()
    example = {}
    for key, trecs in twin.items():
        grecs = gpu.get(key, [])
        for i, t in enumerate(trecs):
            # a GPU op without a line allocated exactly its new outputs
            g = grecs[i] if i < len(grecs) else (t[0], t[1], t[0], t[1])
            if (g[2], g[3]) != (t[2], t[3]):
                k = (key[0], g[2] - t[2], g[3] - t[3])
                diffs[k] += 1
                example.setdefault(k, (key[1][:300], g, t))
    for key, grecs in gpu.items():
        if key not in twin:
            k = (key[0], "not run by the twin with these arguments", len(grecs))
            diffs[k] += 1
            example.setdefault(k, (key[1][:300], grecs[0], None))
    for (op, dc, dr), n in sorted(diffs.items(), key=lambda x: -x[1]):
        args, g, t = example[(op, dc, dr)]
        print(
            f"{n:4d}x {op}: GPU-twin count {dc}, requested {dr}\n"
            f"      GPU (new, newbytes, count, req) {g} twin {t}\n      {args}"
        )
    for op in sorted(set(gseen) | set(tseen)):
        if gseen.get(op, 0) != tseen.get(op, 0):
            print(f"seen {op}: GPU {gseen.get(op, 0)} twin {tseen.get(op, 0)}")


if __name__ == "__main__":
    main()
