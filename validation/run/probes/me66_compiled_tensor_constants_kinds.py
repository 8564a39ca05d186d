"""Session 66 (helper me): which of a compiled region's `torch.tensor(data, device="cuda")` constants
the GPU keeps, by kind. On the GPU, AOTAutograd's trace makes each one a real CUDA tensor
(`internal_new_from_data` copies the data to the device below the Fake key; FakeTensorMode's
`avoid_device_init` is off there) and `lift_fresh` makes it the graph's `_tensor_constant`;
compiled_tensor_constant_probe_s61.py measured a 4-element one kept from the first call while the
compiled function lives (one 512-byte block), and one returned as the graph's output not kept over
the output. Read from Inductor's source (fx_passes/joint_graph.py `UniformValueConstantFolder`), a
one-element constant or a uniform one becomes a `full` and its tensor may die with the compile.

Run on the GPU (< 30 s, < 1 GB):

    python3 validation/run/probes/me66_compiled_tensor_constants_kinds.py

and under the twin (`vramscope run --gpu h100 --quiet THIS`) to compare line by line. Each line:
`CASE STEP: allocated A requested R blocks B peak P` (bytes; peak since the case's start).
"""

import gc

import torch


def line(case, step):
    s = torch.cuda.memory_stats()
    print(
        f"{case} {step}: allocated {torch.cuda.memory_allocated()} "
        f"requested {s.get('requested_bytes.all.current', 0)} blocks {s.get('active.all.current', 0)} "
        f"peak {torch.cuda.max_memory_allocated()}",
        flush=True,
    )


def scalar_where(x):
    # transformers' eager_mask: a 0-d constant, uniform
    return torch.where(x > 0, torch.tensor(0.0, device=x.device, dtype=x.dtype), -1e9)


def uniform_vector(x):
    return x[:, :4] * torch.tensor([2.0, 2.0, 2.0, 2.0], device=x.device)


def mixed_vector(x):
    return x[:, :4] * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)


def two_scalars(x):
    a = torch.where(x > 0, torch.tensor(0.0, device=x.device), -1e9)
    b = torch.where(x < 1, torch.tensor(1.0, device=x.device), 5.0)
    return a + b


def int_positions(x):
    # a long vector as an index (a Python list of positions)
    return x[:, torch.tensor([0, 3, 5, 7], device=x.device)]


def returned(x):
    return torch.tensor([0.5, 0.25], device=x.device), x.sum()


x = torch.randn(4, 16, device="cuda")
torch.cuda.synchronize()
line("start", "x")
cases = (scalar_where, uniform_vector, mixed_vector, two_scalars, int_positions, returned)
for mode in ("default", "reduce-overhead"):
    for fn in cases:
        name = f"{fn.__name__}[{mode}]"
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.reset_peak_memory_stats()
        f = torch.compile(fn, mode=None if mode == "default" else mode)
        y = f(x)
        line(name, "first call, output alive")
        del y
        line(name, "first call, output freed")
        for _ in range(2):
            y = f(x)
            del y
        line(name, "third call, output freed")
        del f
        torch._dynamo.reset()
        gc.collect()
        line(name, "dropped")
torch.cuda.synchronize()
line("end", "x")
