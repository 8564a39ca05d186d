"""Session 61 (helper mx): a compiled region with a tensor from Python data for `cuda`, a `.item()`
graph break and ops Inductor leaves to ATen (`kthvalue`, `median`, `histc`: `make_fallback`).
Under the twin the first failed (Inductor refused the host constant beside CUDA tensors, and the
eager fallback mixed host and simulated tensors); the lines say what the GPU allocates for them.

Run on the GPU:

    python validation/run/probes/mx61_compile_constants.py

The twin: `vramscope run --gpu h200 --quiet THIS`. Each line is `CASE step: allocated A peak P`
(bytes; `peak` since the step's `reset_peak_memory_stats`), or the case's values.

Reasoned from PyTorch 2.11's source: `torch.tensor(data, device="cuda")` builds the data on the host
and copies it to the device with the Python key excluded (`internal_new_from_data`,
torch/csrc/utils/tensor_new.cpp), then `lift_fresh`: dynamo's and AOTAutograd's traces make a real
CUDA constant (16 bytes here: one 512-byte block each while alive), which the compiled graph keeps
(`_tensor_constant0`). The twin makes it on the host and takes it to the device in the graph (a
`device_put`, which its kernel reads: no block of its own). So the GPU's `constant` lines may hold
one or two 512-byte blocks more than the twin's from the first call on (the constant of dynamo's
trace, if kept, and the graph's); the GPU's lines settle which. The rest is the same on both:
`constant values` exact; the `item` case's output a 16 x 8 float32 tensor (512 bytes) whatever
`.item()` reads (the twin reads 0: Inductor folds `x * 0`); the `fallback` case's output 28 floats
and its peak its ATen fallbacks' outputs and the fused kernel's.

The twin's lines (mx-s61):

start x: allocated 512 peak 512
constant first call: allocated 1024 peak 1024 shape [12]
constant second call: allocated 1024 peak 1024 shape [12]
constant values: [1.0, 2.0, 3.0, 4.0]
item first call: allocated 1024 peak 1024 shape [16, 8]
item second call: allocated 1024 peak 1024 shape [16, 8]
fallback first call: allocated 1024 peak 3072 shape [28]
fallback second call: allocated 1024 peak 3072 shape [28]
end reset: allocated 512 peak 3072
"""

import torch

torch.manual_seed(0)
dev = torch.device("cuda")


def line(case, step, **kw):
    extra = " ".join(f"{k} {v}" for k, v in kw.items())
    print(
        f"{case} {step}: allocated {torch.cuda.memory_allocated()} "
        f"peak {torch.cuda.max_memory_allocated()} {extra}".rstrip(),
        flush=True,
    )


def constant(x):
    return torch.cat([x[0], torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)])


def item(x):
    s = (x.abs() > 1).sum().item()
    return x * s


def fallback(x):
    v, i = torch.kthvalue(x, 3, dim=1)
    m = torch.median(x, dim=0).values
    h = torch.histc(x, bins=4, min=-1.0, max=1.0)
    return torch.cat([v, m, h]) + i.float().sum()


x = torch.randn(16, 8, device=dev)
torch.cuda.synchronize()
line("start", "x")
for name, fn in (("constant", constant), ("item", item), ("fallback", fallback)):
    torch._dynamo.reset()
    f = torch.compile(fn)
    torch.cuda.reset_peak_memory_stats()
    y = f(x)
    line(name, "first call", shape=list(y.shape))
    del y
    torch.cuda.reset_peak_memory_stats()
    y = f(x)
    line(name, "second call", shape=list(y.shape))
    if name == "constant":
        print(f"constant values: {y[8:].tolist()}", flush=True)
    del y, f
torch._dynamo.reset()
torch.cuda.synchronize()
line("end", "reset")
