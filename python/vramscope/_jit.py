"""TorchScript's graph passes whose checks read a constant tensor's device in C++, where the twin's
CUDA tensors are meta: the twin applies the rewrite such a check would let through on the GPU."""

from __future__ import annotations

import contextlib
import os

import torch

# torch/csrc/jit/passes/frozen_conv_add_relu_fusion_cuda.cpp, `fuseFrozenConvAddReluImpl`: its
# patterns, registered in this order (conv, then relu, then add)
_CONV_RELU = """
graph(%input, %weight, %bias, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %x = aten::{conv}(%input, %weight, %bias, %stride, %padding, %dilation, %groups)
  %res = aten::{relu}(%x)
  return (%res)"""
_CONV_RELU_FUSED = """
graph(%input, %weight, %bias, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %res = aten::cudnn_convolution_relu(%input, %weight, %bias, %stride, %padding, %dilation, %groups)
  return (%res)"""
_CONV_ADD_RELU = """
graph(%input, %weight, %bias, %z, %alpha, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %x = aten::{conv}(%input, %weight, %bias, %stride, %padding, %dilation, %groups)
  %y = aten::{add}(%x, %z, %alpha)
  %res = aten::{relu}(%y)
  return (%res)"""
_CONV_ADD_RELU_FUSED = """
graph(%input, %weight, %bias, %z, %alpha, %stride:int[], %padding:int[], %dilation:int[], %groups:int):
  %res = aten::cudnn_convolution_add_relu(%input, %weight, %z, %alpha, %bias,
                                          %stride, %padding, %dilation, %groups)
  return (%res)"""

_CONVS = ("aten::conv2d", "aten::conv3d")
_ADDS = ("aten::add", "aten::add_")
_HELD = "prim::VramscopeHeld_"


def _constant(value):
    """The tensor a graph value holds as a constant, else None (`toIValue`)."""
    node = value.node()
    if node.kind() != "prim::Constant" or value.type().kind() != "TensorType":
        return None
    t = value.toIValue()
    return t if isinstance(t, torch.Tensor) else None


def _cuda(t) -> bool:
    return t.device.type == "cuda"


def _weight_fails(node) -> bool:
    """The pass's filter on a conv's weight and bias: the weight a constant contiguous CUDA
    tensor; a constant bias of its dtype, 1-D, one value an output channel, on CUDA."""
    weight = _constant(node.inputsAt(1))
    if weight is None or not _cuda(weight) or not weight.is_contiguous():
        return True
    bias = _constant(node.inputsAt(2))
    return bias is not None and (
        bias.dtype != weight.dtype or bias.dim() != 1 or bias.size(0) != weight.size(0) or not _cuda(bias)
    )


def _z_fails(add, conv) -> bool:
    """The filter on the added tensor `z`, where a constant: of the weight's dtype, its first
    size the weight's, contiguous, on CUDA."""
    z = _constant(add.inputsAt(1))
    if z is None:
        return False
    weight = _constant(conv.inputsAt(1))
    return z.dtype != weight.dtype or z.size(0) != weight.size(0) or not z.is_contiguous() or not _cuda(z)


def _swap(graph, node, kind):
    """`node` replaced by one of `kind` on the same inputs (its output's type and uses kept)."""
    new = graph.create(kind, list(node.inputs()), 1)
    new.insertBefore(node)
    new.output().setType(node.output().type())
    node.output().replaceAllUsesWith(new.output())
    node.destroy()
    return new


def _hold(graph, node):
    """`node` swapped for a placeholder no pattern names: (the placeholder, the kind to restore)."""
    kind = node.kind()
    return _swap(graph, node, _HELD + kind.split("::")[1]), kind


def fuse_frozen_conv_add_relu(graph) -> None:
    """The CUDA pass's rewrite of a frozen graph (`aten::conv2d`/`conv3d` + `add`/`add_` +
    `relu`/`relu_` into `aten::cudnn_convolution_add_relu`, conv + relu into
    `cudnn_convolution_relu`), where its filter would let a match through on the GPU: the nodes
    whose constants it refuses are held out of the patterns while they run."""
    held = []
    for node in list(graph.nodes()):
        if node.kind() in _CONVS and _weight_fails(node):
            held.append(_hold(graph, node))
    for node in list(graph.nodes()):
        if node.kind() in _ADDS and node.inputsAt(0).node().kind() in _CONVS:
            if _z_fails(node, node.inputsAt(0).node()):
                held.append(_hold(graph, node))
    for conv in ("conv2d", "conv3d"):
        for relu in ("relu", "relu_"):
            torch._C._jit_pass_custom_pattern_based_rewrite_graph(
                _CONV_RELU.format(conv=conv, relu=relu), _CONV_RELU_FUSED, graph
            )
            for add in ("add", "add_"):
                torch._C._jit_pass_custom_pattern_based_rewrite_graph(
                    _CONV_ADD_RELU.format(conv=conv, add=add, relu=relu), _CONV_ADD_RELU_FUSED, graph
                )
    for node, kind in held:
        _swap(graph, node, kind)


