"""Composites whose meta-tensor path differs from CUDA's or that the GPU runs as their parts
(`linear`, `dropout`, autograd's `InputBuffer::accumulate`, ops in place inside a node, `Tensor.to`,
`nn.Module._apply`)."""

from __future__ import annotations

import math
import sys

import torch

from .. import _autocast
from .._tensor import non_overlapping_and_dense as _non_overlapping_and_dense
from .._tensor import registered, tensors_in
from .host import _d2h_staging
from .registry import DISPATCH, FUNCTIONS
from .storage import IN_MODULE_APPLY, takes_inference_tensor

aten = torch.ops.aten


# ---- composites whose meta-tensor path differs from CUDA's -----------------------------
# ATen's composites take their "composite compliance" paths for meta tensors
# (`isTensorSubclassLike`: `aten/src/ATen/TensorSubclassLikeUtils.h` counts
# the meta backend); where a CUDA tensor takes another path that allocates
# differently, the CUDA path is reproduced here.


def _python_subclass(t) -> bool:
    """Whether `t` is a tensor subclass with its own `__torch_dispatch__` (a wrapper such as
    `SparseSemiStructuredTensor`)."""
    return isinstance(t, torch.Tensor) and type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__


def _add_bias(output, bias):
    """Linear.cpp's bias after `matmul`: out of place where the bias is subclass-like or carries a
    level-0 forward-AD tangent (`isTensorSubclassLike(*bias) || bias->_fw_grad(0).defined()`: "for
    composite compliance"), else `output.add_(bias)`."""
    from .. import _forward_ad

    if _forward_ad.program_tracing() or _python_subclass(bias) or _forward_ad.has_tangent(bias):
        return torch.add(output, bias)
    return output.add_(bias)


def linear(original):
    """`at::native::linear` (`aten/src/ATen/native/Linear.cpp`) as it runs for
    CUDA tensors: addmm for 2-D inputs, the flattened addmm for contiguous
    inputs, else matmul and the bias added (`_add_bias`). Under autocast
    `linear` is the op autocast wraps (`autocast_mode.cpp`): its three
    arguments are cast first, right to left, and Linear.cpp's choice is made on
    the casts (a non-dense input's cast is contiguous), with autocast excluded."""

    def run(input, weight, bias=None):
        if not registered_user(input) or bias is None:
            return original(input, weight, bias)
        if input.dim() == 2 or (input.is_contiguous() and (input.dim() == 3 or bias.dim() == 1)):
            return original(input, weight, bias)
        if torch.is_inference_mode_enabled() and any(map(_python_subclass, (weight, bias))):
            # inference mode excludes the Autograd keys (c10/core/InferenceMode.h), whose
            # CompositeImplicitAutograd kernel is Linear.cpp's: a tensor subclass's Python key takes
            # `aten::linear` itself (a semi-structured weight's `semi_sparse_linear`,
            # torch/sparse/_semi_structured_ops.py); its `weight.t()` out here would raise "Cannot
            # set version_counter for inference tensor" (as PyTorch does for the program's own)
            return original(input, weight, bias)
        if not torch.is_autocast_enabled("cuda"):
            return _add_bias(torch.matmul(input, weight.t()), bias)
        from .. import _autocast

        dtype = torch.get_autocast_dtype("cuda")
        args = _autocast._map_right_to_left([input, weight, bias], lambda t: _autocast._cast(t, dtype))
        with torch._C._ExcludeDispatchKeyGuard(_autocast._EXCLUDE):
            if args[0].is_contiguous():
                # Linear.cpp reads the cast: `_to_copy` lays a non-dense input out contiguous
                # (preserve_format), so the flattened addmm runs (blind167/fk05's sliced lm_head input)
                output = original(args[0], args[1], args[2])
            else:
                output = _add_bias(torch.matmul(args[0], args[1].t()), args[2])
        # the uncached casts die left to right as the op returns
        args[0] = args[1] = args[2] = None
        return output

    return run


def registered_user(t) -> bool:
    """`registered`, for code that runs above the kernels."""
    from .._tensor import is_ours, wraps_ours

    # a functorch wrapper of one reads `is_cuda()` as the GPU's does (Dropout.cpp's
    # `is_fused_kernel_acceptable` under `vmap(grad(...))`: blind182/fz05's H200 per-op truth runs
    # `native_dropout` 760 times and no `bernoulli_`)
    return is_ours(t) or wraps_ours(t)


