"""Session 79 probe (helper ni) for blind353/mr03: what TorchScript's profiling executor does with
transformers' `@torch.jit.script inv_attractor` (modeling_zoedepth.py:550) on the GPU, call by call.
The H100 history of mr03 (history_mr03_s79_h100.pickle.xz) shows its first call unfused (pow, mul,
add, div: 4 outputs) and every later fp16-autocast inference call with 1 output (NNC's fusion group),
training calls with other counts; the twin runs every call unfused (its profiled types read device
meta, so NNC never groups). Runs mr03 itself (runpy, its own sizes, ~25 s on an H100, ~10 GB) with
`inv_attractor` wrapped: per call its input's dtype, shape, requires_grad, grad mode, the number of
allocations made inside the call (`allocation.all.allocated`), the net and peak bytes; after each
call whose optimized graph changed, that graph's fusion / differentiable-graph node kinds and
output counts. The wrapper resets the peak at each call, so the script's own phase lines
are not the record's. The twin (`vramscope run --gpu h100`, branch ni-s79 at 20dd99d7): 261 calls,
every one allocs=4 (pow, mul, add, div), "graph: no groups" throughout (no TensorExpr group, no
DifferentiableGraph): phase 1 (4, 64, 24|48|96|192 x 32|64|128|256) float32 rg=0, phase 2
(2, 64, 24|48|96|192 squared) float32 rg=1, phase 3 (2, 64, ...) float32 rg=0. The H100 history
has, counting the eager `sub` before each call: phase 1 call 0 five allocations, later calls two;
training forwards seven a call, five freed by its end.
Run: python3 validation/run/probes/ni79_zoedepth_jit_fusion_probe.py"""

import glob
import runpy
import sys

import torch
import transformers.models.zoedepth.modeling_zoedepth as mz

orig = mz.inv_attractor
seen = {}
calls = [0]
print("texpr", torch._C._jit_texpr_fuser_enabled(), "gpu", torch._C._jit_can_fuse_on_gpu())
print("profiled_runs", torch._C._jit_get_num_profiled_runs())


def describe(g):
    """The graph's TensorExpr groups and differentiable graphs (nested ones too): their node kinds
    and output counts."""
    out = []
    for kind in ("prim::TensorExprGroup", "prim::DifferentiableGraph"):
        for n in g.findAllNodes(kind):
            sub = n.g("Subgraph")
            kinds = ",".join(m.kind().split("::")[1] for m in sub.nodes())
            out.append(f"{kind.split('::')[1]}[{kinds}]->{len(list(sub.outputs()))}")
            inner = describe(sub)
            if inner != "no groups":
                out.append("{" + inner + "}")
    return " ".join(out) or "no groups"


def wrapped(dx, alpha: float = 300, gamma: int = 2):
    st = torch.cuda.memory_stats()
    n0, b0 = st["allocation.all.allocated"], st["allocated_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    out = orig(dx, alpha, gamma)
    st = torch.cuda.memory_stats()
    i = calls[0]
    calls[0] += 1
    g = torch.jit.last_executed_optimized_graph()
    d = describe(g) if g is not None else "none"
    print(
        f"call {i} {str(dx.dtype)[6:]} {tuple(dx.shape)} rg={int(dx.requires_grad)} "
        f"grad={int(torch.is_grad_enabled())} allocs={st['allocation.all.allocated'] - n0} "
        f"net={st['allocated_bytes.all.current'] - b0} peak={st['allocated_bytes.all.peak'] - b0}"
        + ("" if seen.get(d) else f" graph: {d}")
    )
    seen[d] = True
    return out


mz.inv_attractor = wrapped
script = glob.glob("validation/run/blind353/mr03_*.py")[0]
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
