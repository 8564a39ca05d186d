"""TorchScript's profiling executor and NNC's fused kernels for a scripted function's call
(`vramscope._jit.Executor`), against blind353/mr03's H100 probe
(validation/run/probes/ni79_zoedepth_jit_fusion_probe_h100.out)."""

import re

import torch
import vramscope
from conftest import ROOT

PROBE = ROOT / "validation" / "run" / "probes" / "ni79_zoedepth_jit_fusion_probe_h100.out"
CALL = re.compile(r"call (\d+) float32 \(([\d, ]+)\) rg=(\d) grad=(\d) allocs=(\d+)")


def _probe_calls():
    out = []
    for line in PROBE.read_text().splitlines():
        m = CALL.match(line)
        if m:
            shape = tuple(int(s) for s in m.group(2).split(", "))
            out.append((int(m.group(1)), shape, m.group(3) == "1", int(m.group(5))))
    return out


def _inv_attractor():
    # transformers' modeling_zoedepth.py:550, as ZoeDepth declares it
    @torch.jit.script
    def inv_attractor(dx, alpha: float = 300, gamma: int = 2):
        return dx.div(1 + alpha * dx.pow(gamma))

    return inv_attractor


def _allocs(fn, x) -> int:
    n0 = torch.cuda.memory_stats()["allocation.all.allocated"]
    y = fn(x)
    n = torch.cuda.memory_stats()["allocation.all.allocated"] - n0
    del y
    return n


def test_zoedepth_inv_attractor_inference_calls_allocate_as_the_h100_probe():
    # mr03's inference calls: phase 1 under fp16 autocast and inference_mode (calls 0-57, one
    # executor), phase 3 in fp32 under no_grad (calls 145-260, the autocast-off executor). The
    # H100: each level's first call profiles (4 allocations: pow, mul, add, div), then the fused
    # kernel (1); a new shape fails the STATIC guard of the first two levels (a fallback's profiling
    # run), the third level is DYNAMIC and takes the fourth shape at once
    calls = [c for c in _probe_calls() if not c[2]]
    assert len(calls) == 58 + 116
    fn = _inv_attractor()
    got, want = [], []
    with vramscope.capture(gpu="h100"):
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
            for _i, shape, _, allocs in calls[:58]:
                got.append(_allocs(fn, torch.randn(shape, device="cuda")))
                want.append(allocs)
        with torch.no_grad():
            for _i, shape, _, allocs in calls[58:]:
                got.append(_allocs(fn, torch.randn(shape, device="cuda")))
                want.append(allocs)
    assert got == want
    assert got.count(4) == 6 and got.count(1) == len(calls) - 6


def test_a_call_that_requires_grad_and_a_partly_fused_function_run_unfused():
    # a differentiable graph's forward (training) is not modelled: unfused, as eager; a matmul
    # stays outside NNC's CUDA groups (CPU-only in tensorexpr_fuser.cpp), so the function is not
    # one kernel: unfused too
    fn = _inv_attractor()

    @torch.jit.script
    def mm_then_gelu(x, w):
        return torch.tanh(x @ w) * 0.5 + 0.5

    with vramscope.capture(gpu="h100"):
        x = torch.randn(4, 8, 16, device="cuda", requires_grad=True)
        assert [_allocs(fn, x) for _ in range(4)] == [4, 4, 4, 4]
        a, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        with torch.no_grad():
            # (the first call also makes the cuBLAS workspace)
            assert [_allocs(lambda t: mm_then_gelu(t, w), a) for _ in range(3)] == [5, 4, 4]