def _fused_dropout_input(input) -> bool:
    """Whether Dropout.cpp's `is_fused_kernel_acceptable` reads `input` as a CUDA tensor: a simulated
    one (`registered_user`), or a wrapper subclass C++ reads as CUDA on the GPU (`cuda_wrapper`: a
    DTensor, whose `native_dropout` DTensor's random ops run on the local tensor, NativeDropoutBackward0
    saving the bool mask; as a meta wrapper it would take `_dropout_impl`, whose MulBackward0 keeps a
    noise tensor like the input)."""
    from .._tensor import cuda_wrapper

    return registered_user(input) or cuda_wrapper(input)


def dropout(original):
    """`at::native::dropout` (`aten/src/ATen/native/Dropout.cpp`) for a CUDA
    input: the fused `native_dropout` kernel when training with 0 < p < 1
    (`is_fused_kernel_acceptable`), as the meta path would not take it. `dropout_`
    (`inplace=True`) never takes it: `_dropout_impl` fills a noise tensor like the input
    (`bernoulli_`, `div_`) and multiplies the input by it in place, so autograd's `MulBackward0`
    keeps the noise (blind57/be01's H200 history: MViT's head)."""

    def run(input, p=0.5, training=True, inplace=False):
        if not _fused_dropout_input(input) or not training or not 0 < p < 1 or input.numel() == 0:
            return original(input, p, training, inplace)
        if inplace:
            noise = torch.empty_like(input)
            noise.bernoulli_(1 - p)
            noise.div_(1 - p)
            return input.mul_(noise)
        return torch.native_dropout(input, p, True)[0]

    return run


def dropout_op(cap, func, args, kwargs):
    """`aten.dropout.default` called as an op (a node of an exported program's graph, which
    `ep.module()` runs: torch.export's training IR keeps `aten.dropout`): the same Dropout.cpp
    kernel `F.dropout` reaches, so the fused `native_dropout` for a CUDA input in training, where the
    meta tensor's `_dropout_impl` would keep a noise tensor like the input."""
    names = ("input", "p", "train")
    a = dict(zip(names, args, strict=False)) | kwargs
    input, p, train = a["input"], a["p"], a["train"]
    if not _fused_dropout_input(input) or not train or not 0 < p < 1 or input.numel() == 0:
        return NotImplemented
    return torch.native_dropout(input, p, True)[0]


def linear_op(cap, func, args, kwargs):
    """`aten.linear.default` called as an op (an exported program's node): `linear`'s rule, as
    `F.linear` binds the same Linear.cpp kernel."""
    return linear(func)(*args, **kwargs)


def _native_dropout(cap, func, args, kwargs):
    """`dropout_cuda` (`aten/src/ATen/native/cuda/Dropout.cu`): the bool
    mask is allocated before the output."""
    cap.ops += 1
    out, mask = func(*args, **kwargs)
    if registered(args[0]):
        cap.track(mask, "aten::native_dropout")
        cap.track(out, "aten::native_dropout")
    return out, mask


DISPATCH[aten.native_dropout.default] = _native_dropout
FUNCTIONS[aten.dropout.default] = dropout_op
FUNCTIONS[aten.linear.default] = linear_op


#: `sys.getrefcount` of a gradient only the engine's buffer holds, seen from `_accumulate`: the
#: dispatcher's argument tuple, the local name, getrefcount's argument and the engine's tensor
#: (measured: 4 for plain and non-reentrant checkpointed backwards, 10 under a reentrant checkpoint)
_ACCUMULATE_REFS = 4
#: `Tensor._use_count()` of that gradient seen from `_accumulate` (the buffer, the dispatcher's
#: argument and the Python wrapper's references; measured: 4 where the GPU and the CPU engine add in
#: place, 5 where another node's buffer still holds it)
_ACCUMULATE_USES = 4


