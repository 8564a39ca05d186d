"""Forward-mode AD (`fwAD.make_dual`, duals of the input and of every affine parameter, nothing
requiring grad) through the normalizations and the logsumexp family, one op at a time (session 68,
helper pb): bytes each call keeps and its peak above what was live before it. Their jvp formulas
(FunctionsManual.cpp: `batch_norm_jvp`, `group_norm_jvp` and its mean / invstd jvps, `rms_norm_jvp`
and `rms_norm_rstd_jvp`, `logsumexp_jvp` under `_softmax`, `_log_softmax` and `logsumexp`) run in
place on CUDA tensors and out of place on tensor-subclass-like ones, which the twin's are (a dispatch
mode is on). Plain python3, a few seconds, < 2 GB."""

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

torch.manual_seed(0)


def dual(*shape):
    return fwAD.make_dual(torch.randn(*shape, device="cuda"), torch.randn(*shape, device="cuda"))


def measure(tag, fn, *args, **kwargs):
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args, **kwargs)
    kept = torch.cuda.memory_allocated() - base
    print(f"{tag}: kept {kept} peak {torch.cuda.max_memory_allocated() - base}", flush=True)
    return out


torch.mm(torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda"))  # cuBLAS workspace first
with fwAD.dual_level():
    # batch norm: (32, 64, 32, 32) fp32 = 8 MiB, cuDNN's spatial kernel in training
    x = dual(32, 64, 32, 32)
    w, b = dual(64), dual(64)
    rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
    y = measure("batch_norm train", F.batch_norm, x, rm, rv, w, b, training=True)
    del y
    y = measure("batch_norm eval", F.batch_norm, x, rm, rv, w, b, training=False)
    del y
    y = measure("batch_norm train no affine", F.batch_norm, x, None, None, training=True)
    del y
    # group norm: 8 groups of the same input
    y = measure("group_norm", F.group_norm, x, 8, w, b)
    del y
    y = measure("group_norm no affine", F.group_norm, x, 8)
    del y
    # weight and bias without tangents (zero tensors in the formulas: `_affine_jvp`'s out-of-place
    # branch, `_norm_jvp` still in place on CUDA); the twin keeps PyTorch's path for these
    pw, pb = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    y = measure("batch_norm train plain affine", F.batch_norm, x, None, None, pw, pb, training=True)
    del y
    y = measure("layer_norm plain affine", F.layer_norm, x, (32,), pw[:32], pb[:32])
    del y, x, w, b, pw, pb
    # rms norm: (4096, 1024) fp32 = 16 MiB over the last dimension
    h = dual(4096, 1024)
    g = dual(1024)
    y = measure("rms_norm", F.rms_norm, h, (1024,), g)
    del y
    y = measure("rms_norm no weight", F.rms_norm, h, (1024,))
    del y
    # the logsumexp family over (4096, 1000) fp32 logits (15.6 MiB)
    lo = dual(4096, 1000)
    t = torch.randint(0, 1000, (4096,), device="cuda")
    y = measure("log_softmax", F.log_softmax, lo, dim=-1)
    del y
    y = measure("softmax", F.softmax, lo, dim=-1)
    del y
    y = measure("logsumexp", torch.logsumexp, lo, dim=-1)
    del y
    y = measure("cross_entropy", F.cross_entropy, lo, t)
    del y, lo, h, g
print("live after ops", torch.cuda.memory_allocated())

# the same formulas under torch.func.jvp (functorch's wrappers; every operand a primal with a tangent):
# on CUDA the formulas see the unwrapped dual tensors; the twin's rules above take `fwAD` duals only
from torch.func import jvp  # noqa: E402


def rand(*shape):
    return torch.randn(*shape, device="cuda")


x, w, b = rand(32, 64, 32, 32), rand(64), rand(64)
tx, tw, tb = rand(32, 64, 32, 32), rand(64), rand(64)


def bn(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True)


def ln(x, w, b):
    return F.layer_norm(x, (32,), w[:32], b[:32])


out = measure("func.jvp batch_norm train", jvp, bn, (x, w, b), (tx, tw, tb))
del out
out = measure("func.jvp layer_norm", jvp, ln, (x, w, b), (tx, tw, tb))
del out, x, w, b, tx, tw, tb
lo, tlo = rand(4096, 1000), rand(4096, 1000)
t = torch.randint(0, 1000, (4096,), device="cuda")
out = measure("func.jvp cross_entropy", jvp, lambda z: F.cross_entropy(z, t), (lo,), (tlo,))
del out, lo, tlo
print("live at end", torch.cuda.memory_allocated())
