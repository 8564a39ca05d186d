"""Session 81 probe (helper od): what TorchScript's profiling executor runs for a scripted function
whose input requires grad on the GPU (blind353/mr03's training calls of ZoeDepth's `inv_attractor`,
modeling_zoedepth.py:550), so that the twin can model it (the twin models inference calls only:
python/vramscope/_jit.py). mr03's H100 history shows, per steady training call (2 x 64 x 24 x 24 fp32
under bf16 autocast): forward 6 allocations [out, kept, t, t, t, kept], the three t freed in reverse
order at the call's end; backward 4 [A, B, free A, C, free B, D, free C], then both kept freed. On the
host (NNC's CPU fuser) the DifferentiableGraph's forward returns (div, cast(dx), cast(add)) and
`prim::dtype` of pow, mul and add (the autocast backward's `self_dtype`), so the group's outputs would
be [div, cast(dx), pow, mul, add, cast(add)]; the backward graph has three groups and an unfused
`mul(alpha)`. This prints, per call, the allocations of forward and backward separately (count, net,
peak and the sizes in order, + alloc / - free), and the optimized graphs (the outer plan after the
forward, the last executed one after the backward), under bf16 autocast and without it, and for a
shape change at call 4 (the forward executor's STATIC guard, its fallback's profiling run). Then two
inference checks of the twin's rule's assumptions: a Megatron-style bias-GELU (tanh form) in fp32 and
bfloat16 (the twin fuses both: NNC's CUDA rule takes half types), and an erf GELU (GPU-only op in NNC,
which the twin's host grouping cannot show: the twin leaves it unfused), 3 calls each under no_grad.
Run (~10 s, < 1 GB): python3 validation/run/probes/od81_jit_autodiff_fusion_probe.py"""

import torch

torch.manual_seed(0)


@torch.jit.script
def inv_attractor(dx, alpha: float = 300, gamma: int = 2):
    return dx.div(1 + alpha * dx.pow(gamma))


def events(fn):
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    n0, b0 = st["allocation.all.allocated"], st["allocated_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    keep = fn()
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    seq = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            seq.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            seq.append(f"-{e['size']}")
    line = (
        f"allocs={st['allocation.all.allocated'] - n0} net={st['allocated_bytes.all.current'] - b0} "
        f"peak={st['allocated_bytes.all.peak'] - b0} seq={' '.join(seq)}"
    )
    return keep, line


def run(tag, autocast, shapes):
    print(f"== {tag}")
    for i, shape in enumerate(shapes):
        base = torch.randn(shape, device="cuda", requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            dx = base * 1.0
            y, fwd = events(lambda dx=dx: inv_attractor(dx))
            g_fwd = torch.jit.last_executed_optimized_graph()
        grad = torch.ones_like(y)
        _, bwd = events(lambda y=y, grad=grad: y.backward(grad))
        g_bwd = torch.jit.last_executed_optimized_graph()
        print(f"call {i} {shape} forward {fwd}")
        print(f"call {i} {shape} backward {bwd}")
        if i == 2:
            print(f"-- call {i} graph after the forward:\n{g_fwd}")
            for n in g_fwd.findAllNodes("prim::DifferentiableGraph"):
                for a in ("f", "df"):
                    if n.hasAttribute(a):
                        print(f"-- DifferentiableGraph {a}:\n{n.g(a)}")
            print(f"-- call {i} graph after the backward:\n{g_bwd}")
        del y, dx, base, grad


@torch.jit.script
def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@torch.jit.script
def bias_gelu_erf(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.erf(x * 0.70710678))


def inference():
    for fn in (bias_gelu, bias_gelu_erf):
        for dtype in (torch.float32, torch.bfloat16):
            bias = torch.randn(4096, device="cuda", dtype=dtype)
            y = torch.randn(512, 4096, device="cuda", dtype=dtype)
            with torch.no_grad():
                for i in range(3):
                    out, line = events(lambda bias=bias, y=y, fn=fn: fn(bias, y))
                    print(f"{fn.name} {str(dtype)[6:]} call {i} {line}")
                    del out
            print(f"-- {fn.name} {str(dtype)[6:]} graph:\n{torch.jit.last_executed_optimized_graph()}")


print("texpr", torch._C._jit_texpr_fuser_enabled(), "profiled_runs", torch._C._jit_get_num_profiled_runs())
s1, s2 = (2, 64, 24, 24), (2, 64, 48, 48)
run("bf16 autocast", True, [s1, s1, s1, s1, s2, s2, s2])
run("no autocast", False, [s1, s1, s1, s1, s2, s2, s2])
inference()