#: nodes whose formula (FunctionsManual.cpp) sums terms of its own with `+`, each sum a new tensor
#: on the GPU (`operator+` of plain tensors), where `_accumulate` would take it for the engine's
#: in-place sum: gelu_double_backward's `2 * f_prime_gh + g_prime_fh + h_prime_fg` (tanh branch;
#: blind226/hr01's H200 history: two adds of the input's size each Hutchinson HVP pass), and
#: pinv_backward's `-(K pinvA)^H + (gradh - A K) pinvA pinvA^H + pinvA^H K - ...` (m > n; the m <= n
#: branch alike), which lstsq's backward calls too (blind272/jm05's H100 history: neg, add, add, sub
#: of A's size at the two m x m products; the second add had been taken for the engine's)
_FORMULA_SUMS = {"GeluBackwardBackward0", "LinalgPinvBackward0", "LinalgLstsqBackward0"}


def _accumulate(cap, func, args, kwargs):
    """`InputBuffer::accumulate` (`torch/csrc/autograd/input_buffer.cpp`):
    backward sums two gradients of one input in place, into the buffer's
    tensor, when it holds the only reference to it and its storage and it
    is non-overlapping and dense in any layout, channels-last included
    (`can_accumulate_inplace`); meta tensors count as subclass-like there and
    always take the out-of-place `old + var`, which allocates."""
    if torch._C._current_graph_task_id() == -1 or torch.is_grad_enabled() or len(args) != 2:
        return NotImplemented
    if kwargs.get("alpha", 1) != 1:
        return NotImplemented
    old, var = args
    if not (registered(old) and registered(var)) or old.shape != var.shape or old.dtype != var.dtype:
        return NotImplemented
    if old._is_view() or not _non_overlapping_and_dense(old):
        return NotImplemented
    node = torch._C._current_autograd_node()
    if node is not None and node.name() == "ConvolutionBackwardBackward0" and cap.ggw_term_out is not None:
        # `_convolution_double_backward`'s own `ggO = ggO + ggW_term` (Convolution.cpp), out of place
        # on the GPU (blind173/fq02's H200 history: path-length regularization through modulated
        # convolutions, one output-sized sum per layer)
        if cap.ggw_term_out() is var:
            return NotImplemented
    if node is not None and node.name() in _FORMULA_SUMS:
        # the formula's own sums, out of place on the GPU: its left operand is the term made last,
        # the right an earlier one; the engine's sum of this node's output into a buffer has its
        # older tensor on the left
        h_old, h_var = cap.handle_of(old), cap.handle_of(var)
        if h_old is not None and h_var is not None and h_old > h_var:
            return NotImplemented
    if node is not None and node.name() == "LinalgCholeskyExBackward0" and var._is_view():
        # cholesky_backward's own `gA + gA.tril(-1).mH()` (FunctionsManual.cpp), out of place on
        # the GPU too (blind21/u04's H200 history); the node's gradient itself is no view
        return NotImplemented
    # the buffer's tensor and this call's: nothing else holds the storage
    if torch._C._storage_Use_Count(old.untyped_storage()._cdata) != 2:
        return NotImplemented
    # nor the tensor (`adjusted_use_count(v) == 1`): a Python reference beyond this call's (the
    # gradient a reentrant checkpoint's backward holds in its `args`) keeps it (blind10/j06)
    if sys.getrefcount(old) > _ACCUMULATE_REFS:
        return NotImplemented
    # nor another node's input buffer: a gradient a node passes on twice (AddBackward0's `grad` to
    # both inputs) is held by the buffer of whichever consumer has not run yet (the engine runs
    # later-created nodes first), so the sum into the other is out of place (blind59/bg04's H200
    # history: DPT's fusion layers; torch's CPU engine does the same)
    if old._use_count() > _ACCUMULATE_USES:
        return NotImplemented
    cap.ops += 1
    # `add_`'s meta kernel (`meta_binop_inplace_alpha`, torch/_meta_registrations.py) returns
    # `old` after checks that equal sizes and dtypes pass; not run (0.2 ms a call in Python on the
    # loaded dev machine)
    return old


DISPATCH[aten.add.Tensor] = _accumulate


