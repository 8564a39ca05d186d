"""The measured table of cuDNN convolution workspaces for the twin, from ops_truth.py's records.

    python conv_table.py GPU_OPS_DIR TWIN_OPS_DIR > LINES
    python conv_sweep.py merge crates/engine/src/ops/cudnn_conv_problems.txt LINES > NEW_TABLE

GPU_OPS_DIR holds ops_truth.py's lines of each script on the GPU (validation/run/truth.sh), TWIN_OPS_DIR
the same scripts' lines under `OPS_TRUTH_ALL=1 vramscope run ops_truth.py` (every op, so the problems whose
workspace is 0, which the GPU side does not list, are known too). For every convolution problem the
workspace is what the op requested beyond its new outputs and beyond the contiguous copies of the
gradient, input and weight that cuDNN's path makes of those not in the convolution's layout; a problem
whose counts admit no such reading is reported on stderr and left out.

A line of LINES (the table groups them by the problem without its batch: conv_sweep.py's `merge`):
op (forward, dgrad, wgrad), dtype, layout (nchw, nhwc: channels-last 2-D or 3-D), transposed (0, 1),
input sizes, weight sizes, stride, padding, dilation, output_padding (comma-separated), groups, bytes.
"""

import glob
import json
import os
import sys

OPS = {
    "convolution": "forward",
    "conv2d": "conv2d",
    "convolution_backward[0]": "dgrad",
    "convolution_backward[1]": "wgrad",
}


def _cl_order(ndim):
    """Dimensions from the fastest in a channels-last layout: c, the spatial ones from the last, n."""
    return [1, *range(ndim - 1, 1, -1), 0]


def is_channels_last(t):
    """`t.is_contiguous(memory_format=channels_last)` (4-D) or `channels_last_3d` (5-D): c fastest,
    then the spatial dimensions from the last, then n."""
    sizes, strides = t[0], t[1]
    if len(sizes) not in (4, 5):
        return False
    expect = 1
    for d in _cl_order(len(sizes)):
        if sizes[d] != 1 and strides[d] != expect:
            return False
        expect *= sizes[d]
    return True


def is_contiguous(t):
    expect = 1
    for size, stride in zip(reversed(t[0]), reversed(t[1]), strict=True):
        if size != 1 and stride != expect:
            return False
        expect *= size
    return True


def channels_last(t):
    """`t.suggest_memory_format()` is channels-last, for the dense tensors here (5-D: by the strides,
    as the twin's `_suggests_channels_last` reads them)."""
    if len(t[0]) == 5:
        return suggests_channels_last(t)
    return is_channels_last(t) and not is_contiguous(t)


def suggests_channels_last(t):
    """`t.suggest_memory_format()` is channels-last (c10's `is_channels_last_strides_2d` /
    `_3d`, size-1 dimensions included), for a 4-D or 5-D tensor."""
    sizes, strides = t[0], t[1]
    if len(sizes) not in (4, 5) or strides[1] == 0:
        return False
    low = 0
    for d in _cl_order(len(sizes)):
        if sizes[d] == 0 or strides[d] < low:
            return False
        if d == 0 and low == strides[1]:
            return False
        low = strides[d] * (sizes[d] if sizes[d] > 1 else 1)
    return True


def grad_copies(grad, x, layout):
    """Bytes of the gradient's copies in `cudnn_convolution_backward` (ConvShared.cpp):
    `grad_output_t.to(input.suggest_memory_format())`, then `.contiguous(layout)` of that."""
    sizes = grad[0]
    n = 1
    for s in sizes:
        n *= s
    item = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}[grad[2]]
    out = []
    if len(sizes) in (4, 5) and suggests_channels_last(grad) != suggests_channels_last(x):
        out.append(n * item)
        cl = suggests_channels_last(x)
        grad = (sizes, dense_strides(sizes, cl), grad[2])
    c = copy_bytes(grad, layout)
    if c:
        out.append(c)
    return out


def dense_strides(sizes, channels_last):
    """The strides `torch.empty(sizes, memory_format=...)` gives a 4-D or 5-D tensor."""
    order = _cl_order(len(sizes)) if channels_last else list(range(len(sizes) - 1, -1, -1))
    strides, expect = [0] * len(sizes), 1
    for d in order:
        strides[d] = expect
        expect *= sizes[d]
    return strides