def optimize_for_inference_pass(original):
    """`torch._C._jit_pass_optimize_for_inference` (torch/jit/_freeze.py's
    `optimize_for_inference`): PyTorch's passes (FuseFrozenConvAddRelu, ConvertFrozenOpsToMKLDNN,
    FrozenLinearTranspose on each method's graph), then the conv-add-relu fusion its filter
    refused the twin's meta constants (torch/csrc/jit/passes/frozen_graph_optimizations and
    `optimize_for_inference` in torch/csrc/jit/api/module.cpp)."""

    def optimize(module, other_methods=()):
        original(module, other_methods)
        for name in ["forward", *other_methods]:
            method = module._get_method(name) if module._has_method(name) else None
            if method is not None:
                fuse_frozen_conv_add_relu(method.graph)

    return optimize


# --- TorchScript's profiling executor and NNC's fusion groups for a scripted function's call ---
#
# On the GPU a `torch.jit.script` function runs through the profiling graph executor
# (torch/csrc/jit/runtime/profiling_graph_executor_impl.cpp): its first `num_profiled_runs` calls
# (1) run the profiled graph, unfused, recording each value's type; the next call builds the
# optimized plan, where the TensorExpr fuser (torch/csrc/jit/passes/tensorexpr_fuser.cpp) merges
# the supported ops into a `prim::TensorExprGroup` guarded by a `prim::TypeCheck` (STATIC: the
# profiled sizes and strides) or a `prim::TensorExprDynamicGuard` (DYNAMIC: dtype, device,
# requires_grad, rank and striding), whose else block calls a fallback function: a graph function
# with its own profiling executor, one bailout level deeper. The fusion strategy (default STATIC
# 2, DYNAMIC 10, `getCurrentBehavior`) gives each level's kind by its remaining depth; at depth 0
# the simple executor runs unfused. A fused call's kernel allocates its outputs only (NNC's
# generated code needs no scratch): blind353/mr03's H100 probe
# (validation/run/probes/ni79_zoedepth_jit_fusion_probe_h100.out): 1 allocation a call where the
# unfused graph makes 4.
#
# The twin's tensors read as meta in C++, so the real executor never fuses under the twin (its
# profiled types carry device meta). The twin keeps the executor's levels itself, one executor per
# function and autocast specialization (`GraphFunction::currentSpecialization`), and asks
# TorchScript's own passes for the grouping: the function's graph optimized on small host stand-ins
# of the profiled types, with NNC's CPU fusion allowed (`_jit_override_can_fuse_on_cpu`). Where
# every op of the function that makes a tensor lies in one group, a call the guard lets through
# runs as the kernel: the graph runs with the allocator's caching off (its temporaries uncounted,
# as `caching_allocator_enable(False)` makes them), then each output is given its block, in
# output order. Calls whose inputs require grad (a DifferentiableGraph on the GPU, its forward
# keeping values for the backward) and graphs only partly fused run unfused, as before.

#: torch/csrc/jit/runtime/profiling_graph_executor_impl.cpp: `fusion_strategy` default
#: {{FusionBehavior::STATIC, 2}, {FusionBehavior::DYNAMIC, 10}}
_DEFAULT_STRATEGY = (("STATIC", 2), ("DYNAMIC", 10))
_strategy = [_DEFAULT_STRATEGY]
#: the binding itself (the twin's patch of it keeps `_strategy`; the stand-ins' runs set it round it)
_SET_STRATEGY = torch._C._jit_set_fusion_strategy

#: ops that make no storage of their own (a view or an int), allowed outside the group
_NO_STORAGE = {
    "aten::size",
    "aten::dim",
    "aten::len",
    "aten::__getitem__",
    "aten::slice",
    "aten::select",
    "aten::view",
    "aten::expand",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::permute",
    "aten::transpose",
    "aten::t",
    "aten::alias",
}
#: tensorexpr_fuser.cpp `typesAreSupported`: `cpu_compute_heavy_set`, fused on the CPU only
_CPU_ONLY = {"aten::matmul", "aten::conv2d"}
_STRUCTURE = {
    "prim::Constant",
    "prim::TypeCheck",
    "prim::TensorExprDynamicGuard",
    "prim::If",
    "prim::TupleConstruct",
    "prim::TupleUnpack",
    "prim::ListConstruct",
    "prim::ListUnpack",
    "prim::CallFunction",
}


def behavior(remaining: int) -> str | None:
    """`getCurrentBehavior(remaining_depth)`: the strategy's entries from the last, their depths
    summed, the first whose sum reaches `remaining`; None at depth 0 (the simple executor)."""
    if remaining <= 0:
        return None
    depth = 0
    for kind, n in reversed(_strategy[0]):
        depth += n
        if remaining <= depth:
            return kind
    return _strategy[0][0][0]


def set_fusion_strategy(original):
    """`torch.jit.set_fusion_strategy`'s binding: the twin keeps the strategy too."""

    def set_strategy(strategy):
        old = original(strategy)
        _strategy[0] = tuple((str(k), int(n)) for k, n in strategy)
        return old

    return set_strategy


def _signature(t) -> tuple:
    """A tensor input's profiled type as the guards read it (`TensorType::matchTensor`:
    requires_grad is the tensor's and grad mode's)."""
    return (t.dtype, tuple(t.shape), tuple(t.stride()), bool(t.requires_grad and torch.is_grad_enabled()))


