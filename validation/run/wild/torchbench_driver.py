"""One TorchBench model (github:pytorch/benchmark's torchbenchmark/models/NAME), unmodified, trained
then evaluated on "cuda" (validation/run/wild/README.md, TorchBench):

    cd CHECKOUT && python torchbench_driver.py NAME [--bs N] [--iters N] [--tests train,eval]

Imports `torchbenchmark.models.NAME` from the checkout (the working directory), and for each test
builds `Model(test, device="cuda", batch_size=N)` (the model's default batch size when no --bs) and
calls `invoke()` --iters times (default 2), as TorchBench's run.py does per iteration; then
synchronizes and calls torch.cuda.reset_peak_memory_stats() (one phase per test: phase0 train,
phase1 eval; record.py and the twin close a phase there; a test the model does not implement,
raising NotImplementedError, leaves what it built in its phase), frees the model (del, gc, empty_cache),
and goes on. The "end" phase holds what is left after both.
"""

import argparse
import gc
import importlib
import os
import sys

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--bs", type=int, default=None)
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--tests", default="train,eval")
    a = p.parse_args()
    sys.path.insert(0, os.getcwd())
    Model = importlib.import_module(f"torchbenchmark.models.{a.name}").Model
    for test in a.tests.split(","):
        m = None
        try:
            m = Model(test=test, device="cuda", batch_size=a.bs)
            for _ in range(a.iters):
                m.invoke()
            torch.cuda.synchronize()
            print(
                f"{a.name} {test} batch {m.batch_size}: {torch.cuda.max_memory_allocated()} peak allocated",
                flush=True,
            )
        except NotImplementedError as e:
            # a test the model does not implement (TorchBench's run.py skips it): an empty phase
            print(f"{a.name} {test}: not implemented ({e})", flush=True)
        torch.cuda.reset_peak_memory_stats()
        del m
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
