"""Probe (session 64, helper rp): autocast's cast cache is one global map (autocast_mode.cpp
`get_cached_casts`, under a mutex) but its `nesting` count is thread_local, and a backward pass runs
on the autograd engine's device thread, whose count starts at 0. So when a program calls backward
*inside* its own autocast region, an autocast context that the pass enters and leaves (non-reentrant
checkpoint's recompute in the unpack hook, reentrant checkpoint's recompute, a `custom_bwd`
Function's backward) brings the device thread's count back to 0 and clears the whole cache: the
forward's cached weight casts die in the backward, not at the program's exit. Without such a
context (case d) the casts stay cached until the region ends. Case f: the cache flag is
thread_local as well, so inside a `cache_enabled=False` region a backward still caches (the device
thread's flag is on) what its autocast kernels cast.

Each case prints memory_allocated (relative to the case's start) after the forward, after the
backward (still inside the region) and after the region. Plain python3, a few seconds, < 1 GB.
The twin's lines (vramscope run --gpu h100) at a80c0cf9 (before the rule: the program's thread's
count, so the casts lived to the region's end):
a_checkpoint_nonreentrant: after forward 76554752 after backward 175136768 after region 139476992
b_checkpoint_reentrant: after forward 41951744 after backward 114319360 after region 72368128
c_custom_bwd: after forward 41951744 after backward 39854080 after region 4194304
d_plain: after forward 41951744 after backward 106979328 after region 71319552
e_backward_outside: after forward 39854592 after region 4194816 after backward 71319552
f_cache_disabled_region: after forward 4194816 after backward 4194304 after region 4194304
and with the device thread's count (rp-s64, `_capture._autocast_increment_nesting`): the same but
a 139476992 / 139476992, b 72368128 / 72368128, c 4194304 / 4194304 after backward / after region
(the weight's, bias's and x's casts, 35,659,776 bytes, die in the backward), and with the device
thread's `cache_enabled` (rp-s64, `_capture._is_autocast_cache_enabled`): f after backward 37748736
(the weight's bf16 cast, 33,554,432 bytes, cached in the backward), after region 4194304.
"""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
dev = "cuda"
lin = nn.Linear(4096, 4096).to(dev)  # weight 64 MiB fp32, its bf16 cast 32 MiB
x = torch.randn(256, 4096, device=dev, requires_grad=True)  # a leaf: its cast is cached too (2 MiB)


class CustomLinear(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, inp, w, b):
        ctx.save_for_backward(inp, w)
        return nn.functional.linear(inp, w, b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        _inp, w = ctx.saved_tensors
        return g @ w.to(g.dtype), None, None


def run(case):
    lin.zero_grad(set_to_none=True)
    x.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        if case == "a_checkpoint_nonreentrant":
            y = checkpoint(lin, x, use_reentrant=False)
        elif case == "b_checkpoint_reentrant":
            y = checkpoint(lin, x, use_reentrant=True)
        elif case == "c_custom_bwd":
            y = CustomLinear.apply(x, lin.weight, lin.bias)
        else:
            y = lin(x)
        loss = y.float().square().mean()
        fwd = torch.cuda.memory_allocated() - base
        loss.backward()
        del y, loss
        bwd = torch.cuda.memory_allocated() - base
    out = torch.cuda.memory_allocated() - base
    print(f"{case}: after forward {fwd} after backward {bwd} after region {out}")


for case in ("a_checkpoint_nonreentrant", "b_checkpoint_reentrant", "c_custom_bwd", "d_plain"):
    run(case)
# the same outside the region for contrast: backward after the region (the usual loop)
lin.zero_grad(set_to_none=True)
x.grad = None
base = torch.cuda.memory_allocated()
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = checkpoint(lin, x, use_reentrant=False).float().square().mean()
    fwd = torch.cuda.memory_allocated() - base
after_region = torch.cuda.memory_allocated() - base
loss.backward()
del loss
print(
    f"e_backward_outside: after forward {fwd} after region {after_region} after backward "
    f"{torch.cuda.memory_allocated() - base}"
)


# f: `cache_enabled` is thread_local too: inside a `cache_enabled=False` region a custom backward's
# autocast cast of the raw weight is cached (the device thread's flag is on) and lives to the exit
class RawWeightBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, w):
        ctx.save_for_backward(w)
        return inp @ w.t()

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g @ w, None


lin.zero_grad(set_to_none=True)
x.grad = None
base = torch.cuda.memory_allocated()
with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
    loss = RawWeightBackward.apply(x, lin.weight).float().square().mean()
    fwd = torch.cuda.memory_allocated() - base
    loss.backward()
    del loss
    bwd = torch.cuda.memory_allocated() - base
print(
    f"f_cache_disabled_region: after forward {fwd} after backward {bwd} after region "
    f"{torch.cuda.memory_allocated() - base}"
)