def _striding(sig) -> tuple:
    """The dynamic guard's striding class (`striding_inputs_desc`): the stride order and which
    dimensions are dense, approximated by the order of the strides and contiguity."""
    _, sizes, strides, _ = sig
    order = tuple(sorted(range(len(sizes)), key=lambda i: (-strides[i], i)))
    expect, dense = 1, []
    for i in reversed(order):
        dense.append(sizes[i] == 1 or strides[i] == expect)
        expect *= max(sizes[i], 1)
    return order, tuple(dense)


def _passes(kind: str, profile: tuple, sig: tuple) -> bool:
    """Whether a call of signature `sig` passes a level's guard built from `profile`."""
    if len(profile) != len(sig):
        return False
    for p, s in zip(profile, sig, strict=True):
        if kind == "STATIC":
            if p != s:
                return False
        elif p[0] != s[0] or p[3] != s[3] or len(p[1]) != len(s[1]) or _striding(p) != _striding(s):
            return False
    return True


def _stand_in(sig):
    """A small host tensor of the profiled type: the dtype (float16 / bfloat16 as float32, which
    NNC's CPU rule refuses and its CUDA rule fuses alike, tensorexpr_fuser.cpp
    `typesAreSupported`), the rank, size-1 dimensions kept and the others 2, the stride order."""
    dtype, sizes, strides, rg = sig
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32
    small = [s if s <= 1 else 2 for s in sizes]
    order = sorted(range(len(sizes)), key=lambda i: (-strides[i], i))
    base = torch.zeros([small[i] for i in order], dtype=dtype)
    t = base.permute([order.index(i) for i in range(len(sizes))])
    for i, st in enumerate(strides):
        if st == 0 and sizes[i] > 1:
            t = t.narrow(i, 0, 1).expand(*[small[j] if j == i else -1 for j in range(len(sizes))])
    if rg and t.is_floating_point():
        t.requires_grad_(True)
    return t


def _whole_group(graph) -> bool:
    """Whether the optimized graph runs every op that makes a tensor inside one TensorExpr
    group: one group, and outside it only guards, control flow and ops without storage."""
    groups = 0
    differentiable = False

    def walk(block, in_fallback):
        nonlocal groups, differentiable
        ok = True
        for n in block.nodes():
            kind = n.kind()
            if kind == "prim::TensorExprGroup":
                groups += 1
                inner = {m.kind() for m in n.g("Subgraph").nodes()}
                # NNC's CPU-only ops (tensorexpr_fuser.cpp `cpu_compute_heavy_set`): outside the
                # CUDA group, so the function is not one kernel on the GPU
                ok = ok and not (inner & _CPU_ONLY)
                continue
            if kind == "prim::DifferentiableGraph":
                differentiable = True
                continue
            if kind == "prim::If":
                blocks = list(n.blocks())
                for i, b in enumerate(blocks):
                    # a guard's else block is the fallback function's call
                    ok = walk(b, in_fallback or i > 0) and ok
                continue
            if in_fallback or kind in _STRUCTURE or kind in _NO_STORAGE:
                continue
            # (a GPU-only op, `gpu_only_operator_set`: erf, erfc, stands in as tanh: `_gpu_ops_as_cpu`)
            if any(o.type().kind() == "TensorType" for o in n.outputs()):
                ok = False
        return ok

    ok = walk(graph.block() if hasattr(graph, "block") else graph, False)
    return ok and groups == 1 and not differentiable


#: tensorexpr_fuser.cpp `gpu_only_operator_set`: fused on CUDA only (the H100 probe
#: `probes/od81_jit_autodiff_fusion_probe_h100.out`: an erf bias-GELU runs as one allocation a call)
_GPU_ONLY = ("aten::erf", "aten::erfc")


def _gpu_ops_as_cpu(graph):
    """`graph` with each CUDA-only elementwise op (erf, erfc) replaced by tanh, an elementwise op of
    the same signature the CPU rule fuses, so the host stand-ins' grouping is the GPU's (inference
    only: a differentiable graph keeps what the op's own derivative needs)."""

    def walk(block):
        for n in list(block.nodes()):
            for b in n.blocks():
                walk(b)
            if n.kind() in _GPU_ONLY:
                _swap(graph, n, "aten::tanh")

    walk(graph.block() if hasattr(graph, "block") else graph)
    return graph


@contextlib.contextmanager
def _host_passes(*modes):
    """TorchScript's executor on host stand-ins: the twin's modes and CPU autocast off (with `modes`
    entered too), NNC's CPU fusion allowed without LLVM (`_jit_override_can_fuse_on_cpu`,
    `_jit_set_te_must_use_llvm_cpu`); both switches restored after."""
    cpu = torch._C._jit_can_fuse_on_cpu()
    llvm = torch._C._jit_get_te_must_use_llvm_cpu()
    try:
        with contextlib.ExitStack() as stack:
            for m in (
                torch._C._DisableTorchDispatch(),
                torch._C.DisableTorchFunction(),
                *modes,
                torch.autocast("cpu", enabled=False),
            ):
                stack.enter_context(m)
            torch._C._jit_override_can_fuse_on_cpu(True)
            torch._C._jit_set_te_must_use_llvm_cpu(False)
            yield
    finally:
        torch._C._jit_override_can_fuse_on_cpu(cpu)
        torch._C._jit_set_te_must_use_llvm_cpu(llvm)


_OPTIMIZED: dict = {}


