"""Probe (session 64, helper rp): a random op on a capturing stream draws from a generator whose
state captures only if it was registered with the graph before `capture_begin` (the default
generator always is); otherwise `CUDAGeneratorState::increase` (CUDAGeneratorImpl.cpp) raises
"Attempt to increase offset for a CUDA generator not in capture mode.". A registered generator
counts its draws within the graph (its own offset does not move during the capture) and each replay
moves it on by the graph's whole increment. Plain python3, < 5 s, < 100 MB.

The twin (vramscope run --gpu h100) at a80c0cf9 (a registered custom generator took its draws as
outside a capture and no replay moved it):
1 unregistered: captured without raising
2 registered: offset after capture 24 after replay 24 after second replay 24
and with rp-s64's rule (`_philox.draw`, the twin's `CUDAGraph.register_generator_state`):
1 unregistered: RuntimeError Attempt to increase offset for a CUDA generator not in capture mode.
2 registered: offset after capture 0 after replay 12 after second replay 24
"""

import torch

gen = torch.Generator(device="cuda")
gen.manual_seed(7)
p = torch.rand(1 << 16, device="cuda")

graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        torch.bernoulli(p, generator=gen)
    print("1 unregistered: captured without raising")
except RuntimeError as e:
    print("1 unregistered: RuntimeError", str(e).splitlines()[0])

graph = torch.cuda.CUDAGraph()
graph.register_generator_state(gen)
with torch.cuda.graph(graph):
    out = torch.bernoulli(p, generator=gen)
captured = gen.get_offset()
graph.replay()
first = gen.get_offset()
graph.replay()
torch.cuda.synchronize()
second = gen.get_offset()
print(f"2 registered: offset after capture {captured} after replay {first} after second replay {second}")
