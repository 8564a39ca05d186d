"""Ops that change a tensor's storage in place: `var.data = new` (`VariableHooks::set_data`),
`resize_` (`aten/src/ATen/native/cuda/Resize.cpp`) and `swap_tensors`."""

from __future__ import annotations

import copy
import copyreg
import weakref

import torch

from .. import _tensor
from .._tensor import registered
from .registry import DISPATCH, FUNCTIONS

aten = torch.ops.aten


def _swap_tensors_unchecked(t1, t2):
    """`torch.utils.swap_tensors` (torch/utils/__init__.py) without its use-count check: the two
    Python objects swap their classes, `__dict__`s, slots and TensorImpls."""
    slots = set(copyreg._slotnames(t1.__class__))  # type: ignore[attr-defined]
    for name in ("__class__", "__dict__"):
        tmp = getattr(t1, name)
        setattr(t1, name, getattr(t2, name))
        setattr(t2, name, tmp)
    for slot in slots:
        if hasattr(t1, slot) and hasattr(t2, slot):
            tmp = getattr(t1, slot)
            setattr(t1, slot, getattr(t2, slot))
            setattr(t2, slot, tmp)
        elif hasattr(t1, slot):
            setattr(t2, slot, getattr(t1, slot))
            delattr(t1, slot)
        elif hasattr(t2, slot):
            setattr(t1, slot, getattr(t2, slot))
            delattr(t2, slot)
    torch._C._swap_tensor_impl(t1, t2)


#: how deep `nn.Module._apply` runs (`composite.module_apply`): there a parameter's gradient moves after
#: the parameter (`out_param.grad.data = fn(param.grad)`, or `out_param.grad = ...`), so `var.data = new`
#: may move a parameter that has one
IN_MODULE_APPLY = [0]


def _moves_with_grad(var) -> bool:
    """Whether `var.data = new` may take `var` with its gradient: only inside `nn.Module._apply`,
    which read the gradient before and moves it next (torch/nn/modules/module.py). On the GPU
    `set_data` (`VariableHooks::set_data`) leaves the gradient on the old device until then; here
    the variable lets it go before its TensorImpl is swapped, and `_apply` then gives it the moved
    one (`out_param.grad = grad_applied`, the simulated and CPU tensors not being compatible): the
    old gradient's storage dies as on the GPU."""
    return var.grad is None or IN_MODULE_APPLY[0] > 0


def takes_inference_tensor(var, new) -> bool:
    """Whether `var.data = new` gives a simulated tensor a simulated inference tensor (`module.half()`
    under inference_mode: `_apply`'s `param.data = fn(param)`). On the GPU both are dense CUDA
    tensors, which `has_compatible_shallow_copy_type` (c10/core/TensorImpl.h) lets through whatever
    their key sets; as meta tensors they must have equal key sets, and an inference tensor's lacks
    the autograd keys."""
    return (
        isinstance(new, torch.Tensor)
        and registered(var)
        and registered(new)
        and new.is_inference()
        and not var.is_inference()
        and var.layout == torch.strided
        and new.layout == torch.strided
    )


#: the most elements of a tensor whose values `var.data = new` carries over (`_carry_values`): the
#: twin's own bound for small results (`_capture.VALUE_LIMIT`), not a PyTorch constant; a larger
#: parameter's would keep a host copy of a host-built model for its whole life
CARRIED_LIMIT = 1 << 16


def _carry_values(var, new) -> None:
    """After `var.data = new`, `var` reads `new`'s storage, so the values the twin carries for `new`
    are `var`'s too (up to `CARRIED_LIMIT` elements). `nn.Module.to` moves a host-built parameter
    so (`_apply`'s `param.data = fn(param)`): without this the CUDA parameter read as zeros where
    the tensor `param.to("cuda")` carries its values (blind332/lu03: `torch.linalg.matrix_exp` of
    the transition built from an `SSM().to(device)`'s parameters took its degree-18 upper bound
    where the H100's history has degree 8)."""
    v = _tensor.value(new)
    if v is None or new.numel() > CARRIED_LIMIT:
        return
    _tensor.set_value(var, v, _tensor.assumed(new))


