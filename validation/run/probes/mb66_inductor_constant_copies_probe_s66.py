"""Probe (session 66, helper mb): how many device copies of a graph's host constant Inductor keeps.

blind283/jx05 (timm CSATv2 under torch.compile) ends its phases with requested bytes 8,192 above
the H100's in the twin (allocated +804,864): 16 x 512. Its DCT stem indexes by a Python list of 64
(`x[:, :, self.permutation]`), a host int64 constant `_tensor_constant0` in the traced graph, which
a CUDA kernel reads: `GraphLowering.constant_name` (torch/_inductor/graph.py) copies it to the device
(`self.constants[name].to(device_override)`) each time `ConstantBuffer.make_loader`'s loader runs
(ir.py), and `allocate_non_dup_const_name` keeps each copy (`is_same_tensor` compares storage
pointers, a fresh copy never matches). The twin made 17 such copies of 512 bytes for the whole model
(18 calls, one with no device). This probe counts them on the GPU for (a) a plain compiled list index
and (b) CSATv2's stem (`timm.models.csatv2.LearnableDct2d`, timm 1.0.29), each compiled fresh.
Lines: the case, the constant_name calls that name a device, the distinct constants they returned,
how many of those copies are still alive after the first call (weak references, after gc), and the
bytes memory_allocated grew by across compile + first call with the output dropped.
Decides: alive == copies on the GPU means each loader call leaves a live 512-byte copy (the twin's
rule, and jx05's 8,192 lies elsewhere); alive == 1 (or allocated 512) means the GPU keeps one.
Plain python3, < 40 s, < 1 GB. The twin (vramscope run --gpu h100, main 06dc674c) prints:
a list index calls 9 copies 9 alive 9 allocated 4608
b csatv2 stem calls 8 copies 8 alive 8 allocated 33558528
memory_allocated 34166272
"""

import gc
import weakref

import torch
from torch._inductor.graph import GraphLowering

calls = []
copies = {}
orig = GraphLowering.constant_name


def constant_name(self, name, device_override):
    new = orig(self, name, device_override)
    if device_override is not None:
        calls.append(name)
        c = self.constants[new]
        if new not in copies:
            copies[new] = weakref.ref(c)
    return new


GraphLowering.constant_name = constant_name
# every graph lowered here, none loaded from an earlier run's caches (a loaded graph makes no calls)
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False


def run(tag, module, x):
    calls.clear()
    copies.clear()
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    compiled = torch.compile(module)
    out = compiled(x)
    del out
    gc.collect()
    torch.cuda.synchronize()
    grew = torch.cuda.memory_allocated() - before
    alive = sum(1 for r in copies.values() if r() is not None)
    print(tag, "calls", len(calls), "copies", len(copies), "alive", alive, "allocated", grew)
    return compiled


perm = [(i * 37) % 64 for i in range(64)]


class ListIndex(torch.nn.Module):
    def forward(self, x):
        return (x[:, :, perm] * 2.0 + 1.0).sum(-1)


x = torch.rand(256, 3, 64, device="cuda")
keep_a = run("a list index", ListIndex(), x)

from timm.models.csatv2 import LearnableDct2d  # noqa: E402

torch.manual_seed(0)
stem = LearnableDct2d(8, out_chs=32, device="cuda")
img = torch.rand(2, 3, 128, 128, device="cuda")
with torch.no_grad():
    keep_b = run("b csatv2 stem", stem, img)
print("memory_allocated", torch.cuda.memory_allocated())
