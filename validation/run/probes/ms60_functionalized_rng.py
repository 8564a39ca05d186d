"""GPU probe: torch.compile with functionalize_rng_ops (session 60, helper ms; not run yet).

Run: python validation/run/probes/ms60_functionalized_rng.py   (the twin: vramscope run --gpu h200 ...)

`torch._functorch.config.functionalize_rng_ops = True`, a compiled `dropout(x) * rand_like(x)` over a
(1024, 1024) fp32 input that requires grad, forward then backward. Expected on the GPU (PyTorch 2.11):
- AOTAutograd decomposes `rand` into `rngprims.philox_rand(shape, seed, offset, None, cuda:0, dtype)`
  (torch/_decomp/decompositions_for_rng.py; Inductor's `rand_like` passes `self.device`, cuda) and
  passes the graphs a seed and an offset made by `CUDARngStateHelper.get_torch_state_as_tuple`
  (torch/_prims_common: `torch.tensor(torch.cuda.initial_seed())`, `torch.tensor(
  torch.cuda._get_rng_state_offset())`): 0-d int64 HOST tensors, at trace time (fake) and at each
  call (runtime_wrappers.py `FunctionalizedRngRuntimeWrapper`), read by the Triton kernel with
  `.item()`; the new offset is computed on the host (a C++ kernel, `empty_strided_cpu`), and
  `set_new_offset` moves the generator to it: base + 2 * 1048576 (Inductor's offset is the numel of
  each draw, lowering.py `philox_rand_offset`), rounded up to a multiple of 4 (`multiple_of_4`).
- So the lines, after the warm-up call's (compile, autotuning):
    measured call
    state seed cpu torch.int64 () offset cpu torch.int64 ()     (twice: forward, backward)
    forward: kept 9437184 peak 9437184 offset +2097152
      (bool mask 1 MiB saved, the rand_like values 4 MiB saved, the output 4 MiB; no CUDA seed
      buffer, which Inductor allocates without functionalized RNG: `inductor_random`'s seeds)
    backward: kept 8388608 offset +2097152
      (x.grad and y; no draws in the backward, its offset output is its base)
Before session 60 the twin printed a warning (Inductor failed on the host: "You are trying to
functionalize a cpu RNG operator") and ran the graph eagerly, with eager dropout's offsets."""

import torch
import torch._functorch.config as functorch_config
from torch._prims_common import CUDARngStateHelper

functorch_config.functionalize_rng_ops = True
original = CUDARngStateHelper.get_torch_state_as_tuple


def state(*args, **kwargs):
    seed, offset = original(*args, **kwargs)
    if not args and not kwargs:  # (at run time; at trace time a fake mode is passed)
        print(
            "state seed",
            seed.device.type,
            seed.dtype,
            tuple(seed.shape),
            "offset",
            offset.device.type,
            offset.dtype,
            tuple(offset.shape),
            flush=True,
        )
    return seed, offset


CUDARngStateHelper.get_torch_state_as_tuple = staticmethod(state)


def f(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) * torch.rand_like(x)


x = torch.randn(1024, 1024, device="cuda", requires_grad=True)
compiled = torch.compile(f)
compiled(x).sum().backward()  # (compiled, and its kernels autotuned at their first launch)
x.grad = None
torch.cuda.synchronize()
print("measured call", flush=True)
torch.cuda.reset_peak_memory_stats()
base, offset = torch.cuda.memory_allocated(), torch.cuda._get_rng_state_offset()
y = compiled(x)
torch.cuda.synchronize()
kept, peak = torch.cuda.memory_allocated() - base, torch.cuda.max_memory_allocated() - base
print(f"forward: kept {kept} peak {peak} offset +{torch.cuda._get_rng_state_offset() - offset}")
y.sum().backward()
torch.cuda.synchronize()
kept = torch.cuda.memory_allocated() - base
print(f"backward: kept {kept} offset +{torch.cuda._get_rng_state_offset() - offset}")