#: autograd nodes whose backward (torch/csrc/autograd/FunctionsManual.cpp) runs out of place on a
#: tensor subclass (the twin's tensors are one) and in place on plain tensors, and whose out-of-place
#: ops there all act on a temporary of the node's own: those ops, in place (under `_GRAD_MODE_OUT`'s
#: nodes only with grad mode off)
_INPLACE_IN_NODE = {
    # binary_cross_entropy_with_logits_backward: `input.sigmoid().sub_(target)`, `mul_(grad)`, ...
    "BinaryCrossEntropyWithLogitsBackward0": {
        aten.sub.Tensor: aten.sub_.Tensor,
        aten.mul.Tensor: aten.mul_.Tensor,
        aten.div.Scalar: aten.div_.Scalar,
        aten.div.Tensor: aten.div_.Tensor,
    },
    # clamp_backward / clamp_backward_min_max of `clamp.Tensor`: `(self >= min).logical_and_(self <=
    # max)`, `(self < min).logical_and_(min < max)`, `(self > max).logical_or_(max < min)`, then
    # `where` (blind283/jx02's H200 history: timm Gemma4ClippableLinear's clamps by 0-dim buffers)
    "ClampBackward0": {
        aten.logical_and.default: aten.logical_and_.default,
        aten.logical_or.default: aten.logical_or_.default,
    },
    # index_backward: `at::_index_put_impl_(zeros_like_self, indices, grad, true, /*unsafe=*/true)`
    "IndexBackward0": {aten.index_put.default: aten._index_put_impl_.default},
    # gather_backward (TensorAdvancedIndexing.cpp): `grad.new_zeros(...)`, `scatter_add_`
    "GatherBackward0": {aten.scatter_add.default: aten.scatter_add_.default},
    # index_select_backward: `grad.new_zeros(...).index_add_(dim, index, grad)`
    "IndexSelectBackward0": {aten.index_add.default: aten.index_add_.default},
}
# value_selecting_reduction_backward: `at::zeros(sizes).scatter_(dim, indices, grad)`
for _node in ("MaxBackward0", "MinBackward0", "TopkBackward0", "SortBackward0", "SortBackward1"):
    _INPLACE_IN_NODE[_node] = {aten.scatter.src: aten.scatter_.src}
for _node in ("MedianBackward1", "NanmedianBackward1", "KthvalueBackward0", "ModeBackward0"):
    _INPLACE_IN_NODE[_node] = {aten.scatter.src: aten.scatter_.src}


#: nodes whose formula also runs out of place with grad mode on (`create_graph=True`):
#: binary_cross_entropy_with_logits_backward's `|| at::GradMode::is_enabled()` (Loss.cpp); the
#: others' (gather_backward, index_backward, index_select_backward,
#: value_selecting_reduction_backward) ask only `areAnyTensorSubclassLike` (blind83/ce05's H200
#: history: a double backward's GatherBackward0 scatters into its zeros in place)
_GRAD_MODE_OUT = {"BinaryCrossEntropyWithLogitsBackward0"}


def _in_place_in_node(cap, func, args, kwargs):
    """An op of `_INPLACE_IN_NODE` inside its node's backward, run in place as the GPU runs it."""
    node = torch._C._current_autograd_node()
    if node is not None and torch.is_grad_enabled() and node.name() in _GRAD_MODE_OUT:
        return NotImplemented
    inplace = _INPLACE_IN_NODE.get(node.name(), {}).get(func) if node is not None else None
    a = args[0] if args else None
    if inplace is None or not isinstance(a, torch.Tensor) or not registered(a):
        return NotImplemented
    if inplace is aten._index_put_impl_.default:
        args = (*args[:3], True, True)  # accumulate, unsafe
        return cap.run(inplace, args, {}, [t for t in tensors_in(args) if registered(t)])
    other = args[1] if len(args) > 1 else None
    shape = torch.broadcast_shapes(a.shape, other.shape) if isinstance(other, torch.Tensor) else a.shape
    dtype = torch.result_type(a, other) if other is not None else a.dtype
    # an in-place op writes its result type cast to `a`'s where `canCast` allows it
    # (TensorIteratorBase::compute_types): a bf16 `sigmoid().sub_(float32 target)` stays in place
    if tuple(shape) != tuple(a.shape) or not torch.can_cast(dtype, a.dtype):
        return NotImplemented
    return cap.run(inplace, args, kwargs, [t for t in tensors_in(args) if registered(t)])


for _table in _INPLACE_IN_NODE.values():
    for _f in _table:
        DISPATCH[_f] = _in_place_in_node


