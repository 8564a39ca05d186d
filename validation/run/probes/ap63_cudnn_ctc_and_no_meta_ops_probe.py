"""Session 63 (helper ap), blind281 probing: what the twin's new rules assume, measured.

    python3 probes/ap63_cudnn_ctc_and_no_meta_ops_probe.py        (from validation/run; < 30 s, < 2 GB)

Part 1, cuDNN's CTC loss: `F.ctc_loss` with float32 log-probs, 1-D int32 targets on the host and
every input of full length takes `_cudnn_ctc_loss` (native/LossCTC.cpp `ctc_loss_impl`). For each
(T, B, C, target length) it prints the loss's grad_fn (CudnnCtcLossBackward0 confirms the path)
and every allocation and free of the forward and the backward from the memory history
(`torch.cuda.memory._record_memory_history`), so the workspace of `cudnnGetCTCLossWorkspaceSize`
(the twin takes 0 bytes, named unmeasured) can be read as the block allocated and freed between
the raw gradient (T*B*C*4) and the losses (B*4).
Part 2, ops without meta kernels the twin now has rules for: `torch.binomial`,
`_standard_gamma_grad` (Gamma.rsample backward), `_dirichlet_grad` (Beta.rsample backward),
`multi_margin_loss` (+ backward, with a transposed input), `fractional_max_pool3d` backward,
`_fake_quantize_learnable_per_channel_affine` (+ backward): each op's allocations, as above.
"""

import torch
import torch.nn.functional as F
from torch import distributions as D

dev = "cuda"
torch.manual_seed(63)


def events(fn, tag):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    evs = [
        (e["action"], e["size"])
        for e in snap["device_traces"][0]
        if e["action"] in ("alloc", "free_requested")
    ]
    print(tag, "events", evs)
    return out


# part 1: cuDNN CTC
for T, B, C, L in [(200, 64, 80, 30), (100, 256, 6000, 40), (400, 32, 37, 120), (64, 512, 96, 20)]:
    logits = torch.randn(T, B, C, device=dev, requires_grad=True)
    lp = logits.log_softmax(2)
    targets = torch.randint(1, C, (B * L,), dtype=torch.int32)
    # session 64: int32 length tensors raised on the H100 (the mean's division by the host lengths);
    # lists take the IntArrayRef overload's cuDNN path
    try:
        F.ctc_loss(
            lp, targets, torch.full((B,), T, dtype=torch.int32), torch.full((B,), L, dtype=torch.int32)
        )
        print(f"ctc T{T} B{B} C{C} L{L} int32 length tensors: ok")
    except RuntimeError as e:
        print(f"ctc T{T} B{B} C{C} L{L} int32 length tensors: RAISED {str(e)[:90]}")
    il, tl = [T] * B, [L] * B
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = events(
        lambda lp=lp, targets=targets, il=il, tl=tl: F.ctc_loss(lp, targets, il, tl, zero_infinity=True),
        f"ctc T{T} B{B} C{C} L{L} fwd",
    )
    chain, node = [], loss.grad_fn
    while node is not None and len(chain) < 6:
        chain.append(type(node).__name__)
        nxt = [f for f, _ in node.next_functions if f is not None]
        node = nxt[0] if nxt else None
    print(
        f"ctc T{T} B{B} C{C} L{L} grad_fns {chain} "
        f"fwd_peak_above_base {torch.cuda.max_memory_allocated() - base} raw_grad {T * B * C * 4}"
    )
    events(loss.backward, f"ctc T{T} B{B} C{C} L{L} bwd")
    logits = lp = loss = None
    torch.cuda.empty_cache()

# part 2: ops without meta kernels
a = torch.rand(1 << 20, device=dev, requires_grad=True)
g = D.Gamma(a + 0.5, 1.0).rsample()
events(lambda: torch.autograd.grad(g.sum(), a), "gamma_rsample_bwd")
b = D.Beta(a + 0.5, 2.0).rsample()
events(lambda: torch.autograd.grad(b.sum(), a), "beta_rsample_bwd")
with torch.no_grad():
    cnt = torch.full((1 << 20,), 10.0, device=dev)
    events(lambda: torch.binomial(cnt, a.detach()), "binomial")
x = torch.randn(4096, 1000, device=dev)
y = torch.randint(0, 1000, (4096,), device=dev)
events(lambda: F.multi_margin_loss(x, y), "multi_margin_loss_mean")
one = torch.ones((), device=dev)
events(
    lambda: torch.ops.aten.multi_margin_loss_backward(one, x.t(), y[:1000], 1, 1.0),
    "multi_margin_bwd_transposed",
)
z = torch.randn(4, 16, 32, 32, 32, device=dev, requires_grad=True)
o = F.fractional_max_pool3d(z, 2, output_ratio=0.5)
events(lambda: torch.autograd.grad(o.sum(), z), "fractional_max_pool3d_bwd")
w = torch.randn(256, 1024, device=dev, requires_grad=True)
sc = torch.full((256,), 0.1, device=dev, requires_grad=True)
zc = torch.zeros(256, device=dev, requires_grad=True)
q = events(
    lambda: torch._fake_quantize_learnable_per_channel_affine(w, sc, zc, 0, 0, 255, 1.0),
    "lsq_per_channel_fwd",
)
events(lambda: torch.autograd.grad(q.sum(), [w, sc, zc]), "lsq_per_channel_bwd")
print("done")
