"""The measured table of cuDNN convolution workspaces for the twin, from ops_truth.py's records.

    python conv_table.py GPU_OPS_DIR TWIN_OPS_DIR > LINES
    python conv_sweep.py merge crates/engine/src/ops/cudnn_conv_problems.txt.xz LINES   (in place)

GPU_OPS_DIR holds ops_truth.py's lines of each script on the GPU (validation/run/truth.sh), TWIN_OPS_DIR
the same scripts' lines under `OPS_TRUTH_ALL=1 vramscope run ops_truth.py` (every op, so the problems whose
workspace is 0, which the GPU side does not list, are known too). For every convolution problem the
workspace is what the op requested beyond its new outputs and beyond the contiguous copies of the
gradient, input and weight that cuDNN's path makes of those not in the convolution's layout; a problem
whose counts admit no such reading is reported on stderr and left out.

The twin's records stand for the GPU's complete run: where the GPU's were cut short (truth.sh's lane
stopped by blind_gpu.sh's BUDGET_S before a script ended, its NAME.out without the last phases), cut the
twin's at the same point (run the script up to there), else every problem of the missing phases reads
as 0 bytes (blind190: 34 problems of gh02 and gh03 were not; their bytes came from the memory
histories instead, fixtures/run/README.md).

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
    "conv3d": "conv3d",
    "conv2d": "conv2d",
    "conv1d": "conv1d",
    "conv_transpose1d": "conv_transpose1d",
    "conv_transpose2d": "conv_transpose2d",
    "conv_transpose3d": "conv_transpose3d",
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


def dense_strides(sizes, channels_last):
    """The strides `torch.empty(sizes, memory_format=...)` gives a 4-D or 5-D tensor."""
    order = _cl_order(len(sizes)) if channels_last else list(range(len(sizes) - 1, -1, -1))
    strides, expect = [0] * len(sizes), 1
    for d in order:
        strides[d] = expect
        expect *= sizes[d]
    return strides


def _nbytes(t):
    n = 1
    for s in t[0]:
        n *= s
    return n * {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}[t[2]]


def problem(op, args):
    """(key, bytes of the layout copies the op makes first) of a convolution record, as ATen runs it
    (Convolution.cpp, ConvUtils.h, cudnn/ConvShared.cpp). Each of cuDNN's three problems has its
    own layout, `cudnn_conv_suggest_memory_format` of its two operands (channels-last when either
    suggests it by its strides, size-1 dimensions included; never in float64): the forward's of the
    input and the weight; the dgrad's of the gradient and the weight; the wgrad's of the input and
    the gradient. `convolution_backward` passes `input.contiguous(forward's layout)` when the
    weight's gradient is asked for (and a 1-D input contiguous always), then the gradient goes
    `.to` (`.contiguous`, transposed) the suggested format of that input: a pooled (N, C, 1, 1)
    input is contiguous in both layouts and keeps its strides, so a channels-last 1x1 weight runs
    its forward and dgrad channels-last and its wgrad not (blind56/bd05, DCGAN's first layer)."""
    if op in ("conv3d", "conv2d", "conv1d"):
        # the composite as a dispatch mode sees it in inference mode; trailing defaults left out
        nd = int(op[4])
        full = list(args) + [None, [1] * nd, [0] * nd, [1] * nd, 1][len(args) - 2 :]
        x, w, b, stride, padding, dilation, groups = full[:7]
        args = [x, w, b, stride, padding, dilation, False, [0] * nd, groups]
        op = "forward"
    if op.startswith("conv_transpose"):
        # the composite (input, weight, bias, stride, padding, output_padding, groups, dilation)
        nd = int(op[-2])
        full = list(args) + [None, [1] * nd, [0] * nd, [0] * nd, 1, [1] * nd][len(args) - 2 :]
        x, w, b, stride, padding, out_pad, groups, dilation = full[:8]
        args = [x, w, b, stride, padding, dilation, True, out_pad, groups]
        op = "forward"
    if op == "forward":
        x, w, _b, stride, padding, dilation, transposed, out_pad, groups = args[:9]
        grad = None
    else:
        grad, x, w, _bias_sizes, stride, padding, dilation, transposed, out_pad, groups = args[:10]
    # one value for every spatial dimension: `expand_param_if_needed` (Convolution.cpp, convolution and
    # convolution_backward), as torch.nn.grad.conv2d_input/weight's output_padding [0] (blind216/hh04)
    nd = len(w[0]) - 2
    stride, padding, dilation, out_pad = (
        [v] * nd if isinstance(v, int) else list(v) * nd if len(v) == 1 else v
        for v in (stride, padding, dilation, out_pad)
    )

    def suggest(a, b):
        return x[2] != "float64" and (suggests_channels_last(a) or suggests_channels_last(b))

    cl = suggest(x, w)
    copies = []
    if op == "forward":
        copies += [copy_bytes(x, cl), copy_bytes(w, cl)]
    else:
        if op == "wgrad" or len(x[0]) == 3:
            c = copy_bytes(x, cl and len(x[0]) != 3)
            if c:
                copies.append(c)
                x = (x[0], dense_strides(x[0], cl), x[2])
        if len(grad[0]) in (4, 5):
            to = suggests_channels_last(x)
            if copy_bytes(grad, to) if transposed else suggests_channels_last(grad) != to:
                copies.append(_nbytes(grad))
                grad = (grad[0], dense_strides(grad[0], to), grad[2])
        cl = suggest(grad, w) if op == "dgrad" else suggest(x, grad)
        copies += [copy_bytes(grad, cl), copy_bytes(w if op == "dgrad" else x, cl)]
    j = lambda v: ",".join(str(i) for i in v)  # noqa: E731
    key = (
        f"{op} {args[0 if op == 'forward' else 1][2]} {'nhwc' if cl else 'nchw'} {int(transposed)} "
        f"{j((args[0] if op == 'forward' else args[1])[0])} {j(w[0])} {j(stride)} {j(padding)} "
        f"{j(dilation)} {j(out_pad)} {groups}"
    )
    return key, [c for c in copies if c]


def copy_bytes(t, channels_last):
    """Bytes of `t.contiguous(layout)` when it copies (cuDNN's operands must be in the layout):
    `is_contiguous(memory_format)`, which reads no stride of a size-1 dimension."""
    if t is None:
        return 0
    dense = is_channels_last(t) if len(t[0]) in (4, 5) and channels_last else is_contiguous(t)
    return 0 if dense else _nbytes(t)


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
    """A conv3d, conv2d or conv1d record with padding="same" or "valid"."""
    return name in ("conv3d", "conv2d", "conv1d") and isinstance(
        r["args"][4] if len(r["args"]) > 4 else None, str
    )


def workspace(name, r):
    """The workspace of one GPU record of a convolution (what the op requested beyond its new outputs
    and the layout copies of its own operands), or None (stderr) when its counts admit no such
    reading."""
    key, copy = problem(OPS[name], r["args"])
    extra_count = r["count"] - len(r["new"]) - len(copy)
    extra = r["requested"] - sum(r["new"]) - sum(copy)
    if (extra_count, extra > 0) not in ((0, False), (1, True)) or extra < 0:
        print(
            f"{key}: {r['count']} allocations, {r['requested']} bytes for new {r['new']}"
            f" (copies {copy}): not one workspace",
            file=sys.stderr,
        )
        return None
    return extra


def read(gpu_dir, twin_dir):
    """{problem: workspace bytes} from the records of the scripts in both folders (stderr: the
    problems with no one reading, and those read twice with two sizes).

    A problem's bytes are read from the GPU's records alone, each with its own operands: cuDNN runs
    the problem on operands made contiguous in its layout, the strides of size-1 dimensions set by
    that layout (`fixSizeOneDimStride`, cudnn/Conv_v8.cpp), so the key (sizes, layout, parameters)
    decides the workspace whatever strides the script's tensors had. The twin's records (every op)
    add the problems the GPU did not list because they took nothing beyond their outputs: 0 bytes.
    The twin's strides of size-1 dimensions may differ from the GPU's (a pooled (N, C, 1, 1) input,
    fixtures/run/README.md), so its records are matched to the GPU's by key, not by arguments."""
    table = {}
    for twin_path in sorted(glob.glob(os.path.join(twin_dir, "*.jsonl"))):
        gpu_path = os.path.join(gpu_dir, os.path.basename(twin_path))
        if not os.path.exists(gpu_path):
            continue
        found = {}
        for path, is_gpu in ((gpu_path, True), (twin_path, False)):
            for line in open(path):
                r = json.loads(line)
                name = _name(r)
                if name is None or _same_padding(name, r):
                    continue
                key = problem(OPS[name], r["args"])[0]
                if not is_gpu:
                    found.setdefault(key, 0)  # the GPU op allocated exactly its outputs
                    continue
                ws = workspace(name, r)
                if ws is not None and found.setdefault(key, ws) != ws:
                    print(f"{key}: {found[key]} and {ws} bytes", file=sys.stderr)
        for key, ws in found.items():
            if table.setdefault(key, ws) != ws:
                print(f"{key}: {table[key]} and {ws} bytes", file=sys.stderr)
    return table


def main():
    table = read(sys.argv[1], sys.argv[2])
    for key in sorted(table):
        print(f"{key} {table[key]}")


if __name__ == "__main__":
    main()
