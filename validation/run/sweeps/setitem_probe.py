"""`x[index] = number` on CUDA tensors: every allocation and free of the assignment in order
(sweep_case.py), for a slice, an integer, a bool mask, an index tensor, a list of indices and a
mixed index, fp32 and bf16; the value a Python number (THPVariable_setitem makes it a host scalar)
or a 0-dim CUDA tensor; and `x[list]` reads. On a GPU: `python3 setitem_probe.py > fixtures/run/sweeps/setitem_h200.jsonl`."""

import torch
from sweep_case import case

dev = "cuda"


def assign(index, value):
    def run(x, *extra):
        x[index(*extra) if callable(index) else index] = value
        return None

    return run


for dtype in (torch.float32, torch.bfloat16):
    name = str(dtype).split(".")[-1]
    x = torch.zeros(64, 1024, device=dev, dtype=dtype)
    mask = torch.rand(64, 1024, device=dev) > 0.5
    rows = torch.tensor([0, 5, 9], device=dev)
    for value in (-1e9, 2, True, torch.tensor(3.0, device=dev)):
        v = "tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        case(f"{name} slice {v}", (x,), assign((slice(None), slice(1, None)), value), True)
        case(f"{name} int {v}", (x,), assign(3, value), True)
        case(f"{name} int pair {v}", (x,), assign((3, 7), value), True)
        case(f"{name} bool mask {v}", (x, mask), assign(lambda m: m, value), True)
        case(f"{name} index tensor {v}", (x, rows), assign(lambda r: r, value), True)
        case(f"{name} index list {v}", (x,), assign([0, 5, 9], value), True)
        case(f"{name} mixed {v}", (x, rows), assign(lambda r: (r, slice(0, 512)), value), True)
        case(f"{name} row mask {v}", (x, mask), assign(lambda m: m[:, 0], value), True)
    case(f"{name} getitem index list", (x,), lambda t: t[[0, 5, 9]], True)
    case(f"{name} getitem list and slice", (x,), lambda t: t[[0, 5, 9], 1:100], True)
    case(f"{name} getitem bool list", (x,), lambda t: t[:, [True, False] * 512], True)