def problem(op, args):
    if op == "conv2d":
        # the composite as a dispatch mode sees it in inference mode; trailing defaults left out
        full = list(args) + [None, [1, 1], [0, 0], [1, 1], 1][len(args) - 2 :]
        x, w, b, stride, padding, dilation, groups = full[:7]
        args = [x, w, b, stride, padding, dilation, False, [0, 0], groups]
        op = "forward"
    if op == "forward":
        x, w, _b, stride, padding, dilation, transposed, out_pad, groups = args[:9]
        grad = None
    else:
        grad, x, w, _bias_sizes, stride, padding, dilation, transposed, out_pad, groups = args[:10]
    layout = "nhwc" if channels_last(x) or channels_last(w) else "nchw"
    j = lambda v: ",".join(str(i) for i in v)  # noqa: E731
    key = (
        f"{op} {x[2]} {layout} {int(transposed)} {j(x[0])} {j(w[0])} {j(stride)} {j(padding)} "
        f"{j(dilation)} {j(out_pad)} {groups}"
    )
    return key, (grad, x, w), layout


def copy_bytes(t, layout):
    """Bytes of `t.contiguous(layout)` when it copies (cuDNN's operands must be in the layout)."""
    if t is None:
        return 0
    sizes = t[0]
    n = 1
    for s in sizes:
        n *= s
    item = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}[t[2]]
    dense = is_channels_last(t) if len(sizes) in (4, 5) and layout == "nhwc" else is_contiguous(t)
    return 0 if dense else n * item


def _name(r):
    """The record's op as OPS names it (a one-output `convolution_backward` by its mask), or None."""
    name = r.get("op")
    if name == "convolution_backward":
        mask = r["args"][10]
        if sum(mask[:2]) != 1 or mask[2]:
            return None  # split per output by ops_truth.py: [0] and [1]
        name = "convolution_backward[0]" if mask[0] else "convolution_backward[1]"
    return name if name in OPS else None


def _same_padding(name, r):
    """A conv2d record with padding="same"."""
    return name == "conv2d" and isinstance(r["args"][4] if len(r["args"]) > 4 else None, str)


def read(gpu_dir, twin_dir):
    """{problem: workspace bytes} from the records of the scripts in both folders (stderr: the
    problems with no one reading, and those read twice with two sizes)."""
    table = {}
    for twin_path in sorted(glob.glob(os.path.join(twin_dir, "*.jsonl"))):
        gpu_path = os.path.join(gpu_dir, os.path.basename(twin_path))
        if not os.path.exists(gpu_path):
            continue
        gpu, gpu_problems = {}, set()
        for line in open(gpu_path):
            r = json.loads(line)
            if r.get("op") in OPS or r.get("op") == "convolution_backward":
                gpu.setdefault((r["op"], json.dumps(r["args"])), r)
                name = _name(r)
                if name is not None and not _same_padding(name, r):
                    gpu_problems.add(problem(OPS[name], r["args"])[0])
        for line in open(twin_path):
            r = json.loads(line)
            name = _name(r)
            if name is None:
                continue
            if _same_padding(name, r):
                continue
            key, (grad, x, w), layout = problem(OPS[name], r["args"])
            g = gpu.get((r["op"], json.dumps(r["args"])))
            if g is None:
                ws = 0  # the GPU op allocated exactly its outputs
                if key in gpu_problems:
                    # the GPU recorded this problem with other arguments (strides of size-1
                    # dimensions, say): its bytes may not be 0 (fixtures/run/README.md, the sweep)
                    print(
                        f"{key}: no GPU record with the twin's arguments, one of the problem: 0 bytes taken",
                        file=sys.stderr,
                    )
            else:
                extra_count = g["count"] - len(g["new"])
                extra = g["requested"] - sum(g["new"])
                # forward reads x and w, dgrad grad and w, wgrad grad and x; convolution_backward
                # makes the input contiguous for a dgrad alone only in 1-D (Convolution.cpp)
                dgrad_x = (w, x) if len(x[0]) == 3 else (w,)
                used = {"forward": (x, w), "conv2d": (x, w), "dgrad": dgrad_x, "wgrad": (x,)}[OPS[name]]
                copies = [copy_bytes(t, layout) for t in used]
                if grad is not None:
                    copies += grad_copies(grad, x, layout)
                copy = [c for c in copies if c]
                extra_count, extra = extra_count - len(copy), extra - sum(copy)
                if (extra_count, extra > 0) not in ((0, False), (1, True)) or extra < 0:
                    print(
                        f"{key}: {g['count']} allocations, {g['requested']} bytes for new {g['new']}"
                        f" (copies {copy}): not one workspace",
                        file=sys.stderr,
                    )
                    continue
                ws = extra
            if table.setdefault(key, ws) != ws:
                print(f"{key}: {table[key]} and {ws} bytes", file=sys.stderr)
    return table


def main():
    table = read(sys.argv[1], sys.argv[2])
    for key in sorted(table):
        print(f"{key} {table[key]}")


if __name__ == "__main__":
    main()
