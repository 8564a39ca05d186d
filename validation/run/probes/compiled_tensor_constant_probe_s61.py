"""Session 61 (helper hf): what a compiled region's `torch.tensor(data, device="cuda")` holds on the GPU.

The twin (914303af) copies the data into a fresh CUDA buffer at each call; PyTorch's trace (as read from
the source: `internal_new_from_data` makes the tensor on the device, `aten.lift_fresh` turns it into a
graph constant, Inductor keeps constants on their device) should also hold one 512-byte block per
constant from the first call on, for as long as the compiled function lives. Prints
`torch.cuda.memory_allocated()` and the allocator's active blocks after each step; run plainly:
    python3 validation/run/probes/compiled_tensor_constant_probe_s61.py
and under the twin (`vramscope run --gpu h200 ...`) to compare line by line."""

import gc

import torch


def line(tag):
    s = torch.cuda.memory_stats()
    print(f"{tag}: allocated {torch.cuda.memory_allocated()} active_blocks {s.get('active.all.current', 0)}")


x = torch.randn(4, 16, device="cuda")
line("input")


def f(x):
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
    return x[:, :4] * w


cf = torch.compile(f, fullgraph=True)
y = cf(x)
line("first_call_output_alive")
del y
line("first_call_output_freed")
y = cf(x)
del y
line("second_call_output_freed")
del cf
torch._dynamo.reset()
gc.collect()
line("compiled_function_dropped")


def g(x):
    return torch.tensor([0.5, 0.25], device="cuda"), x.sum()


cg = torch.compile(g)
a, b = cg(x)
line("constant_returned_as_output")
print("output devices", a.device, b.device)