def _to(cap, func, args, kwargs):
    """`Tensor.to` as it reaches the dispatcher (inference mode skips its
    decomposition): a copy to the host reads the values the twin knows; a
    ZeroTensor's `.to(kMeta)` is a plain meta tensor (`meta_copy`)."""
    src = args[0]
    dev = kwargs.get("device")
    if dev is None and len(args) > 1 and isinstance(args[1], (torch.device, str)):
        dev = args[1]
    if (
        registered(src)
        and src._is_zerotensor()
        and dev is not None
        and torch.device(dev).type == "meta"
        and not cap.genuine_meta
    ):
        return meta_copy(src)
    if registered(src) and dev is not None and torch.device(dev).type == "cpu":
        dtype = (
            kwargs.get("dtype")
            or next((a for a in args[1:] if isinstance(a, torch.dtype)), None)
            or src.dtype
        )
        # `to` is `_to_copy` there, with copy_impl's device-side staging of a source that is not
        # laid out as the host copy (blind189/gg02's H200 history: the DDIM sampler's
        # `x[:, :8].cpu()` of an inference tensor stages 20,480 bytes, as outside inference mode)
        fmt = kwargs.get("memory_format")
        keep = fmt in (None, torch.preserve_format) and _non_overlapping_and_dense(src)
        shape = list(src.shape)
        stride = list(src.stride()) if keep else list(torch.empty(shape, device="meta").stride())
        non_blocking = kwargs.get(
            "non_blocking", args[3] if func is aten.to.device and len(args) > 3 else False
        )
        _d2h_staging(cap, shape, stride, dtype, src, bool(non_blocking), "aten::_to_copy")
        return cap.value_of(src, "a copy to the host").to(dtype=dtype).clone()
    return NotImplemented


for _f in (aten.to.dtype_layout, aten.to.device):
    DISPATCH[_f] = _to


def meta_copy(t):
    """A plain meta tensor of `t`'s sizes, off the simulated device: what `.to(kMeta)` makes of a
    CUDA tensor. The ZeroTensor kernels of add, sub, mul and div (BinaryOps.cpp `*_zerotensor`)
    compute their result's sizes on such copies of their operands (a ZeroTensor's materialised by
    ZeroTensorFallback.cpp's `zeros({}).expand` before the copy), no device memory on the GPU."""
    if t._is_zerotensor():
        return torch.empty(t.shape, dtype=t.dtype, device="meta")
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def prims_on_meta(cap, func, args, kwargs):
    """A prim reaches the twin only from a Python meta kernel (torch/_refs) that a C++ kernel
    redispatched to the Meta key: the ZeroTensor kernels' sizes, computed on `.to(kMeta)` copies
    (`meta_copy`), which take no device memory on the GPU. Run on plain meta copies, untracked
    (Inductor's own prims excepted)."""
    if func._schema.name.startswith("prims::inductor_"):
        return NotImplemented

    def plain(x):
        return meta_copy(x) if isinstance(x, torch.Tensor) and registered(x) else x

    cargs = [[plain(y) for y in a] if isinstance(a, (list, tuple)) else plain(a) for a in args]
    ckwargs = {k: plain(v) for k, v in kwargs.items()}
    return func(*cargs, **ckwargs)


