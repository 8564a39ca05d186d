"""How PyTorch's C++ error messages name a dtype or a tensor's type: `c10::toString(ScalarType)`,
caffe2's `TypeMeta` names and `TensorBase::toString()` as `processErrorMsg` rewrites it."""

from __future__ import annotations

import torch

from .._tensor import registered

#: `c10::toString(ScalarType)` (c10/core/ScalarType.h) where it is not the dtype's name capitalised
_SCALAR_TYPE = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.uint16: "UInt16",
    torch.uint32: "UInt32",
    torch.uint64: "UInt64",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}

#: caffe2's `TypeMeta` names (c10/util/typeid.h: the C++ type's name as GCC spells it), which a
#: dtype prints as in `<< tensor.dtype()`
_TYPE_META = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int",
    torch.int32: "int",
    torch.int16: "short int",
    torch.int8: "signed char",
    torch.uint8: "unsigned char",
    torch.uint16: "short unsigned int",
    torch.uint32: "unsigned int",
    torch.uint64: "long unsigned int",
    torch.bool: "bool",
    torch.complex32: "c10::complex<c10::Half>",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}

# `processErrorMsg` (torch/csrc/Exceptions.cpp) renames these legacy type names in a RuntimeError's
# text; the others keep `TensorBase::toString()`'s "CUDABFloat16Type"
_LEGACY_TYPE = {
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.float64: "Double",
    torch.float32: "Float",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.int16: "Short",
    torch.float16: "Half",
}


def scalar_type_name(dtype) -> str:
    """`c10::toString(ScalarType)`: torch.float32 -> "Float", torch.bfloat16 -> "BFloat16"."""
    name = _SCALAR_TYPE.get(dtype)
    if name is not None:
        return name
    name = str(dtype).removeprefix("torch.")
    return name[:1].upper() + name[1:]  # float8_e4m3fn -> Float8_e4m3fn


def type_meta_name(dtype) -> str:
    """A dtype's `TypeMeta` name: torch.float32 -> "float", torch.bfloat16 -> "c10::BFloat16"."""
    return _TYPE_META.get(dtype) or f"c10::{scalar_type_name(dtype)}"


def tensor_type_string(t) -> str:
    """`TensorBase::toString()` of a dense tensor (its backend and scalar type, "CUDAFloatType") as
    a Python error shows it: "torch.cuda.FloatTensor", "torch.FloatTensor" for the legacy types,
    "CUDABFloat16Type" and "CPUBFloat16Type" for the others. A simulated tensor is CUDA's."""
    cuda = registered(t)
    legacy = _LEGACY_TYPE.get(t.dtype)
    if legacy is not None:
        return f"torch.cuda.{legacy}Tensor" if cuda else f"torch.{legacy}Tensor"
    return f"{'CUDA' if cuda else 'CPU'}{scalar_type_name(t.dtype)}Type"
