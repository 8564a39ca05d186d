"""Probe (session 67, helper na): Inductor's device copies of a compiled region's data constants of
more than 8 elements, by how the program made them.

Inductor inlines a 1-D constant of 8 elements or fewer (`GraphLowering.can_inline_constant`) and
keeps a larger one as a `ConstantBuffer`; a CUDA kernel reading a host constant gets a device copy
from `GraphLowering.constant_name` (`.to(device_override)`, torch/_inductor/graph.py), one for each
call of `ConstantBuffer.make_loader`'s loader under `constant_to_device` (ir.py), each kept in the
graph's `constants` (the compiled graph holds them, output_code.py). On the H100 a compiled Python
list index of 64 made one call and one 512-byte block (mb66 probe: its constant is CUDA, the trace's
`indexing_tensor_from_data` made it on the indexed tensor's device). Read from the source, so is
`torch.tensor(data, device="cuda")` (`internal_new_from_data` copies to the device under the trace),
while `torch.tensor(data).cuda()` and a host computation moved afterwards keep a host constant, copied
once per loader call. The twin cannot tell the last two from the first (its trace makes every such
constant on the host): these lines decide which rule holds for each.

Each case compiled fresh (dynamo reset, caches off); line: `CASE calls N copies C alive A allocated B
dropped D`: `constant_name` calls naming a device, the distinct constants they returned, how many are
alive after the first call (weak references), memory_allocated's growth across compile and first call
(output dropped), and after the compiled function is dropped and collected. Plain python3, < 40 s,
< 1 GB. The twin (na-s67; main 8ac162b5 before it: calls 8, 5, 22, 5, 6, each call a live copy):
    list_index calls 1 copies 1 alive 1 allocated 512 dropped 512
    tensor_on_device calls 1 copies 1 alive 1 allocated 512 dropped 512
    as_tensor_2d_on_device calls 4 copies 1 alive 1 allocated 512 dropped 512
    tensor_then_cuda calls 1 copies 1 alive 1 allocated 512 dropped 512
    host_math_then_to calls 1 copies 1 alive 1 allocated 512 dropped 512
    small_tensor_then_cuda calls 0 copies 0 alive 0 allocated 512 dropped 512
    memory_allocated 11264
("dropped": the twin's compiled graph outlives the function, session 66's open line.)
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
        if new not in copies:
            copies[new] = weakref.ref(self.constants[new])
    return new


GraphLowering.constant_name = constant_name
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False

perm = [(i * 37) % 64 for i in range(64)]
data = [float(i) for i in range(16)]


def list_index(x):
    return (x[:, perm] * 2.0).sum(-1)


def tensor_on_device(x):
    return x[:, :16] * torch.tensor(data, device=x.device)


def as_tensor_2d_on_device(x):
    return x[:, :16] + torch.as_tensor(data, device="cuda").reshape(4, 4).repeat(1, 4).sum(0)


def tensor_then_cuda(x):
    return x[:, :16] * torch.tensor(data).cuda()


def host_math_then_to(x):
    return x[:, :16] * (torch.tensor(data) * 2.0).to(x.device)


def small_tensor_then_cuda(x):
    # 4 elements: inlined by Inductor, so on the GPU a host constant leaves no block at all
    return x[:, :4] * torch.tensor([1.0, 2.0, 3.0, 4.0]).cuda()


x = torch.rand(32, 64, device="cuda")
for fn in (
    list_index,
    tensor_on_device,
    as_tensor_2d_on_device,
    tensor_then_cuda,
    host_math_then_to,
    small_tensor_then_cuda,
):
    calls.clear()
    copies.clear()
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    compiled = torch.compile(fn)
    out = compiled(x)
    del out
    gc.collect()
    torch.cuda.synchronize()
    grew = torch.cuda.memory_allocated() - before
    alive = sum(1 for r in copies.values() if r() is not None)
    del compiled
    torch._dynamo.reset()
    gc.collect()
    dropped = torch.cuda.memory_allocated() - before
    print(
        fn.__name__,
        "calls",
        len(calls),
        "copies",
        len(copies),
        "alive",
        alive,
        "allocated",
        grew,
        "dropped",
        dropped,
    )
print("memory_allocated", torch.cuda.memory_allocated())
