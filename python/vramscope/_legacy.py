"""PyTorch's legacy tensor types on the simulated GPU: `torch.cuda.FloatTensor(...)` and its
siblings, `t.type(torch.cuda.HalfTensor)`, `t.type()`, `t.new(data)` and
`torch.set_default_tensor_type(torch.cuda.FloatTensor)`, as older programs write them.

PyTorch builds these in C++ (torch/csrc/tensor/python_tensor.cpp, `legacy_tensor_ctor` and
`legacy_tensor_new` in torch/csrc/utils/tensor_new.cpp) for a CUDA dispatch key, below the twin's
modes: a constructor from data and a `type()` conversion asked the real driver, `isinstance`
asked whether a meta tensor was a CUDA one, and `type()` named it `torch.meta.FloatTensor`. Here
each `torch.cuda.<Name>Tensor` is a class of the twin's whose calls follow `legacy_tensor_ctor`'s
signatures: no argument an empty tensor, sizes (integers or one `torch.Size`) an uninitialised
tensor, one other sequence the data, one tensor of the type itself."""

from __future__ import annotations

import torch

from . import _kernels, _sparse
from ._tensor import is_ours

#: torch/csrc/tensor/python_tensor.cpp's legacy type names, by dtype
NAMES = {
    torch.float64: "DoubleTensor",
    torch.float32: "FloatTensor",
    torch.float16: "HalfTensor",
    torch.bfloat16: "BFloat16Tensor",
    torch.uint8: "ByteTensor",
    torch.int8: "CharTensor",
    torch.int16: "ShortTensor",
    torch.int32: "IntTensor",
    torch.int64: "LongTensor",
    torch.bool: "BoolTensor",
}
_DTYPES = {f"torch.cuda.{name}": dtype for dtype, name in NAMES.items()}
_HOST_DTYPES = {f"torch.{name}": dtype for dtype, name in NAMES.items()}


def _sizes(args) -> bool:
    """`legacy_tensor_ctor`'s size signature: integers, or one `torch.Size`; one other sequence is
    data (`legacy_new_from_sequence`)."""
    if len(args) == 1 and isinstance(args[0], torch.Size):
        return True
    return all(isinstance(a, int) and not isinstance(a, bool) for a in args)


def _new(dtype, args, kwargs, device="cuda"):
    """What a legacy constructor of `dtype` makes of `args` on `device`."""
    kwargs = {k: v for k, v in kwargs.items() if k != "device"}
    if kwargs:
        raise TypeError(f"legacy constructor got unexpected keyword arguments {sorted(kwargs)}")
    if not args:
        return torch.empty(0, dtype=dtype, device=device)
    if _sizes(args):
        sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
        return torch.empty(tuple(sizes), dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], torch.Tensor):
        other = args[0]
        if other.dtype != dtype or not is_ours(other):
            raise TypeError(
                f"expected {device} {dtype} (got {other.device.type} {other.dtype}): a legacy "
                "constructor takes a tensor of its own type only"
            )
        return other
    if len(args) == 1:
        return torch.tensor(args[0], dtype=dtype, device=device)
    raise TypeError(f"legacy constructor: expected sizes, a sequence or a tensor, got {args!r}")


class _LegacyType(type):
    """The class of the twin's `torch.cuda.<Name>Tensor`s: calling one constructs, `isinstance`
    asks for a simulated tensor of its dtype."""

    def __call__(cls, *args, **kwargs):
        return _new(cls.dtype, args, kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Tensor) and is_ours(obj) and obj.dtype == cls.dtype

    def __repr__(cls):
        return f"<class 'torch.cuda.{cls.__name__}'>"


def _legacy_class(dtype, name):
    # named as PyTorch's (`torch.cuda.FloatTensor.__module__` is "torch.cuda")
    namespace = {
        "dtype": dtype,
        "is_cuda": True,
        "is_sparse": False,
        "__module__": "torch.cuda",
        "__qualname__": name,
    }
    return _LegacyType(name, (), namespace)


def _target(t):
    """The (device, dtype) a legacy type or its name stands for, else None."""
    if isinstance(t, _LegacyType):
        return "cuda", t.dtype
    if isinstance(t, str):
        if t in _DTYPES:
            return "cuda", _DTYPES[t]
        if t in _HOST_DTYPES:
            return "cpu", _HOST_DTYPES[t]
    return None


def _tensor_type(cap, func, args, kwargs):
    """`Tensor.type` (`THPVariable_type`): of a simulated tensor, no type names it as a CUDA one;
    to a CUDA type (or its name) it is `to(cuda, dtype)`, from a simulated tensor to a host type
    `to(cpu, dtype)`. (In the function mode, below it: the simulated device is meta there.)"""
    self = args[0] if args else None
    if not isinstance(self, torch.Tensor):
        return NotImplemented
    ours = is_ours(self)
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    if dtype is None and len(args) <= 1 and not kwargs:
        return f"torch.cuda.{NAMES.get(self.dtype, 'Tensor')}" if ours else NotImplemented
    target = _target(dtype)
    if target is None or (target[0] == "cpu" and not ours):
        return NotImplemented
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    device = "cpu" if target[0] == "cpu" else (None if ours else "meta")
    if device is None:
        return torch.Tensor.to(self, dtype=target[1], non_blocking=non_blocking)
    return torch.Tensor.to(self, device, target[1], non_blocking=non_blocking)


def _tensor_new(cap, func, args, kwargs):
    """`Tensor.new` (`legacy_tensor_new`) of a simulated tensor from data
    (`legacy_new_from_sequence`): the data built on the host in the tensor's dtype, then copied to
    its device; its sizes and tensor forms reach the dispatch mode from C++ as they are, and the
    sparse form (`grad.new(indices, values, size)`) is `_sparse`'s."""
    from ._capture import _host_data

    self, rest = (args[0], args[1:]) if args else (None, ())
    data = len(rest) == 1 and not isinstance(rest[0], (torch.Tensor, torch.Size)) and not _sizes(rest)
    if data and not kwargs and is_ours(self) and self.layout == torch.strided:
        return torch.Tensor.to(torch.tensor(_host_data(cap, rest[0]), dtype=self.dtype), "meta")
    return _sparse.tensor_new(cap, func, args, kwargs)


_kernels.FUNCTIONS[torch.Tensor.type] = _tensor_type
_kernels.FUNCTIONS[torch.Tensor.new] = _tensor_new


def patch(p) -> None:
    """Install the twin's legacy CUDA types while `p` lasts."""
    classes = {dtype: _legacy_class(dtype, name) for dtype, name in NAMES.items()}
    for dtype, cls in classes.items():
        p.set(torch.cuda, NAMES[dtype], cls)
    real_default = torch.set_default_tensor_type

    def set_default_tensor_type(t):
        # `torch.set_default_tensor_type(torch.cuda.FloatTensor)`: factories then make CUDA
        # tensors of its dtype (the dispatch key and scalar type it sets)
        target = _target(t)
        if target is None or target[0] != "cuda":
            return real_default(t)
        torch.set_default_device("cuda")
        torch.set_default_dtype(target[1])
        return None

    p.set(torch, "set_default_tensor_type", set_default_tensor_type)