def _fuses(fn, kind: str, profile: tuple, args: list, tensor_at: list) -> bool:
    """Whether `fn`'s graph, optimized by TorchScript's executor for `profile` at a `kind` level,
    runs as one TensorExpr group (host stand-ins, NNC's CPU fusion allowed for the run)."""
    key = (id(fn), kind, tuple((p[0], tuple(min(s, 2) for s in p[1]), _striding(p), p[3]) for p in profile))
    key += (torch.is_autocast_enabled("cuda"), torch.is_grad_enabled())
    hit = _OPTIMIZED.get(key)
    if hit is not None:
        return hit
    result = False
    try:
        # (autocast off for the stand-ins: the autocast pass's casts, `_autocast_to_full_precision`,
        # are inside the GPU's group (the probe's graph) but keep NNC's CPU fuser from grouping)
        with _host_passes(torch.autocast("cuda", enabled=False)):
            _SET_STRATEGY([(kind, 1)])
            standin = torch._C._create_function_from_graph(
                "vramscope_standin", _gpu_ops_as_cpu(fn.graph.copy())
            )
            values = list(args)
            for i, p in zip(tensor_at, profile, strict=True):
                values[i] = _stand_in(p)
            for _ in range(torch._C._jit_get_num_profiled_runs() + 1):
                standin(*values)
            graph = torch.jit.last_executed_optimized_graph()
            result = graph is not None and _whole_group(graph)
    except Exception:
        # (a graph TorchScript's passes refuse on the stand-ins: left unfused, as before)
        result = False
    finally:
        _SET_STRATEGY([tuple(e) for e in _strategy[0]])
    _OPTIMIZED[key] = result
    return result


class _Level:
    """One bailout level of an executor: the function's own (0) or a fallback function's."""

    __slots__ = ("dg", "fused", "kind", "profile")

    def __init__(self, profile, kind):
        self.profile = profile
        self.kind = kind
        self.fused = None  # the optimized plan's grouping, built at the level's first optimized call
        self.dg = None  # a differentiable level's `_DG` (False: not modelled)


class Executor:
    """The levels of one scripted function's profiling executor (an autocast specialization)."""

    def __init__(self):
        self.levels: list = []
        self.profiled_at = None  # the level whose profiling run the last call was

    def step(self, fn, args, tensor_at):
        """Advance the executor by one call; whether the call runs the fused kernel (True), unfused
        (False), or the level whose plan is a DifferentiableGraph (that `_Level`)."""
        sig = tuple(_signature(args[i]) for i in tensor_at)
        total = sum(n for _, n in _strategy[0])
        level = 0
        self.profiled_at = None
        while True:
            remaining = total - level
            kind = behavior(remaining)
            if kind is None:
                return False  # the simple executor: no profiling, no fusion
            if level == len(self.levels):
                # this level's profiling run (num_profiled_runs 1): unfused
                self.levels.append(_Level(sig, kind))
                self.profiled_at = level
                return False
            lv = self.levels[level]
            if any(p[3] for p in lv.profile):
                # a differentiable graph (training): its guard reads requires_grad only
                # (`guardDifferentiableGraph`, `prim::RequiresGradCheck`, its else block a
                # fallback function); the DifferentiableGraph's own forward executor runs inside
                # (`DifferentiableGraphOp`, `_dg_call`)
                if len(lv.profile) == len(sig) and all(
                    p[3] == s[3] for p, s in zip(lv.profile, sig, strict=True)
                ):
                    return lv
                level += 1
                continue
            if lv.fused is None:
                lv.fused = _fuses(fn, lv.kind, lv.profile, args, tensor_at)
            if not lv.fused:
                # no whole-function group: run unfused (where the plan has no group at all, as the
                # GPU does; a partial grouping is not modelled)
                return False
            if _passes(lv.kind, lv.profile, sig):
                return True
            level += 1


# --- training: a scripted call at a DifferentiableGraph level ---
#
# A call whose inputs require grad runs, from the level after its profiling run, the plan
# `prim::RequiresGradCheck` + `prim::DifferentiableGraph` (profiling_graph_executor_impl.cpp
# `runProfilingOptimizations`: `CreateAutodiffSubgraphs`, `differentiate`,
# `guardDifferentiableGraph`). The node (graph_executor.cpp `DifferentiableGraphOp`) runs its forward
# graph f through a profiling executor of its own (levels as `Executor`, on the inputs detached) and
# keeps f's captured values for `DifferentiableGraphBackward`, whose executor (one per node, shared
# by its calls) runs the backward graph df: its first run profiles (unfused), then its plan's
# TensorExpr groups, each behind its own guard and fallback chain. The twin takes f, df and df's
# optimized plan from TorchScript's own passes on host stand-ins (autocast as the call's), and
# models f as one group where the function is (`_fuses`): the group's outputs allocated in order,
# those not kept freed at the call's end. The H100 history of blind353/mr03
# (fixtures/run/history_mr03_s79_h100.pickle.xz, entries 11,804-11,822 and 14,290-14,330): forward
# [out, cast(dx), pow, mul, add, cast(add)], pow/mul/add freed in reverse order; backward
# A, B, -A, C, -B, D, -C, then the kept values freed, the last captured first.

_NOP_KINDS = {"prim::TypeCheck", "prim::TensorExprDynamicGuard", "prim::RequiresGradCheck"}
_DG_STRUCTURE = _STRUCTURE | _NO_STORAGE | _NOP_KINDS | {"prim::RequiresGradCheck", "prim::dtype"}


