"""Operators defined outside ATen. A `torch.library.custom_op` runs its Python implementation on
the GPU (its CUDA kernel, else its device-agnostic one, registered as `CompositeExplicitAutograd`:
torch/_library/custom_ops.py), so the twin runs that implementation op by op through the capture;
its fake kernel, which the meta tensors would reach, gives the outputs' sizes only. Any other
operator outside ATen without a rule of the twin is named unmeasured."""

from __future__ import annotations

import torch

#: namespaces of operators that allocate nothing beyond their outputs or that the twin handles
#: elsewhere (the fake process group's collectives, profiler markers, prims of decompositions;
#: TorchScript's `prim::device`, which a traced graph's `tensor.device` becomes, returns a device)
KNOWN_NAMESPACES = frozenset(
    {"aten", "prims", "_c10d_functional", "_c10d_functional_autograd", "c10d", "profiler", "prim"}
)


def implementation(func):
    """The Python function a GPU runs for `func`, a `torch.library.custom_op`, or None."""
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:
        return None
    opdef = OPDEFS.get(func._schema.name)
    if opdef is None:
        return None
    fns = opdef._backend_fns
    return fns.get("cuda") or fns.get(None) or (opdef._init_fn if not fns else None)


def python_cuda_kernel(func) -> bool:
    """Whether the kernel the GPU's dispatcher runs for `func` at the CUDA key is a Python function
    registered with `Library.impl` (`torch.library.impl(qualname, "cuda")`, `Library("ns",
    "DEF").impl(name, fn, "CUDA")`, or its `CompositeExplicitAutograd` kernel, `"default"`, where
    the CUDA key has none of its own): torch/library.py keeps every such registration's
    `ns/name/key` in `_impls` while its library lives. A kernel from C++ (an extension's) is not."""
    impls = getattr(torch.library, "_impls", None)
    if not impls:
        return False
    schema = func._schema
    ns, _, base = schema.name.partition("::")
    names = [f"{base}.{schema.overload_name}"] if schema.overload_name else [base, f"{base}.default"]
    qualname = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CUDA"):
        keys = ("CUDA",)
    else:
        keys = ("CompositeExplicitAutograd",)
    return any(f"{ns}/{n}/{k}" in impls for n in names for k in keys)


#: the dispatcher's key set of the CUDA backend alone: a redispatch there runs the CUDA kernel
_CUDA_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)


def run(cap, func, args, kwargs):
    """`func`'s custom-op implementation on the simulated tensors, or its Python CUDA kernel (as
    the GPU's dispatcher calls it, through `redispatch` at the CUDA key), or NotImplemented."""
    fn = implementation(func)
    if fn is None:
        if func.namespace in KNOWN_NAMESPACES or not python_cuda_kernel(func):
            return NotImplemented
        cap.ops += 1
        with cap._modes[1]:
            return func.redispatch(_CUDA_KEYSET, *args, **kwargs)
    cap.ops += 1
    with cap._modes[1]:
        return fn(*args, **kwargs)


def note(cap, func) -> None:
    """Name an operator outside ATen that ran as its fake (meta) kernel."""
    if func.namespace not in KNOWN_NAMESPACES:
        cap.note_unmeasured(f"{func._schema.name} (outside ATen: outputs from its fake kernel)")