def module_apply(original):
    """`nn.Module._apply` keeping tied parameters tied.

    PyTorch moves a CPU parameter to CUDA in place (`param.data = ...`,
    since `_has_compatible_shallow_copy_type` holds between dense CPU and
    CUDA tensors), so a parameter two modules share stays one; between CPU
    and meta tensors it does not hold, and `_apply` would make one copy per
    module. Here each shared parameter is converted once, and every module
    that held it gets the same new parameter. On the GPU the old storage
    dies at that first conversion: the other modules hold a stand-in
    aliasing the result until their turn, not the old tensor. A buffer is
    not moved in place (`self._buffers[key] = fn(buf)`): a buffer two modules
    share becomes one copy per module, as the twin's `_apply` makes it
    (blind217/hi06's H200 history: the MADE output mask registered in two
    MaskedLinear layers, 1 MiB on the GPU twice per IAF step)."""
    depth = [0]
    real_compatible = torch._has_compatible_shallow_copy_type

    def in_place(t, applied) -> bool:
        """Whether `_apply` moves `t` by `param.data = applied` on the GPU, where the twin's meta
        tensor fails the check: a plain dense CPU parameter taking a simulated tensor (the same
        Parameter stays, so an optimizer built before `.cuda()` still holds it), or a simulated
        parameter taking a dense CPU tensor (`.to("cpu")`: whoever else holds the Parameter, as
        eager QAT's float module does through its qconfig's factory-kwargs closure, sees the CPU
        tensor, and the CUDA storage dies: blind169/fm04's H200 record). A parameter with a
        gradient moves so too, its gradient after it (`_apply`: `out_param.grad.data = ...`), so an
        optimizer's state stays with it (blind335/lx04: fast_neural_style's checkpoint
        `transformer.eval().cpu()` then `.to(device)` between steps, Adam's state left on the GPU)."""
        if type(t) is not torch.nn.Parameter or t.grad_fn is not None:
            return False
        if t.layout != torch.strided or applied.layout != torch.strided:
            return False
        if t.device.type == "cpu":
            return registered(applied)
        return registered(t) and type(applied) is torch.Tensor and applied.device.type == "cpu"

    def from_meta(t, applied) -> bool:
        """Whether `t`, a program's meta tensor, becomes a simulated one: a meta tensor's key set is
        not a dense backend's (TensorImpl::has_compatible_shallow_copy_type), so on the GPU `_apply`
        wraps each module's `Parameter(fn(param))` and a tie is broken (`to_empty(device="cuda")`)."""
        return t.device.type == "meta" and registered(applied)

    def swapped(applied) -> bool:
        """Whether `_apply` swaps `applied` into the Parameter (nn/modules/module.py,
        `p_should_use_swap_tensors`: the future flag or a traceable wrapper subclass's result, as a
        DTensor's), keeping the same Parameter object in every module that holds it."""
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass

        return torch.__future__.get_swap_module_params_on_conversion() or is_traceable_wrapper_subclass(
            applied
        )

    def compatible(t, applied):
        if from_meta(t, applied):
            return False
        if in_place(t, applied) or takes_inference_tensor(t, applied):
            return True
        return real_compatible(t, applied)

    def run(self, fn, recurse=True):
        if depth[0]:
            return original(self, fn, recurse)
        owners: dict[int, list] = {}
        for mod in self.modules() if recurse else [self]:
            for key, t in mod._parameters.items():
                if t is not None:
                    owners.setdefault(id(t), []).append((mod._parameters, key))
        memo: dict[int, torch.Tensor] = {}
        stand_ins = []  # kept alive while `_apply` runs, so that their ids stay theirs
        replaced = []  # (the shared parameter, the new one the modules now hold)
        untied: set[int] = set()  # the shared meta parameters each module converted itself

        def once(t):
            hit = memo.get(id(t))
            if hit is not None:
                return hit
            places = owners.get(id(t), ())
            if len(places) < 2:
                # held by nothing here: its old storage dies when the module lets it go, as on the GPU
                return fn(t)
            hit = fn(t)
            if swapped(hit):
                # nn.Module._apply swaps a wrapper subclass's result into the shared Parameter
                # (`torch.utils.swap_tensors(param, Parameter(param_applied))`), so the tie stays and
                # every module that holds it converts it again, the previous conversion freed at the
                # swap: blind348/mm01's tied FSDP2 (DTensor) embedding and lm_head, `to_empty` holds
                # a second 206,045,184-byte `empty_like` beside the first (its H100 phase-0 peak)
                return hit
            if from_meta(t, hit):
                # one copy per module that holds it, and the tie stays broken (blind260/ja03)
                untied.add(id(t))
                return hit
            memo[id(t)] = hit
            if hit is not t and not in_place(t, hit):
                # PyTorch's `param.data = ...` changes the one shared tensor: no module holds the old
                # storage any more
                for table, key in places:
                    if table[key] is t:
                        new = (
                            torch.nn.Parameter(hit, t.requires_grad)
                            if isinstance(t, torch.nn.Parameter)
                            else hit
                        )
                        memo[id(new)] = hit
                        stand_ins.append(new)
                        replaced.append((t, new))
                        table[key] = new
            return hit

        lazy = [
            (table, key, t)
            for mod in (self.modules() if recurse else [self])
            for table in (mod._parameters, mod._buffers)
            for key, t in table.items()
            if isinstance(t, torch.nn.parameter.UninitializedTensorMixin)
        ]
        depth[0] += 1
        IN_MODULE_APPLY[0] += 1
        torch._has_compatible_shallow_copy_type = compatible
        try:
            out = original(self, once, recurse)
        finally:
            torch._has_compatible_shallow_copy_type = real_compatible
            IN_MODULE_APPLY[0] -= 1
            depth[0] -= 1
        for table, key, old in lazy:
            new = table[key]
            if new is not old and isinstance(new, torch.Tensor):
                # on the GPU `param.data = ...` keeps a lazy module's parameter uninitialized, to be
                # materialized on its new device at the first call
                table[key] = type(old)(requires_grad=old.requires_grad, device=new.device, dtype=new.dtype)
        for old, new in replaced:
            if isinstance(new, torch.nn.Parameter) and new.grad is None and old.grad is not None:
                # on the GPU the shared Parameter stays and keeps its gradient, which `_apply`
                # converted with it (`param.grad.data = fn(param.grad)`): blind180/fx04's tied
                # embedding and lm_head cast to bfloat16 hold both the weight and its gradient
                new.grad = old.grad
        for ident, places in owners.items():
            if len(places) > 1 and ident not in untied:
                table, key = places[0]
                for other, k in places[1:]:
                    other[k] = table[key]
        return out

    return run