def _attr(node, name):
    """A node attribute's value (`Node.kindOf`: "i", "is", "g", ...)."""
    return getattr(node, node.kindOf(name))(name)


def _py(value, out):
    """An operator's result as the graph's output type (a scalar op may answer a 0-dim tensor)."""
    k = out.type().kind()
    if isinstance(value, torch.Tensor) and k in ("FloatType", "IntType", "BoolType", "NumberType"):
        return value.item()
    return value


class _Interp:
    """The TorchScript interpreter over one graph, in Python, on the twin's tensors: each value
    dropped at its last use in its block (`insertLastUses`); `group(node, inputs)` runs a guarded
    TensorExpr group (the `prim::If` over a `prim::TypeCheck` whose first block holds it)."""

    def __init__(self, group):
        self.group = group

    def run(self, graph, inputs):
        env = {v.unique(): x for v, x in zip(graph.inputs(), inputs, strict=True)}
        del inputs
        return self.block(graph.block() if hasattr(graph, "block") else graph, env, list(graph.inputs()))

    def block(self, block, env, params):
        nodes = list(block.nodes())
        last = {}

        def uses(n, j):
            for v in n.inputs():
                last[v.unique()] = j
            for b in n.blocks():
                for m in b.nodes():
                    uses(m, j)
                for v in b.outputs():
                    last[v.unique()] = j

        for j, n in enumerate(nodes):
            uses(n, j)
        for v in block.outputs():
            last[v.unique()] = len(nodes)
        local = {v.unique() for v in params}
        dying: dict = {}
        for u, j in last.items():
            dying.setdefault(j, []).append(u)
        for j, n in enumerate(nodes):
            self.node(n, env)
            for o in n.outputs():
                local.add(o.unique())
                if last.get(o.unique(), -1) < j:
                    env.pop(o.unique(), None)
            # (a value read inside the node's blocks dies with the node, as its inputs do)
            for u in dying.get(j, ()):
                if u in local:
                    env.pop(u, None)
        # the block's outputs go to its node's outputs; what it made dies with it
        outs = [env[v.unique()] for v in block.outputs()]
        for u in local:
            env.pop(u, None)
        return outs

    def node(self, n, env):
        kind = n.kind()
        outs = list(n.outputs())
        if kind == "prim::Constant":
            env[n.output().unique()] = (
                None if n.output().type().kind() == "NoneType" else n.output().toIValue()
            )
            return
        ins = [env[v.unique()] for v in n.inputs()]
        if kind in _NOP_KINDS:
            res = [*ins, True]
        elif kind == "prim::If":
            blocks = list(n.blocks())
            groups = [m for m in blocks[0].nodes() if m.kind() == "prim::TensorExprGroup"]
            cond = n.inputsAt(0).node()
            if groups and cond.kind() in ("prim::TypeCheck", "prim::TensorExprDynamicGuard"):
                g = groups[0]
                res = list(self.group(g, [env[v.unique()] for v in g.inputs()]))
            else:
                b = blocks[0] if ins[0] else blocks[1]
                res = self.block(b, env, [])
        elif kind == "prim::GradOf":
            # lower_grad_of.cpp `LowerGradOf`: the body runs where any input grad is defined
            # (`prim::AutogradAnyNonZero`), else each output is undefined (`prim::AutogradZero`)
            b = next(iter(n.blocks()))
            if any(x is not None for x in ins):
                res = self.block(b, env, [])
            else:
                res = [None] * len(outs)
        elif kind in ("prim::TupleConstruct", "prim::ListConstruct"):
            res = [tuple(ins) if kind == "prim::TupleConstruct" else list(ins)]
        elif kind in ("prim::TupleUnpack", "prim::ListUnpack"):
            res = list(ins[0])
        elif kind == "aten::__is__":
            res = [ins[0] is ins[1]]
        elif kind == "aten::__isnot__":
            res = [ins[0] is not ins[1]]
        elif kind == "prim::AutogradAllNonZero":
            res = [all(x is not None for x in ins)]
        elif kind == "prim::AutogradAllZero":
            res = [all(x is None for x in ins)]
        elif kind == "prim::AutogradAnyNonZero":
            res = [any(x is not None for x in ins)]
        elif kind == "prim::AutogradAdd":
            a, b = ins
            res = [b if a is None else a if b is None else a + b]
        elif kind == "prim::dtype":
            res = [_dtype_code(ins[0].dtype)]
        else:
            r = _call_op(n, ins)
            res = list(r) if len(outs) > 1 else [r]
        del ins
        for o, r in zip(outs, res, strict=False):
            env[o.unique()] = _py(r, o)


def _call_op(n, ins):
    """An operator node's call: its schema's overload, keyword-only arguments by name."""
    schema = n.schema()
    if schema == "(no schema)":
        return torch._C._jit_get_operation(n.kind())[0](*ins)
    sch = torch._C.parse_schema(schema)
    ns, name = sch.name.split("::")
    op = getattr(getattr(getattr(torch.ops, ns), name), sch.overload_name or "default")
    pos, kw = [], {}
    for a, x in zip(sch.arguments, ins, strict=False):
        if a.kwarg_only:
            kw[a.name] = x
        else:
            pos.append(x)
    return op(*pos, **kw)


