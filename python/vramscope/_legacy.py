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
    return _LegacyType(name, (), {"dtype": dtype, "is_cuda": True, "is_sparse": False})


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


def patch(p) -> None:
    """Install the twin's legacy CUDA types and their conversions while `p` lasts."""
    classes = {dtype: _legacy_class(dtype, name) for dtype, name in NAMES.items()}
    for dtype, cls in classes.items():
        p.set(torch.cuda, NAMES[dtype], cls)

    real_type = torch.Tensor.type
    real_new = torch.Tensor.new
    real_default = torch.set_default_tensor_type

    def type_(self, dtype=None, non_blocking=False, **kwargs):
        # `THPVariable_type`: no type names the tensor's; a CUDA type is `to(cuda, dtype)`
        if dtype is None and not kwargs and is_ours(self):
            return f"torch.cuda.{NAMES.get(self.dtype, 'Tensor')}"
        target = _target(dtype)
        if target is not None and (target[0] == "cuda" or is_ours(self)):
            return self.to(target[0], target[1], non_blocking=non_blocking)
        return real_type(self, dtype, non_blocking, **kwargs)

    def new(self, *args, **kwargs):
        # `legacy_tensor_new`: the tensor's own type, on its device
        if is_ours(self):
            return _new(self.dtype, args, kwargs)
        return real_new(self, *args, **kwargs)

    def set_default_tensor_type(t):
        # `torch.set_default_tensor_type(torch.cuda.FloatTensor)`: factories then make CUDA
        # tensors of its dtype (the dispatch key and scalar type it sets)
        target = _target(t)
        if target is None or target[0] != "cuda":
            return real_default(t)
        torch.set_default_device("cuda")
        torch.set_default_dtype(target[1])
        return None

    p.set(torch.Tensor, "type", type_)
    p.set(torch.Tensor, "new", new)
    p.set(torch, "set_default_tensor_type", set_default_tensor_type)
