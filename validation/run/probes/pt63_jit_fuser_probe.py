"""Session 63 probe (helper pt) for blind280/ju04: does TorchScript's profiling executor fuse a
traced CUDA graph's elementwise ops (NNC / TensorExpr fuser) in torch 2.11, and what does each run
of a traced, a frozen and an optimize_for_inference'd residual block allocate? Prints the fuser
flags, each run's peak and allocated bytes, and the last executed optimized graph's fusion-group
and fused-op node kinds. Plain python3, a few seconds, under 1 GB."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
dev = "cuda"
print("texpr_fuser_enabled", torch._C._jit_texpr_fuser_enabled())
print("can_fuse_on_gpu", torch._C._jit_can_fuse_on_gpu())
print("profiling_executor", torch._C._get_graph_executor_optimize())
print("num_profiled_runs", torch._C._jit_get_num_profiled_runs())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(64, 64, 3, 1, 1, bias=False)
        self.b1 = nn.BatchNorm2d(64)
        self.c2 = nn.Conv2d(64, 64, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(64)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + x)


m = Block().to(dev).eval()
x = torch.randn(32, 64, 56, 56, device=dev)  # 25.7 MB
with torch.no_grad():
    m(x)
torch.cuda.synchronize()


def runs(tag, fn, n=4):
    for i in range(n):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            out = fn(x)
        torch.cuda.synchronize()
        print(
            f"{tag} run {i}: peak-base {torch.cuda.max_memory_allocated() - base} "
            f"alloc-base {torch.cuda.memory_allocated() - base}"
        )
        del out
    g = torch.jit.last_executed_optimized_graph()
    kinds = None if g is None else sorted({n.kind() for n in g.nodes()})
    print(f"{tag} last optimized graph node kinds: {kinds}")


runs("eager", m, 2)
with torch.no_grad():
    traced = torch.jit.trace(m, x[:4])
runs("traced", traced)
frozen = torch.jit.freeze(traced)
runs("frozen", frozen)
opt = torch.jit.optimize_for_inference(frozen)
print("optimize_for_inference returns the frozen module itself:", opt is frozen)
runs("optimized", opt)
print(opt.graph)
