"""What a CUDA module moved to the host lets go of while a finished autograd graph still holds it.

    python3 probes/lead72_module_to_cpu_probe.py [bwd] [keep]

A Linear(1024, 1024) on the GPU runs one forward (and a backward with `bwd`); with `keep` the loss
(whose graph holds the parameters' AccumulateGrad nodes) stays alive. After `m.to("cpu")` the line
says how much the allocator still holds. The twin answers the same script under `vramscope run`.
"""

import sys

import torch

flags = set(sys.argv[1:])
m = torch.nn.Linear(1024, 1024).cuda()
x = torch.randn(8, 1024, device="cuda")
y = m(x).sum()
if "bwd" in flags:
    y.backward(retain_graph="keep" in flags)
m.weight.grad = None
m.bias.grad = None
if "keep" not in flags:
    del y
print("before", torch.cuda.memory_allocated())
m.to("cpu")
print(sorted(flags), "after cpu", torch.cuda.memory_allocated(), "param bytes", 1024 * 1024 * 4 + 4096)
