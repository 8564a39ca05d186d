"""blind293/kh01's forward-AD ops one at a time on the H100 (session 67, helper kh): bytes each op keeps
and its peak above what was live before it, for the forward-gradient MLP's layers (4,096 x 784 input,
3,072 wide, fp32 duals of every parameter), then one whole `functional_call` forward as kh01 runs it.
The twin answers kh01's forward-gradient phase 50,397,184 bytes over the H100's peak; the lines name the
op. Plain python3, a few seconds, < 2 GB."""

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

torch.manual_seed(0)
N, D, H = 4096, 784, 3072


def dual(shape):
    return fwAD.make_dual(torch.randn(*shape, device="cuda"), torch.randn(*shape, device="cuda"))


def measure(tag, fn, *args):
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    kept = torch.cuda.memory_allocated() - base
    print(f"{tag}: kept {kept} peak {torch.cuda.max_memory_allocated() - base}", flush=True)
    return out


x = torch.randn(N, D, device="cuda")
torch.mm(torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda"))  # cuBLAS workspace first
with fwAD.dual_level():
    w1, b1 = dual((H, D)), dual((H,))
    h = measure("linear1 primal input", F.linear, x, w1, b1)
    g = measure("gelu", F.gelu, h)
    del h
    w2, b2 = dual((H, H)), dual((H,))
    h2 = measure("linear2 dual input", F.linear, g, w2, b2)
    del g
    g2 = measure("gelu2", F.gelu, h2)
    del h2
    lw, lb = dual((H,)), dual((H,))
    n = measure("layer_norm", F.layer_norm, g2, (H,), lw, lb)
    del g2
    w3, b3 = dual((10, H)), dual((10,))
    lo = measure("linear3", F.linear, n, w3, b3)
    del n
    y = torch.randint(0, 10, (N,), device="cuda")
    loss = measure("cross_entropy", F.cross_entropy, lo, y)
    del lo, loss, w1, b1, w2, b2, lw, lb, w3, b3
print("live after ops", torch.cuda.memory_allocated())

model = nn.Sequential(
    nn.Linear(D, H), nn.GELU(), nn.Linear(H, H), nn.GELU(), nn.LayerNorm(H), nn.Linear(H, 10)
).cuda()  # fmt: skip
tangents = {n: torch.randn_like(p) for n, p in model.named_parameters()}
BASE = [0]


def after_module(module, args, out):
    print(
        f"  after {type(module).__name__}: alloc {torch.cuda.memory_allocated() - BASE[0]} "
        f"peak {torch.cuda.max_memory_allocated() - BASE[0]}",
        flush=True,
    )


for m in model:
    m.register_forward_hook(after_module)
with fwAD.dual_level():
    duals = {n: fwAD.make_dual(p.detach(), tangents[n]) for n, p in model.named_parameters()}
    BASE[0] = torch.cuda.memory_allocated()
    loss = measure(
        "functional_call forward + cross_entropy",
        lambda: F.cross_entropy(functional_call(model, duals, (x,)), y),
    )
    jvp = measure("unpack_dual", lambda: fwAD.unpack_dual(loss).tangent)
