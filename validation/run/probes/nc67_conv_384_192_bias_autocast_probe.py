"""GPU probe (session 67, helper nc): which cuDNN forward plan the bfloat16 (N, 384, 16, 16) by
(192, 384, 3, 3), padding 1 convolution takes, called as conv_sweep.py calls it and as a script does.

The table holds 22,298,867 bytes at batch 64 (and 43,270,451 at 128) from blind113/di06's per-op truth
on an H200 (a `conv2d` of an `nn.Conv2d` with its bias under `inference_mode` and bf16 autocast, the
input a `torch.cat`); session 67's H100 sweep read 20,201,619 at 64 (`aten.convolution` of `torch.empty`
bf16 operands, no bias). Both are one allocation beyond the output: two plans. cuDNN takes no bias
(ConvShared.cpp: "cuDNN convolutions does not handle bias") and the plan cache is keyed by the
problem, layout, deterministic, allow_tf32 and the three pointers' alignments (Conv_v8.cpp), so a
same-GPU difference would be a surprise. Each no-autocast case runs in a fresh thread
(`benchmark_cache` is `thread_local`), the two autocast ones in the main thread (each the only call of
its key there); ops_truth.py's mode (OPS_TRUTH_ALL=1) records the ops: a line per convolution,
`workspace` = requested - new outputs, as conv_table.py reads it. Line 1 against line 2 (the same
batch-64 key on one GPU) decides: equal -> the call path does not matter and the table's H200 value
against the H100 sweep's is the GPU's choice; different -> the call path changes cuDNN's plan.

Run (from validation/run): OPS_TRUTH_ALL=1 python3 probes/nc67_conv_384_192_bias_autocast_probe.py
"""

import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["OPS_TRUTH_ALL"] = "1"

import ops_truth
import torch
import torch.nn.functional as F
from torch import nn

aten = torch.ops.aten
ARGS = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)


class Lines:
    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines.append(s)


def sweep_style(n, bias):
    x = torch.empty(n, 384, 16, 16, dtype=torch.bfloat16, device="cuda")
    w = torch.empty(192, 384, 3, 3, dtype=torch.bfloat16, device="cuda")
    b = torch.zeros(192, dtype=torch.bfloat16, device="cuda") if bias else None
    with ops_truth.OpsTruth():
        return aten.convolution(x, w, b, *ARGS)


def module_autocast(n, mode):
    torch.manual_seed(0)
    conv = nn.Conv2d(384, 192, 3, padding=1).cuda()
    parts = [torch.randn(n, 192, 16, 16, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    if mode == "train":
        with ops_truth.OpsTruth(), torch.autocast("cuda", dtype=torch.bfloat16):
            return conv(torch.cat(parts, 1))
    with ops_truth.OpsTruth(), torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        return conv(torch.cat(parts, 1))


def functional_no_bias(n):
    x = torch.randn(n, 384, 16, 16, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(192, 384, 3, 3, device="cuda", dtype=torch.bfloat16)
    with ops_truth.OpsTruth(), torch.inference_mode():
        return F.conv2d(x, w, None, 1, 1)


# (name, call, in a fresh thread): the autocast cases run in the main thread (the twin's autocast does
# not follow a thread of its own), each the only call of its key there
CASES = [
    ("di06_inference_autocast_bias", lambda: module_autocast(64, "inference"), False),
    ("sweep_no_bias", lambda: sweep_style(64, False), True),
    ("aten_with_bias", lambda: sweep_style(64, True), True),
    ("f_conv2d_inference_no_bias", lambda: functional_no_bias(64), True),
    ("di06_train_autocast_bias", lambda: module_autocast(128, "train"), False),
    ("sweep_no_bias", lambda: sweep_style(128, False), True),
]

for name, fn, fresh in CASES:
    sink = Lines()
    ops_truth._out = sink

    def target(fn=fn):
        out = fn()
        torch.cuda.synchronize()
        del out

    if fresh:
        t = threading.Thread(target=target)
        t.start()
        t.join()
    else:
        target()
    for line in sink.lines:
        r = json.loads(line)
        if "conv" not in r.get("op", ""):
            continue
        n = r["args"][0][0][0]
        print(
            f"{name} n={n} op={r['op']} count={r['count']} new={r['new']} requested={r['requested']} "
            f"workspace={r['requested'] - sum(r['new'])}"
        )
    torch.cuda.empty_cache()
print(f"gpu {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