def _dtype_code(dtype) -> int:
    """`prim::dtype`'s int (c10::ScalarType)."""
    return torch._C._jit_get_operation("prim::dtype")[0](torch.empty((), dtype=dtype))


def _one_output(graph):
    """`graph` returning its outputs as one tuple (a graph function returns one value)."""
    outs = list(graph.outputs())
    tup = graph.create("prim::TupleConstruct", outs)
    tup.insertBefore(graph.return_node())
    tup.output().setType(torch._C.TupleType([o.type() for o in outs]))
    for i in reversed(range(len(outs))):
        graph.eraseOutput(i)
    graph.registerOutput(tup.output())
    return graph


def _walk(block):
    for n in block.nodes():
        yield n
        for b in n.blocks():
            yield from _walk(b)


_DF_KINDS = _DG_STRUCTURE | {
    "prim::TensorExprGroup",
    "prim::AutogradAllNonZero",
    "prim::AutogradAllZero",
    "prim::AutogradAnyNonZero",
    "prim::AutogradAdd",
    "prim::Constant",
    "prim::If",
    "prim::CallFunction",
    "prim::GradOf",
}


class _DG:
    """One DifferentiableGraph level: f (and f with the group's values as outputs), the df plan,
    the f executor's levels and the df executor's state."""

    def __init__(self, node, outer_inputs, plan):
        self.real = _attr(node, "f_real_outputs")
        self.vjps = list(_attr(node, "df_input_vjps"))
        self.cap_in = list(_attr(node, "df_input_captured_inputs"))
        self.cap_out = list(_attr(node, "df_output_vjps"))  # (f inputs that get grads)
        self.captured = list(_attr(node, "df_input_captured_outputs"))
        self.inputs = outer_inputs  # per f input: ("arg", i) or ("const", value)
        f = node.g("Subgraph").copy()
        self.f_plain = torch._C._create_function_from_graph("vramscope_dg_f", _one_output(f.copy()))
        outs = list(f.outputs())
        made = [n for n in f.nodes() if n.kind() not in _DG_STRUCTURE and n.kind() != "prim::Constant"]
        made_ids = {o.unique() for n in made for o in n.outputs()}
        order = []
        for v in outs:
            if v.node().kind() == "prim::dtype":
                v = v.node().inputsAt(0)
            if v.unique() in made_ids and v.unique() not in [o.unique() for o in order]:
                order.append(v)
        # the group's outputs (first-use order of the node's outputs, a `prim::dtype` read as its
        # tensor: the H100 history's allocation order)
        self.group_out = order
        pos = {v.unique(): i for i, v in enumerate(order)}
        self.out_at = [pos.get(v.unique()) for v in outs]  # f output -> group output (None: not one)
        for v in order:
            f.registerOutput(v)
        self.n_f = len(outs)
        self.f_ext = torch._C._create_function_from_graph("vramscope_dg_f_group", _one_output(f))
        self.plan = plan
        self.df = node.g("ReverseSubgraph").copy()
        self.fwd = Executor()
        self.df_profiled = False
        self.df_groups: dict = {}


def _dg_build(fn, profile, args, tensor_at):
    """The DifferentiableGraph of `fn`'s plan for `profile` (host stand-ins, requires_grad as
    profiled, the call's autocast): a `_DG`, or None where the plan is not one node the twin
    models (one DG returning the function's one output, its inputs the function's)."""
    try:
        with _host_passes():
            standin = torch._C._create_function_from_graph("vramscope_standin", fn.graph.copy())
            outer = plan = None
            for r in range(3):
                values = list(args)
                for i, p in zip(tensor_at, profile, strict=True):
                    values[i] = _stand_in(p)
                y = standin(*values)
                if r == 1:
                    outer = torch.jit.last_executed_optimized_graph()
                if not isinstance(y, torch.Tensor) or not y.requires_grad:
                    return None
                y.backward(torch.ones_like(y))
                if r == 2:
                    plan = torch.jit.last_executed_optimized_graph()
        dgs = outer.findAllNodes("prim::DifferentiableGraph")
        if len(dgs) != 1 or _attr(dgs[0], "f_real_outputs") != 1:
            return None
        node = dgs[0]
        graph_inputs = {v.unique(): i for i, v in enumerate(outer.inputs())}
        mapped = []
        for v in node.inputs():
            src = v.node()
            if src.kind() == "prim::RequiresGradCheck":
                v = src.inputsAt([o.unique() for o in src.outputs()].index(v.unique()))
                src = v.node()
            if v.unique() in graph_inputs:
                mapped.append(("arg", graph_inputs[v.unique()]))
            elif src.kind() == "prim::Constant":
                mapped.append(("const", v.toIValue()))
            else:
                return None
        ret = outer.return_node().inputsAt(0).node()
        if ret.kind() != "prim::If" or next(iter(next(iter(ret.blocks())).outputs())).node() is not node:
            return None
        if plan is None or len(list(plan.inputs())) != len(list(node.g("ReverseSubgraph").inputs())):
            return None
        for g in (plan, node.g("ReverseSubgraph")):
            for n in _walk(g.block() if hasattr(g, "block") else g):
                if n.kind() not in _DF_KINDS and not n.kind().startswith("aten::"):
                    return None
        f = node.g("Subgraph")
        if any(n.kind() in ("prim::If", "prim::Loop") for n in f.nodes()):
            return None
        dg = _DG(node, mapped, plan)
        if dg.out_at[0] is None:
            return None
        return dg
    except Exception:
        return None


