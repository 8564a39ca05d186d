"""Session 64 (helper mx): ap63's probe reordered, its CTC part redone over the paths torch 2.11 takes.

    python3 probes/mx64_ctc_tensor_lengths_and_no_meta_ops_probe.py   (from validation/run; < 30 s, < 2 GB)

ap63_cudnn_ctc_and_no_meta_ops_probe.py raised on the H100 at its first `F.ctc_loss` (host int32
targets and lengths, reduction mean): native/LossCTC.cpp's `ctc_loss` overload for tensors asks
`_use_cudnn_ctc_loss.Tensor` (no host-targets condition) and, where it holds, runs `ctc_loss_impl`
over the tensors: `_cudnn_ctc_loss.Tensor`, then the mean divides by `target_lengths.clamp_min(1)`
on the lengths' device -- host lengths raise in TensorIterator. Its part 2 never ran.

Part 2 (first now): the ops without meta kernels, unchanged from ap63.
Part 1, CTC, each case's grad_fn chain, forward/backward alloc/free events (memory history), or
the exception and what stays allocated after it:
  dev_mean    int32 targets and lengths on the device, mean        (_cudnn_ctc_loss.Tensor, cuDNN v8)
  host_sum    int32 targets and lengths on the host, sum           (.Tensor, copies them to the device)
  host_mean   int32 targets and lengths on the host, mean          (expected: the device error)
  list_mean   host int32 targets, lengths as Python lists, mean    (IntArrayRef: _cudnn_ctc_loss, cuDNN v7)
  dev_short   as dev_mean with one input shorter than T            (.Tensor does not check full inputs)
  dev_long64  int32 device targets, int64 device lengths, mean     (expected: the native kernel)
"""

import torch
import torch.nn.functional as F
from torch import distributions as D

dev = "cuda"
torch.manual_seed(64)


def events(fn, tag):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    err = None
    try:
        out = fn()
    except Exception as e:
        out, err = None, e
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    evs = [
        (e["action"], e["size"])
        for e in snap["device_traces"][0]
        if e["action"] in ("alloc", "free_requested")
    ]
    print(tag, "events", evs)
    if err is not None:
        print(tag, "raised", type(err).__name__, str(err).splitlines()[0])
    return out


# part 2: ops without meta kernels (ap63's part 2, as it was)
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
a = g = b = cnt = x = y = one = z = o = w = sc = zc = q = None
torch.cuda.empty_cache()
print("part2 done")


# part 1: CTC over the overloads' paths
def case(tag, T, B, C, L, where, lengths, reduction, short=False):
    logits = torch.randn(T, B, C, device=dev, requires_grad=True)
    lp = logits.log_softmax(2)
    targets = torch.randint(1, C, (B * L,), dtype=torch.int32)
    il = torch.full((B,), T, dtype=torch.int32)
    if short:
        il[0] = T - 1
    tl = torch.full((B,), L, dtype=torch.int32)
    if where == "dev":
        targets = targets.to(dev)
    if lengths == "dev32":
        il, tl = il.to(dev), tl.to(dev)
    elif lengths == "dev64":
        il, tl = il.to(dev, torch.long), tl.to(dev, torch.long)
    elif lengths == "list":
        il, tl = il.tolist(), tl.tolist()
    name = f"ctc {tag} T{T} B{B} C{C} L{L}"
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = events(
        lambda: F.ctc_loss(lp, targets, il, tl, reduction=reduction, zero_infinity=True), name + " fwd"
    )
    print(
        f"{name} after_fwd_above_base {torch.cuda.memory_allocated() - base} "
        f"fwd_peak_above_base {torch.cuda.max_memory_allocated() - base} raw_grad {T * B * C * 4}"
    )
    if loss is not None:
        chain, node = [], loss.grad_fn
        while node is not None and len(chain) < 6:
            chain.append(type(node).__name__)
            nxt = [f for f, _ in node.next_functions if f is not None]
            node = nxt[0] if nxt else None
        print(f"{name} grad_fns {chain}")
        events((loss.sum() if reduction == "none" else loss).backward, name + " bwd")
    logits = lp = loss = targets = il = tl = None
    torch.cuda.empty_cache()


for T, B, C, L in [(200, 64, 80, 30), (100, 256, 6000, 40)]:
    case("dev_mean", T, B, C, L, "dev", "dev32", "mean")
    case("host_sum", T, B, C, L, "host", "host32", "sum")
    case("host_mean", T, B, C, L, "host", "host32", "mean")
    case("list_mean", T, B, C, L, "host", "list", "mean")
case("dev_short", 400, 32, 37, 120, "dev", "dev32", "mean", short=True)
case("dev_long64", 64, 512, 96, 20, "dev", "dev64", "mean")
case("dev_none", 64, 512, 96, 20, "dev", "dev32", "none")
print("done")
