"""TorchScript's profiling executor and NNC's fused kernels for a scripted function's call
(`vramscope._jit.Executor`), against blind353/mr03's H100 probe
(validation/run/probes/ni79_zoedepth_jit_fusion_probe_h100.out)."""

import os
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


def _events(lo):
    """The allocations and frees since trace entry `lo`: "+k:op" (k counts the allocations),
    "-k" (an allocation made before `lo`: "-old")."""
    tr = torch.cuda.memory._snapshot()["device_traces"][0]
    ids, out, n = {}, [], 0
    for e in tr[lo:]:
        if e["action"] == "alloc":
            ids[e["addr"]] = n
            n += 1
            frames = e.get("frames") or []
            op = frames[1]["name"] if len(frames) > 1 else "?"
            out.append(f"+{op.split('::')[1]}")
        elif e["action"] == "free_requested":
            out.append(f"-{ids.pop(e['addr'], 'old')}")
    return out, len(tr)


def test_zoedepth_training_calls_run_the_differentiable_graph_as_the_h100_history():
    # mr03 phase 2 (bf16 autocast, the input requiring grad, ZoeDepthAttractorLayer's loop
    # `delta_c += inv_attractor(dx)`), the H100 history fixtures/run/history_mr03_s79_h100.pickle.xz:
    # call 0 the outer profiling run (eager), call 1 the DifferentiableGraph's forward executor
    # profiling f (as eager: sub, pow, mul, -pow, add, -mul, div, then -div after the +=); calls 2+
    # the fused f (entries 11,804-11,822): sub, then the group's 6 outputs [out, cast(dx), pow, mul,
    # add, cast(add)], pow/mul/add freed at the call's end (the last first), dx and out after the
    # statement. Backward of a fused call (df's plan, entries 14,305-14,317): A, B (the unfused
    # mul(alpha)), -A, C, -B, D, -C, then the kept cast(add), cast(dx)
    fn = _inv_attractor()
    with vramscope.capture(gpu="h100"):
        torch.cuda.memory._record_memory_history(max_entries=100000)
        a = torch.randn(2, 64, 24, 24, device="cuda", requires_grad=True)
        b = torch.randn(2, 64, 24, 24, device="cuda")
        fwd, bwds = [], []
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for _step in range(2):
                acc = torch.zeros(2, 64, 24, 24, device="cuda")
                for _ in range(4):
                    _, lo = _events(0)
                    acc += fn(a - b)
                    fwd.append(_events(lo)[0])
                _, lo = _events(0)
                acc.sum().backward()
                bwds.append(_events(lo)[0])
        torch.cuda.memory._record_memory_history(enabled=None)
    eager = ["+sub", "+pow", "+mul", "-1", "+add", "-2", "+div", "-4"]
    fused = ["+sub"] + ["+TensorExprGroup"] * 6 + ["-5", "-4", "-3", "-0", "-1"]
    assert fwd[0] == eager and fwd[1] == eager
    assert fwd[2:] == [fused] * 6
    # step 0's first DifferentiableGraph backward is df's profiling run, unfused (GradOf lowered;
    # the H100 history's entries 13,285-13,318, the incoming grad aside): div, neg, mul, -neg, mul,
    # div, -, -, mul(alpha), -, mul, pow, mul, -, -, -, add, -, -, then the kept
    bwd = bwds[0]
    k = sum(e.startswith("+") for e in bwd[: bwd.index("+div")])
    assert bwd[bwd.index("+div") :][:21] == [
        "+div", "+neg", "+mul", f"-{k + 1}", "+mul", "+div", f"-{k + 2}", f"-{k + 3}", "+mul",
        f"-{k + 4}", "+mul", "+pow", "+mul", f"-{k + 6}", f"-{k + 7}", f"-{k + 5}", "+add", f"-{k}",
        f"-{k + 8}", "-old", "-old",
    ]  # fmt: skip
    bwd = bwds[1]
    # step 1's backward: four fused calls, each A, B, -A, C, -B, D, -C, -cast(add), -cast(dx)
    # (D, the grad of dx, then goes to a's grad)
    g = "+TensorExprGroup"
    first = bwd.index(g)
    k = sum(e.startswith("+") for e in bwd[:first])
    assert bwd[first : first + 9] == [g, "+mul", f"-{k}", g, f"-{k + 1}", g, f"-{k + 2}", "-old", "-old"]
    assert bwd.count(g) == 12 and bwd.count("+mul") == 4