def _no_grad_signature(t) -> tuple:
    return (t.dtype, tuple(t.shape), tuple(t.stride()), False)


class _DGFunction(torch.autograd.Function):
    """One call at a DifferentiableGraph level: forward and backward as the node's executors
    run them (`_DG`)."""

    @staticmethod
    def forward(ctx, call, *tensors):
        dg, cap, original, bound, tensor_at, fused = call
        args = list(bound)
        for i, t in zip(tensor_at, tensors, strict=True):
            args[i] = t
        fin = [args[a] if k == "arg" else a for k, a in dg.inputs]
        if fused:
            outer = cap.caching_enabled
            cap.caching_enabled = False
            try:
                res = list(original(dg.f_ext, *fin))
                vals = res[dg.n_f :]
                res = res[: dg.n_f]
                bufs = []
                for v in vals:
                    b = torch.empty_strided(v.size(), v.stride(), dtype=v.dtype, device=v.device)
                    bufs.append(b)
            finally:
                cap.caching_enabled = outer
            del vals
            # the kernel's outputs, allocated before it runs, in the group's output order
            for b in bufs:
                cap.regrow(b, b.untyped_storage().nbytes(), "prim::TensorExprGroup")
            res = [bufs[j] if j is not None else r for r, j in zip(res, dg.out_at, strict=True)]
            kept = {id(res[i]) for i in range(dg.real)} | {id(res[i]) for i in dg.captured}
            # the group's other outputs die with the plan's stack at the call's end, the last first
            for j in reversed(range(len(bufs))):
                if id(bufs[j]) not in kept:
                    bufs[j] = None
            del bufs
        elif fused is None:
            # a fallback function's profiling run (level 1+): the group's ops unfused, returning
            # every output of the group, which die after the call, the first first (the H100
            # history, entries 12,094-12,103: pow, mul)
            res = list(original(dg.f_ext, *fin))
            vals = res[dg.n_f :]
            res = res[: dg.n_f]
            kept = {id(res[i]) for i in range(dg.real)} | {id(res[i]) for i in dg.captured}
            for j in range(len(vals)):
                if id(vals[j]) not in kept:
                    vals[j] = None
            del vals
        else:
            # the forward executor's profiling run (or its simple executor): f unfused
            res = list(original(dg.f_plain, *fin))
        out = res[0]
        ctx.call = (dg, tensor_at)
        ctx.cap_in = [fin[i] for i in dg.cap_in]
        ctx.kept = [None if res[i] is out else res[i] for i in dg.captured]
        ctx.out_at = [i for i, c in enumerate(dg.captured) if res[c] is out]
        ctx.save_for_backward(out if ctx.out_at else None)
        ctx.released = False
        del res, fin, args
        return out

    @staticmethod
    def backward(ctx, grad):
        dg, tensor_at = ctx.call
        (out,) = ctx.saved_tensors
        if ctx.released:
            # a second backward through a retained graph: the GPU keeps the captured values till
            # the graph dies; the twin, which released them after the first, runs on stand-ins
            # without blocks (not modelled: their memory after the first backward)
            ctx.kept, ctx.cap_in = _placeholders(ctx.kept_spec), _placeholders(ctx.cap_in_spec)
        captured = list(ctx.kept)
        for i in ctx.out_at:
            captured[i] = out
        stack = [grad if i < dg.real else None for i in dg.vjps] + list(ctx.cap_in) + captured
        del captured
        res = _df_run(dg, stack)
        del stack
        # DifferentiableGraphBackward's captured values released after the run, the last first
        # (the H100 history: cast(add), then cast(dx))
        ctx.kept_spec, ctx.cap_in_spec = _spec(ctx.kept), _spec(ctx.cap_in)
        ctx.released = True
        while ctx.kept:
            ctx.kept.pop()
        while ctx.cap_in:
            ctx.cap_in.pop()
        grads = [None] * len(tensor_at)
        flat = [g for r in res for g in (r if isinstance(r, tuple) else (r,))]
        for g, fi in zip(flat, dg.cap_out, strict=False):
            kind, a = dg.inputs[fi]
            if kind == "arg" and a in tensor_at:
                grads[tensor_at.index(a)] = g
        return (None, *grads)


def _spec(values) -> list:
    """Tensors as (size, stride, dtype), other values as they are."""
    return [
        ("tensor", v.size(), v.stride(), v.dtype) if isinstance(v, torch.Tensor) else ("value", v)
        for v in values
    ]


def _placeholders(spec) -> list:
    """`_spec`'s values again, the tensors made with the allocator's caching off (no block)."""
    from ._capture import current

    cap = current()
    outer = cap.caching_enabled
    cap.caching_enabled = False
    try:
        return [
            torch.empty_strided(s[1], s[2], dtype=s[3], device="cuda") if s[0] == "tensor" else s[1]
            for s in spec
        ]
    finally:
        cap.caching_enabled = outer


