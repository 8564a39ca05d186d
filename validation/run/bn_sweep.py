"""Measure cuDNN's batch-norm workspaces in training over channels-last inputs, on a GPU.

    python bn_sweep.py OUT.jsonl [SECONDS]      (GPU; SMOKE=1: a few problems on the CPU)

FEW=1 sweeps 1 to 15 channels instead (BN_CHANNELS=17,18,...: those channels), in the two dtype pairs
that take cuDNN (float32, and float16 input with float32 weights).

`batch_norm` in training over a channels-last (2-D or 3-D) input takes cuDNN's
`CUDNN_BATCHNORM_SPATIAL_PERSISTENT` mode (`getCudnnBatchNormMode`, aten/src/ATen/native/cudnn/
BatchNorm.cpp), whose forward and backward allocate a workspace of cuDNN's own size
(`cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize`, `...BackwardExWorkspaceSize`), freed on
return. For each problem (the input's dtype, the weight's dtype, channels, batch and spatial sizes)
this runs `F.batch_norm` forward and backward under ops_truth.py's dispatch mode (OPS_TRUTH_ALL=1) and
writes the records of its batch-norm ops (`cudnn_batch_norm` or `native_batch_norm` and their
backwards, as PyTorch picks), one JSON line each with the problem: what the op requested beyond its
new outputs is the workspace.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# (input dtype, weight dtype): a float32 model; autocast's half input with float32 weights and
# running statistics (batch_norm runs in its input's dtype); a model cast to half
DTYPES = [
    ("float32", "float32"),
    ("float16", "float32"),
    ("bfloat16", "float32"),
    ("float16", "float16"),
    ("bfloat16", "bfloat16"),
]
CHANNELS = [16, 24, 32, 40, 48, 64, 72, 96, 112, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 2048]
SPATIAL_2D = [(7, 7), (14, 14), (28, 28), (56, 56), (112, 112), (17, 17), (35, 35), (64, 64), (128, 128)]
SPATIAL_3D = [(4, 28, 28), (8, 14, 14), (13, 40, 40), (16, 56, 56), (16, 7, 7)]
BATCHES = [8, 32, 1, 64, 128, 2, 16, 96, 256]
# the fields of ops_truth.py's records kept (with the problem) for each batch-norm op
KEEP = ("op", "new", "count", "requested", "rounded")


def problems():
    """Every problem, common ones first (by batch, then spatial size); operands up to 1 GiB."""
    few = bool(os.environ.get("FEW"))
    channels = list(range(1, 16)) if few else CHANNELS
    if os.environ.get("BN_CHANNELS"):
        channels = [int(c) for c in os.environ["BN_CHANNELS"].split(",")]
    dtypes = DTYPES[:2] if few else DTYPES
    out = []
    for bi, n in enumerate(BATCHES):
        for spatial in SPATIAL_2D + SPATIAL_3D:
            for c in channels:
                for x_dtype, w_dtype in dtypes:
                    numel = n * c
                    for s in spatial:
                        numel *= s
                    if numel * 4 <= 1 << 30:
                        out.append({"n": n, "c": c, "spatial": list(spatial), "x": x_dtype, "w": w_dtype, "rank": bi})
    return out


def measure(p, device, out):
    import ops_truth
    import torch
    import torch.nn.functional as F

    # channels-last strides built by a permute, as a convolution leaves them: for one channel,
    # `contiguous(memory_format=...)` would keep the NCHW strides (both layouts agree)
    x = torch.empty(p["n"], *p["spatial"], p["c"], dtype=getattr(torch, p["x"]), device=device)
    x = x.movedim(-1, 1)
    x.normal_()
    x.requires_grad_(True)
    w = torch.ones(p["c"], dtype=getattr(torch, p["w"]), device=device, requires_grad=True)
    b = torch.zeros(p["c"], dtype=getattr(torch, p["w"]), device=device, requires_grad=True)
    rm = torch.zeros(p["c"], dtype=getattr(torch, p["w"]), device=device)
    rv = torch.ones(p["c"], dtype=getattr(torch, p["w"]), device=device)
    lines = []
    ops_truth._out = _Lines(lines)
    with ops_truth.OpsTruth():
        y = F.batch_norm(x, rm, rv, w, b, training=True)
        y.backward(torch.ones_like(y))
    for line in lines:
        r = json.loads(line)
        if "batch_norm" in r["op"]:  # the arguments are the problem's; the other ops allocate nothing
            out.write(json.dumps({"problem": p, **{k: r[k] for k in KEEP}}) + "\n")


class _Lines:
    def __init__(self, lines):
        self.lines = lines

    def write(self, s):
        self.lines.extend(x for x in s.splitlines() if x)


def main():
    sys.path.insert(0, HERE)
    os.environ["OPS_TRUTH_ALL"] = "1"
    import torch

    smoke = bool(os.environ.get("SMOKE"))
    device = "cpu" if smoke else "cuda"
    todo = problems()[:5] if smoke else problems()
    deadline = time.time() + (float(sys.argv[2]) if len(sys.argv) > 2 else 1e9)
    done = 0
    with open(sys.argv[1], "w") as out:
        for p in todo:
            if time.time() > deadline:
                break
            try:
                measure(p, device, out)
            except Exception as e:  # a problem cuDNN refuses is noted, not fatal
                out.write(json.dumps({"problem": p, "error": f"{type(e).__name__}: {str(e)[:200]}"}) + "\n")
            done += 1
            if device == "cuda":
                torch.cuda.empty_cache()
    print(f"{done} of {len(todo)} problems", file=sys.stderr)


if __name__ == "__main__":
    main()
