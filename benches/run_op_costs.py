"""What single ops cost under `vramscope run`: CPU microseconds per call of a few ops on
512x512 bf16 CUDA tensors (large enough to carry no values, as a model's activations), and
of a small forward and backward; the best of 5 batches of 400 calls.

    OMP_NUM_THREADS=1 taskset -c 1 python -m vramscope run --gpu h200 --quiet benches/run_op_costs.py

It prints one line to stderr (docs/run.md, "Speed", session 56, compares commits with it)."""

import sys
import time

import torch

x = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
cases = {
    "view": lambda: x.view(-1),
    "add": lambda: x + w,
    "mul_silu": lambda: torch.nn.functional.silu(x) * w,
    "linear": lambda: torch.nn.functional.linear(x, w),
    "transpose": lambda: x.transpose(0, 1),
    "size": lambda: x.size(0),
}


def best(fn, n):
    for _ in range(n // 8):
        fn()
    times = []
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        times.append((time.process_time() - t0) / n * 1e6)
    return min(times)


def step():
    (torch.nn.functional.silu(x @ w) * w).sum().backward()


res = [f"{name}={best(fn, 400):.1f}us" for name, fn in cases.items()]
res.append(f"fwdbwd={best(step, 50):.0f}us")
sys.stderr.write("op costs: " + " ".join(res) + "\n")
