"""TorchScript's graph passes whose checks read a constant tensor's device in C++, where the twin's
CUDA tensors are meta: the twin applies the rewrite such a check would let through on the GPU."""

from __future__ import annotations

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
            # (a GPU-only op left out by the CPU rule, `gpu_only_operator_set`: erf, erfc, would be
            # grouped on the GPU, in a grouping the stand-ins do not show: not modelled, unfused)
            if any(o.type().kind() == "TensorType" for o in n.outputs()):
                ok = False
        return ok

    ok = walk(graph.block() if hasattr(graph, "block") else graph, False)
    return ok and groups == 1 and not differentiable


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
    cpu = torch._C._jit_can_fuse_on_cpu()
    llvm = torch._C._jit_get_te_must_use_llvm_cpu()
    try:
        # (autocast off for the stand-ins: the autocast pass's casts, `_autocast_to_full_precision`,
        # are inside the GPU's group (the probe's graph) but keep NNC's CPU fuser from grouping)
        with (
            torch._C._DisableTorchDispatch(),
            torch._C.DisableTorchFunction(),
            torch.autocast("cuda", enabled=False),
            torch.autocast("cpu", enabled=False),
        ):
            torch._C._jit_override_can_fuse_on_cpu(True)
            torch._C._jit_set_te_must_use_llvm_cpu(False)
            _SET_STRATEGY([(kind, 1)])
            standin = torch._C._create_function_from_graph("vramscope_standin", fn.graph.copy())
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
        torch._C._jit_override_can_fuse_on_cpu(cpu)
        torch._C._jit_set_te_must_use_llvm_cpu(llvm)
        _SET_STRATEGY([tuple(e) for e in _strategy[0]])
    _OPTIMIZED[key] = result
    return result


class _Level:
    """One bailout level of an executor: the function's own (0) or a fallback function's."""

    __slots__ = ("fused", "kind", "profile")

    def __init__(self, profile, kind):
        self.profile = profile
        self.kind = kind
        self.fused = None  # the optimized plan's grouping, built at the level's first optimized call


class Executor:
    """The levels of one scripted function's profiling executor (an autocast specialization)."""

    def __init__(self):
        self.levels: list = []

    def step(self, fn, args, tensor_at) -> bool:
        """Advance the executor by one call; whether the call runs the fused kernel."""
        sig = tuple(_signature(args[i]) for i in tensor_at)
        total = sum(n for _, n in _strategy[0])
        level = 0
        while True:
            remaining = total - level
            kind = behavior(remaining)
            if kind is None:
                return False  # the simple executor: no profiling, no fusion
            if level == len(self.levels):
                # this level's profiling run (num_profiled_runs 1): unfused
                self.levels.append(_Level(sig, kind))
                return False
            lv = self.levels[level]
            if any(p[3] for p in lv.profile):
                # a differentiable graph (training): its guard reads requires_grad only
                # (`guardDifferentiableGraph`, `prim::RequiresGradCheck`, its else block a
                # fallback function); what runs inside it is not modelled: unfused
                if len(lv.profile) == len(sig) and all(
                    p[3] == s[3] for p, s in zip(lv.profile, sig, strict=True)
                ):
                    return False
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
