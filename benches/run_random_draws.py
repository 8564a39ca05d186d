"""What random integer draws cost under `vramscope run`: each carries the GPU's values
(`_philox.values`), computed on the host whether or not the program reads them. CPU
milliseconds per `torch.randint` of 128 int64 indices and of a (64, 4, 84, 84) uint8 frame batch
(1,806,336 values, a PPO rollout's observations), the best of 3 batches.

    OMP_NUM_THREADS=1 taskset -c 1 python -m vramscope run --gpu h100 --quiet benches/run_random_draws.py

It prints one line to stderr (docs/run.md, "Speed", session 75, compares commits with it)."""

import sys
import time

import torch


def best(fn, n):
    fn()
    times = []
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        times.append((time.process_time() - t0) / n * 1e3)
    return min(times)


cases = {
    "randint_128": (lambda: torch.randint(0, 60000, (128,), device="cuda"), 200),
    "randint_uint8_frames": (
        lambda: torch.randint(0, 255, (64, 4, 84, 84), dtype=torch.uint8, device="cuda"),
        5,
    ),
}
res = [f"{name}={best(fn, n):.2f}ms" for name, (fn, n) in cases.items()]
sys.stderr.write("random draws: " + " ".join(res) + "\n")
