"""Compare the per-op allocator truth of a script on a GPU with the twin's, op by op.

    python ops_diff.py GPU.jsonl TWIN.jsonl

GPU.jsonl is ops_truth.py's output on the GPU (lines only for ops that allocate more than they return),
TWIN.jsonl the same script's under `OPS_TRUTH_ALL=1 vramscope run ops_truth.py SCRIPT` (a line per op).
Ops are matched by name and arguments (shapes, strides, dtypes, values). As the GPU side lists only the
calls that allocate beyond their new outputs, the twin's calls of the same op and arguments are compared
with them as the same kind of list: the (count, requested) of each call that allocates beyond its new
outputs, as multisets (a cuBLAS workspace made at another call of one op counts once on each side and
cancels). Printed: each op whose calls' allocations (count, requested bytes) differ, with how often,
then the ops each side ran that the other did not.

Differences that come from the GPU's mode, not the twin (blind99/cu01's H200 truth, session 74):
- CudnnBatchNormBackward0 makes `grad.contiguous(input.suggest_memory_format())` a `clone` op before
  `cudnn_batch_norm_backward`; the twin makes that copy inside `native_batch_norm_backward`: a
  strided gradient's `batch_norm_backward` reads one allocation of its size over the GPU's, and
  `clone` as many calls under it (same bytes, same order).
- under `inference_mode` the GPU's mode sees `scaled_dot_product_attention` and `linear` themselves
  where the twin sees the backend's ops (`_scaled_dot_product_cudnn_attention`, `matmul`): keys that
  do not match, whose totals do.
- a `linear` the GPU's mode intercepts under `inference_mode` runs `weight.t()` below
  ADInplaceOrView, so the view does not require grad and `matmul` does not fold a 3-D strided input
  (no copy); the program's own run folds it (`_kernels/matmul.py` `_linear`: blind54/bb04's H200 history).
- under `inference_mode` and autocast the GPU's mode sees `upsample_bilinear2d.vec` (`F.interpolate`) with
  its bf16 input and runs it in bf16: its `CompositeImplicitAutograd` body runs inside the mode with autocast
  excluded. The program's own run reaches the base overload's fp32 autocast kernel (fp32 output, and a `cat`
  with it fp32), as the twin does (`_autocast.py` `parts_of`): blind338/ma01's bf16 TTA peaked at 1.299 GB
  under the GPU's mode, 1,482,321,920 bytes in its record, 1,483,501,568 in the twin (session 78).
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


def _beyond(rec) -> bool:
    """Whether a call allocated beyond its new outputs (ops_truth.py's condition for a GPU line)."""
    return (rec[2], rec[3]) != (rec[0], rec[1])


def main():
    gpu, gseen = load(sys.argv[1])
    twin, tseen = load(sys.argv[2])
    diffs = collections.Counter()
    example = {}
    for key in twin.keys() | gpu.keys():
        if key not in twin:
            k = (key[0], "not run by the twin with these arguments", len(gpu[key]))
            diffs[k] += 1
            example.setdefault(k, (key[1][:300], gpu[key][0], None))
            continue
        grecs = collections.Counter(gpu.get(key, []))
        trecs = collections.Counter(t for t in twin[key] if _beyond(t))
        # a call on one side only: the other allocated exactly its new outputs there
        only_g = list((grecs - trecs).elements())
        only_t = list((trecs - grecs).elements())
        for i in range(max(len(only_g), len(only_t))):
            t = only_t[i] if i < len(only_t) else None
            g = only_g[i] if i < len(only_g) else (t[0], t[1], t[0], t[1])
            if t is None:
                t = (g[0], g[1], g[0], g[1])
            k = (key[0], g[2] - t[2], g[3] - t[3])
            diffs[k] += 1
            example.setdefault(k, (key[1][:300], g, t))
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
