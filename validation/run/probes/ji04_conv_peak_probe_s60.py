"""GPU probe for blind268/ji04 (session 60, helper b8; not run yet): which cuDNN workspace lifts
fastMRI VarNet's training peak 2,281,006,592 bytes above the twin's (H200 16,674,753,024; twin
14,393,746,432, every allocated/requested figure after the phase equal in requested bytes).

The twin's highest point is the start of the backward through the last cascade; a single workspace
there of 2.44-2.52 GB would give the H200's peak, where the twin estimates the batch-2 640 x 368
convolutions' workspaces from neighbours at 0.4-97 MB (named unmeasured). This prints, per problem and
op (forward, dgrad, wgrad; fp32, cuDNN heuristics, benchmark off as in ji04), the bytes the op takes
at its peak beyond its operands and outputs: cuDNN's workspace (`run_conv_plan`'s, Conv_v8.cpp).
The full list of ji04's unmeasured problems is validation/run/conv_problems_blind268.json
(`cd validation/run && python conv_sweep.py run conv_problems_blind268.json OUTDIR 300`, then
conv_table.py, for the tables).

Run: python validation/run/probes/ji04_conv_peak_probe_s60.py"""

import torch

aten = torch.ops.aten
# (batch, input C, H, W, weight, padding): the cascades' full-resolution convolutions, then the
# sensitivity net's at batch 32
PROBLEMS = [
    (2, 18, 640, 368, (18, 18, 3, 3), 1),
    (2, 36, 640, 368, (18, 36, 3, 3), 1),
    (2, 18, 640, 368, (2, 18, 1, 1), 0),
    (2, 2, 640, 368, (18, 2, 3, 3), 1),
    (32, 8, 640, 368, (8, 8, 3, 3), 1),
    (32, 16, 640, 368, (8, 16, 3, 3), 1),
]


def call(op, x, w, grad, args):
    if op == "forward":
        return aten.convolution(x, w, None, *args)
    mask = [True, False, False] if op == "dgrad" else [False, True, False]
    return aten.convolution_backward(grad, x, w, None, *args, mask)


for n, c, h, w_, wshape, pad in PROBLEMS:
    x = torch.randn(n, c, h, w_, device="cuda")
    w = torch.randn(wshape, device="cuda")
    args = ([1, 1], [pad, pad], [1, 1], False, [0, 0], 1)
    grad = torch.randn_like(aten.convolution(x, w, None, *args))
    for op in ("forward", "dgrad", "wgrad"):
        call(op, x, w, grad, args)  # a first call: cuDNN's plan built
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        r = call(op, x, w, grad, args)
        torch.cuda.synchronize()
        res = [t for t in (r if isinstance(r, tuple) else (r,)) if t is not None]
        outs = sum(t.untyped_storage().nbytes() for t in res)
        print(
            f"{op} input {(n, c, h, w_)} weight {wshape} padding {pad}: peak above start "
            f"{torch.cuda.max_memory_allocated() - base}, outputs {outs}, "
            f"workspace {torch.cuda.max_memory_allocated() - base - outs}"
        )
        del r, res
    del x, w, grad
    torch.cuda.empty_cache()
