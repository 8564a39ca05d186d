"""GPU probe (session 69, helper qb): who keeps a compiled region's `torch.tensor(data, device="cuda")`
constant, and until when. Inductor inlines a 1-D constant of at most 8 elements (`GraphLowering.
can_inline_constant`, torch/_inductor/graph.py) and a 0-d one (`Constant(value.item())`), so the
compiled graph keeps neither; a constant of at most one element is also a fake tensor's `constant`
(`CONSTANT_NUMEL_LIMIT`, torch/_subclasses/fake_tensor.py). The twin (qb-s69 9913652f) takes a 0-d
one as kept while the compiled function lives and a 4-element one as the traced graph's alone (a
reference cycle: freed at the first collection that reaches it), and since 36a565e1 frees both once
the compiled function is dropped (`torch._dynamo.reset()`) and collected. Each line: `CASE STEP:
allocated A blocks B` (bytes and active blocks); `gc.collect()` here runs with the compiled function
still alive. The first case is the process's first compile (s61/mx61 kept its constant to the end).

Run: python3 validation/run/probes/qb69_compiled_constant_collections_probe.py
(< 60 s, < 1 GB); the twin: `vramscope run --gpu h100 --quiet THIS`."""

import gc

import torch


def line(case, step):
    s = torch.cuda.memory_stats()
    print(
        f"{case} {step}: allocated {torch.cuda.memory_allocated()} blocks {s.get('active.all.current', 0)}",
        flush=True,
    )


def four(x):
    return x[:, :4] * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)


def scalar(x):
    return torch.where(x > 0, torch.tensor(0.0, device=x.device), -1e9)


def sixteen(x):
    # 16 elements: not inlined, one of the compiled graph's `constants`
    return x * torch.tensor([float(i) for i in range(16)], device=x.device)


def returned(x):
    return torch.tensor([0.5, 0.25], device=x.device), x.sum()


x = torch.randn(4, 16, device="cuda")
torch.cuda.synchronize()
line("start", "x")
for fn in (four, scalar, sixteen, returned, four):
    name = fn.__name__
    f = torch.compile(fn)
    y = f(x)
    line(name, "first call, output alive")
    del y
    line(name, "output freed")
    gc.collect()
    line(name, "collected, function alive")
    y = f(x)
    del y
    line(name, "second call, output freed")
    del f
    torch._dynamo.reset()
    line(name, "reset, not collected")
    gc.collect()
    line(name, "reset and collected")
torch.cuda.synchronize()
line("end", "x")