# ---- composites the GPU runs as their parts ------------------------------------------------------


def _as_composite(cap, func, args, kwargs):
    """An op without a CUDA kernel of its own runs its CompositeExplicitAutogradNonFunctional code on
    the GPU, while its meta kernel gives only the outputs: here that code runs op by op through the
    capture. `_trilinear` (Linear.cpp, `nn.Bilinear` and its backward): the zeroed output, then per
    index of the unrolled dimension two `sumproduct_pair`s (permute, reshape, bmm) and an `add_`
    (blind44/ar06's H200 record: 513 allocations per call)."""
    if not any(registered(t) for t in tensors_in((args, kwargs))):
        return NotImplemented
    with cap._modes[1]:  # the parts come back to the mode
        return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional, *args, **kwargs)


DISPATCH[aten._trilinear.default] = _as_composite


def _as_composite_explicit(cap, func, args, kwargs):
    """`_as_composite` for an op whose CUDA code is its CompositeExplicitAutograd kernel.
    `affine_grid_generator` (AffineGridGenerator.cpp): the base grid (N, H, W, 3) in theta's dtype,
    each axis's `linspace` (times (n - 1) / n unless align_corners) copied into it, then the grid
    from its `bmm` with theta transposed (blind127/dw01's H200 record: 8 allocations per call); under
    autocast the `bmm` casts both to the lower precision and the grid comes out in it (its history)."""
    if not any(registered(t) for t in tensors_in((args, kwargs))):
        return NotImplemented
    with cap._modes[1], _autocast.parts_of(func):  # the parts come back to the mode, through autocast
        return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)


DISPATCH[aten.affine_grid_generator.default] = _as_composite_explicit


def _mvlgamma(cap, func, args, kwargs):
    """`mvlgamma` (UnaryOps.cpp), CompositeExplicitAutograd, whose `native::arange` of the p
    half-steps bypasses the dispatcher (so `_as_composite_explicit` would not see it): that
    `arange`, its sum with `self.unsqueeze(-1)`, `lgamma_`, the `sum(-1)` (the output) and an
    `add_` (the H100's events of `LKJCholesky.log_prob`, blind301/kp02: +60 +60 -60 +4 -60 for p 15
    of a scalar). Integer inputs (promoted to the default dtype) keep the meta path."""
    self, p = args[0], args[1] if len(args) > 1 else kwargs["p"]
    if not registered(self) or not self.is_floating_point():
        return NotImplemented
    with cap._modes[1]:  # the parts come back to the mode
        half_steps = torch.arange(-p * 0.5 + 0.5, 0.5, 0.5, dtype=self.dtype, device=self.device)
        terms = half_steps.add(self.unsqueeze(-1))
        del half_steps
        return terms.lgamma_().sum(-1).add_(p * (p - 1) * math.log(math.pi) * 0.25)


DISPATCH[aten.mvlgamma.default] = _mvlgamma