def _set_data(cap, func, args, kwargs):
    """`var.data = new` (`VariableHooks::set_data`): the variable keeps its identity and autograd
    state and takes `new`'s tensor. On the GPU a CPU variable may take a CUDA tensor (dense CPU
    and CUDA impls are compatible: `has_compatible_shallow_copy_type`, c10/core/TensorImpl.h), as
    timm's `reparameterize` does with a fresh layer's weight; a simulated tensor is a meta tensor,
    which that check refuses against a CPU one, so the variable first becomes a meta tensor."""
    var, new = args[0], args[1] if len(args) > 1 else None
    if (
        type(var) is torch.nn.Parameter
        and registered(var)
        and type(new) is torch.Tensor
        and new.device.type == "cpu"
        and new.layout == torch.strided
        and var.grad_fn is None
        and _moves_with_grad(var)
    ):
        # the reverse (`.to("cpu")`): the Parameter takes a CPU stand-in's TensorImpl, the stand-in
        # the simulated one, whose storage dies with it as the CUDA storage dies on the GPU
        stand_in = torch.nn.Parameter(torch.empty(0, dtype=new.dtype), requires_grad=var.requires_grad)
        # the gradient `_apply` moves next leaves the simulated impl, which an autograd graph may
        # keep (`_moves_with_grad`): on the GPU its storage dies at `out_param.grad.data = ...`
        var.grad = None
        _swap_tensors_unchecked(var, stand_in)
        var.__dict__, stand_in.__dict__ = stand_in.__dict__, var.__dict__
        # set_data replaces the storage inside the variable's own TensorImpl, which an autograd
        # graph may still hold (the last loss's AccumulateGrad, after its backward): the swapped-out
        # simulated impl lets go of its storage, which dies unless a view holds it
        with torch.no_grad():
            stand_in.set_()
        del stand_in
        return func(var, new)
    if takes_inference_tensor(var, new):
        # the variable takes a plain alias of the inference tensor's storage, whose key set is its
        # own: the same storage and layout, so the old storage dies as on the GPU (there the
        # variable also becomes an inference tensor, `shallow_copy_from` copying the key set)
        cap.genuine_meta += 1
        try:
            with torch.inference_mode(False), torch.no_grad():
                alias = torch.empty(0, dtype=new.dtype, device="meta")
                alias.set_(new.untyped_storage(), new.storage_offset(), new.shape, new.stride())
        finally:
            cap.genuine_meta -= 1
        out = func(var, alias)
        _carry_values(var, new)
        return out
    if (
        isinstance(var, torch.Tensor)
        and isinstance(new, torch.Tensor)
        and registered(var)
        and registered(new)
    ):
        # both on the simulated device: `var` reads `new`'s storage, so it carries `new`'s values
        # (the same host tensor, aliased as the storages are), or none where `new` carries none.
        # It kept its own: torch.nn.utils.prune's `remove` (`orig.data = weight.data`) left a
        # pruned weight reading unpruned
        out = func(var, new)
        _tensor.set_value(var, _tensor.value(new), _tensor.assumed(new))
        _tensor.set_standin(var, _tensor.standin(new))
        return out
    if (
        not isinstance(var, torch.Tensor)
        or not isinstance(new, torch.Tensor)
        or not registered(new)
        or registered(var)
        or _tensor.BASE_IS_META(var)
        or var.layout != torch.strided
        or new.layout != torch.strided
        or var.grad_fn is not None
        or not _moves_with_grad(var)
    ):
        return NotImplemented
    cap.genuine_meta += 1
    try:
        with torch.no_grad():
            stand_in = torch.empty(var.shape, dtype=var.dtype, device="meta")
        if isinstance(var, torch.nn.Parameter):
            stand_in = torch.nn.Parameter(stand_in, requires_grad=var.requires_grad)
        else:
            stand_in.requires_grad_(var.requires_grad)
    finally:
        cap.genuine_meta -= 1
    if var._use_count() > 2 or (var._use_count() == 2 and not var.is_leaf) or weakref.getweakrefcount(var):
        # set_data changes the TensorImpl whoever else holds the variable; swap_tensors refuses a
        # variable an autograd graph still holds (its use count), as the weight the old
        # `torch.nn.utils.weight_norm` computes at wrapping keeps its g and v saved until the first
        # forward recomputes it (IGR's and NeuS's SDF networks, blind162/ff05, moved by `.to(device)`
        # after wrapping); that stale graph reads the old tensor on the GPU too, so the swap goes on
        # without the check; a weak reference to the variable (torch.export's unlifted module keeps
        # them) stays with it, as with set_data, where swap_tensors refuses it
        _swap_tensors_unchecked(var, stand_in)
    else:
        torch.utils.swap_tensors(var, stand_in)
    # swap_tensors swaps the Python objects' `__dict__` too; set_data changes only the TensorImpl,
    # so the variable keeps its own attributes (the state-spaces repository's `p._optim` on S4D's
    # log_dt, read after `model.to(device)` to build its optimizer groups: blind156/ez01's H200
    # history allocates those parameters' AdamW states in their own group)
    var.__dict__, stand_in.__dict__ = stand_in.__dict__, var.__dict__
    out = func(var, new)
    _carry_values(var, new)
    return out


def _resize(cap, func, args, kwargs):
    """`resize_` of a CUDA tensor (`resize_impl_cuda_` / `resize_bytes_cuda`, aten/src/ATen/native/
    cuda/Resize.cpp): past its storage's bytes, the storage takes a new block of exactly the new
    size, the old one freed after the copy (QAT's per-channel observers grow their buffers so:
    blind62/bj06's H200 history); within them, nothing."""
    self_ = args[0]
    if not registered(self_):
        return NotImplemented
    before = self_.untyped_storage().nbytes()
    out = cap.run(func, args, kwargs, [self_])
    after = self_.untyped_storage().nbytes()
    if after > before:
        cap.regrow(self_, after, func._schema.name)
    return out


DISPATCH[aten.resize_.default] = _resize


FUNCTIONS[torch.Tensor.data.__set__] = _set_data


def _deepcopy(cap, func, args, kwargs):
    """`Tensor.__deepcopy__` of a simulated tensor that carries the twin's own attributes
    (`_vs_val`, a CPU tensor of its values): torch/_tensor.py deep-copies the tensor's `__dict__`,
    which on the GPU holds none of them, so the program's copy is the storage's device-to-device
    one alone. The twin's attributes are copied outside the dispatch: a host copy there would read
    as the program's first parallel CPU op and start OpenMP's workers, whose stacks and arenas take
    address space among the segments (the driver's rule 15; blind268/ji02's H100 history: the EMA
    target encoder's `deepcopy` starts none, its next segment lies directly below the lowest)."""
    t = args[0]
    d = getattr(t, "__dict__", None)
    if not d or not registered(t):
        return NotImplemented
    own = {k: v for k, v in d.items() if k.startswith("_vs_")}
    if not own:
        return NotImplemented
    for k in own:
        del d[k]
    try:
        new = func(*args, **kwargs)
    finally:
        d.update(own)
    memo = args[1] if len(args) > 1 else kwargs.get("memo")
    with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
        for k, v in own.items():
            setattr(new, k, copy.deepcopy(v, memo))
    return new


FUNCTIONS[torch.Tensor.__deepcopy__] = _deepcopy