def test_a_call_that_requires_grad_and_a_partly_fused_function_run_unfused():
    # without fusion (`VRAMSCOPE_JIT_FUSION=0`) a call that requires grad runs unfused, as eager;
    # a matmul stays outside NNC's CUDA groups (CPU-only in tensorexpr_fuser.cpp), so the function
    # is not one kernel: unfused too
    fn = _inv_attractor()

    @torch.jit.script
    def mm_then_gelu(x, w):
        return torch.tanh(x @ w) * 0.5 + 0.5

    with vramscope.capture(gpu="h100"):
        x = torch.randn(4, 8, 16, device="cuda", requires_grad=True)
        os.environ["VRAMSCOPE_JIT_FUSION"] = "0"
        try:
            assert [_allocs(fn, x) for _ in range(4)] == [4, 4, 4, 4]
        finally:
            del os.environ["VRAMSCOPE_JIT_FUSION"]
        a, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        with torch.no_grad():
            # (the first call also makes the cuBLAS workspace)
            assert [_allocs(lambda t: mm_then_gelu(t, w), a) for _ in range(3)] == [5, 4, 4]


def test_a_new_shape_runs_the_forward_executors_fallback_and_a_retained_graph_backs_twice():
    # the forward executor's STATIC guard fails on a new shape: its fallback function's
    # profiling run returns every output of the group, which die after the call in order (the
    # H100 history, mr03's first 48 x 48 call, entries 12,094-12,103: sub, pow, mul, add, div,
    # -pow, -mul, then -div after the +=); its next call is fused
    fn = _inv_attractor()
    with vramscope.capture(gpu="h100"):
        torch.cuda.memory._record_memory_history(max_entries=100000)
        b = torch.randn(2, 64, 24, 24, device="cuda")
        c = torch.randn(2, 64, 48, 48, device="cuda")
        a = torch.randn(2, 64, 24, 24, device="cuda", requires_grad=True)
        a2 = torch.randn(2, 64, 48, 48, device="cuda", requires_grad=True)
        fwd = []
        with torch.autocast("cuda", dtype=torch.bfloat16):
            acc = torch.zeros(2, 64, 48, 48, device="cuda")
            for x, y in [(a, b)] * 3 + [(a2, c)] * 2:
                _, lo = _events(0)
                if x is a:
                    fn(x - y)
                else:
                    acc += fn(x - y)
                fwd.append(_events(lo)[0])
            acc.sum().backward()
            # a retained graph backs twice (the twin's second backward runs on stand-ins)
            y = fn(a - b)
            y.sum().backward(retain_graph=True)
            y.sum().backward()
            assert a.grad.shape == a.shape
        torch.cuda.memory._record_memory_history(enabled=None)
    assert fwd[3] == ["+sub", "+pow", "+mul", "+add", "+div", "-1", "-2", "-4"]
    assert fwd[4][:7] == ["+sub"] + ["+TensorExprGroup"] * 6


ERF_PROBE = ROOT / "validation" / "run" / "probes" / "od81_jit_autodiff_fusion_probe_h100.out"


def test_an_erf_bias_gelu_fuses_as_on_the_h100():
    # NNC fuses erf on CUDA only (`gpu_only_operator_set`); the H100 probe: the erf form of a
    # bias-GELU profiles once (6 allocations) then runs as one kernel (1), in float32 and bfloat16
    want = {}
    for line in ERF_PROBE.read_text().splitlines():
        m = re.match(r"bias_gelu_erf (\w+) call (\d) allocs=(\d+)", line)
        if m:
            want.setdefault(m.group(1), []).append(int(m.group(3)))
    assert want == {"float32": [6, 1, 1], "bfloat16": [6, 1, 1]}

    @torch.jit.script
    def bias_gelu_erf(bias, y):
        x = bias + y
        return x * 0.5 * (1.0 + torch.erf(x * 0.70710678))

    got = {}
    with vramscope.capture(gpu="h100"), torch.no_grad():
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            bias = torch.randn(4096, device="cuda", dtype=dtype)
            y = torch.randn(512, 4096, device="cuda", dtype=dtype)
            got[name] = [_allocs(lambda y, bias=bias: bias_gelu_erf(bias, y), y) for _ in range(3)]
    assert got == want