def _df_run(dg, stack):
    """The df executor's run: its first run profiles (each group unfused, its inputs' types the
    plan's guards), later runs the plan, each group through its guard's levels (`behavior`)."""
    from ._capture import current

    cap = current()
    total = sum(n for _, n in _strategy[0])

    def group(g, inputs):
        key = g.output().unique()
        sig = tuple(_no_grad_signature(t) for t in inputs if isinstance(t, torch.Tensor))
        levels = dg.df_groups.setdefault(key, [])
        fused = False
        if dg.df_profiled:
            level = 0
            while True:
                kind = behavior(total - level)
                if kind is None:
                    break
                if level == len(levels):
                    levels.append((sig, kind))  # a fallback function's profiling run
                    break
                if _passes(levels[level][1], levels[level][0], sig):
                    fused = True
                    break
                level += 1
        elif not levels:
            # the profiling run's types: the plan's guards (level 0)
            levels.append((sig, behavior(total)))
            return _Interp(None).run(g.g("Subgraph"), inputs)
        sub = g.g("Subgraph")
        if not fused:
            return _Interp(None).run(sub, inputs)
        outer = cap.caching_enabled
        cap.caching_enabled = False
        try:
            outs = _Interp(None).run(sub, inputs)
        finally:
            cap.caching_enabled = outer
        for t in outs:
            if isinstance(t, torch.Tensor) and cap.handle_of(t) is None:
                nbytes = t.untyped_storage().nbytes()
                if nbytes:
                    cap.regrow(t, nbytes, "prim::TensorExprGroup")
        return outs

    if dg.df_profiled:
        return _Interp(group).run(dg.plan, stack)
    # the first run profiles: df as `runProfilingInsensitiveOptimizations` leaves it (GradOf
    # lowered), unfused; the plan's guards take the types it profiled (the plan run on the same
    # values with the allocator's caching off: no block)
    res = _Interp(None).run(dg.df, stack)
    outer = cap.caching_enabled
    cap.caching_enabled = False
    try:
        _Interp(group).run(dg.plan, stack)
    finally:
        cap.caching_enabled = outer
    dg.df_profiled = True
    return res


def _bind(fn, args, kwargs) -> list:
    """The call's arguments in the schema's order, defaults filled (`createStackForSchema`)."""
    out = []
    params = fn.schema.arguments
    if len(args) > len(params):
        raise TypeError("too many arguments")
    for i, a in enumerate(params):
        if i < len(args):
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            raise TypeError(f"missing argument {a.name}")
    return out


def _outputs(out) -> list:
    """The tensors a scripted function returned, in order (tuples and lists flattened)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _outputs(o)]
    return []


def enabled() -> bool:
    """The rule's switch: `VRAMSCOPE_JIT_FUSION=0` runs every scripted call unfused."""
    return os.environ.get("VRAMSCOPE_JIT_FUSION", "1") != "0"


def script_function_call(original, cap):
    """`torch.jit.ScriptFunction.__call__` on the twin's tensors: the profiling executor's levels
    per function and autocast specialization (`Executor`); a call the fused plan runs allocates
    its outputs only."""
    from ._tensor import is_ours

    executors: dict = {}
    functions: dict = {}

    def call(self, *args, **kwargs):
        if not enabled() or torch._C._get_tracing_state() is not None or torch.compiler.is_dynamo_compiling():
            return original(self, *args, **kwargs)
        try:
            bound = _bind(self, args, kwargs)
        except Exception:
            return original(self, *args, **kwargs)
        tensor_at = [i for i, a in enumerate(bound) if isinstance(a, torch.Tensor)]
        if not tensor_at or not all(is_ours(bound[i]) for i in tensor_at):
            return original(self, *args, **kwargs)
        if not (torch._C._jit_texpr_fuser_enabled() and torch._C._jit_can_fuse_on_gpu()):
            return original(self, *args, **kwargs)
        # GraphFunction::currentSpecialization: one executor per autocast state (CPU, GPU)
        key = (id(self), torch.is_autocast_enabled("cuda"), torch.is_autocast_enabled("cpu"))
        functions[id(self)] = self  # (the id stays the function's)
        ex = executors.get(key)
        if ex is None:
            ex = executors[key] = Executor()
        fused = ex.step(self, bound, tensor_at)
        if isinstance(fused, _Level):
            lv = fused
            if lv.dg is None:
                lv.dg = _dg_build(self, lv.profile, bound, tensor_at) or False
            if lv.dg is False:
                del bound
                return original(self, *args, **kwargs)
            dg = lv.dg
            # the forward executor: the node's inputs detached (`DifferentiableGraphOp`)
            with torch.no_grad():
                f_fused = dg.fwd.step(self, bound, tensor_at) is True
            if not f_fused and (dg.fwd.profiled_at or 0) >= 1:
                f_fused = None  # a fallback function's profiling run
            return _DGFunction.apply(
                (dg, cap, original, bound, tensor_at, f_fused), *[bound[i] for i in tensor_at]
            )
        if not fused:
            del bound
            return original(self, *args, **kwargs)
        del bound
        outer = cap.caching_enabled
        cap.caching_enabled = False
        try:
            out = original(self, *args, **kwargs)
        finally:
            cap.caching_enabled = outer
        # the kernel's outputs, allocated before it runs, in the group's output order
        for t in _outputs(out):
            if is_ours(t) and cap.handle_of(t) is None:
                nbytes = t.untyped_storage().nbytes()
                if nbytes:
                    cap.regrow(t, nbytes, "prim::TensorExprGroup")
        return out

    return call
