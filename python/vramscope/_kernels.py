"""What each op does on the GPU beyond its outputs' storages.

The dispatch mode gives every op its outputs from PyTorch's meta kernels;
this table adds what the CUDA kernels do besides: the cuBLAS handles and
workspaces of matrix products (`aten/src/ATen/native/cuda/Blas.cpp`), the
copies cuBLAS needs of operands it cannot address, the values code reads
(`.item()`), copies between the host and the simulated device.
"""

from __future__ import annotations

import torch

from ._tensor import CudaTensor

aten = torch.ops.aten

#: function-mode handlers: func -> handler(cap, func, args, kwargs)
FUNCTIONS: dict = {}
#: dispatch-mode handlers that replace the generic path
DISPATCH: dict = {}
#: rules run after the op's outputs are allocated: handler(cap, func, (args, kwargs), outputs)
AFTER: dict = {}
#: ops whose values are never computed on the CPU (random or huge side effects)
NO_VALUES: dict = {}
#: ATen overload names whose CUDA kernels allocate nothing but their outputs
PLAIN: set = set()
#: ops checked as plain by identity
PLAIN_OPS: set = set()
#: ops whose CUDA kernels allocate scratch the twin does not model yet
SCRATCH_UNMODELLED = {
    "aten::embedding_dense_backward",
    "aten::_embedding_bag",
    "aten::_embedding_bag_backward",
    "aten::convolution",
    "aten::convolution_backward",
    "aten::cudnn_convolution",
    "aten::_cudnn_rnn",
    "aten::_cudnn_rnn_backward",
    "aten::sort",
    "aten::topk",
    "aten::unique",
    "aten::_unique2",
    "aten::nonzero",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::cumsum",
    "aten::native_batch_norm",
    "aten::native_batch_norm_backward",
    "aten::cudnn_batch_norm",
    "aten::cudnn_batch_norm_backward",
    "aten::native_group_norm_backward",
    "aten::upsample_bilinear2d_backward",
    "aten::upsample_nearest2d_backward",
    "aten::multinomial",
}


def check_known(cap, func) -> None:
    """Warn once for an op whose GPU scratch the twin does not model."""
    name = func._schema.name
    if name in SCRATCH_UNMODELLED:
        cap.note_unmeasured(name)


# ---- matrix products -----------------------------------------------------------------


def _matrix_needs_copy(t: torch.Tensor) -> bool:
    """`prepare_matrix_for_cublas`: a 2-D operand cuBLAS cannot address is
    copied contiguous first."""
    if t.is_contiguous() or t.t().is_contiguous():
        return False
    s, st = t.shape, t.stride()
    if (st[0] == 1 and st[1] >= max(s[0], 1)) or (st[1] == 1 and st[0] >= max(s[1], 1)):
        return False
    return True


def _batch_needs_copy(t: torch.Tensor, m: int, n: int) -> bool:
    """`prepare_batch_matrix_for_cublas` for a contiguous result."""
    st = t.stride()
    if st[2] == 1 and st[1] >= max(m, 1):
        return False
    if st[1] == 1 and st[2] >= max(n, 1):
        return False
    if t.is_contiguous() and st[1] != 0 and st[2] != 0:
        return False
    return True


def _temp(cap, t: torch.Tensor, op: str):
    return cap.malloc(t.numel() * t.element_size(), op, "temporary")


def _gemm_2d(cap, op: str, mat1, mat2, lt: bool) -> None:
    """`cublasCommonArgs(mat1, mat2, result)`: `mata` from `mat2`, then
    `matb` from `mat1`; the gemm; the copies die with the args."""
    a = _temp(cap, mat2, op) if _matrix_needs_copy(mat2) else None
    b = _temp(cap, mat1, op) if _matrix_needs_copy(mat1) else None
    cap.blas(op, mat1.dtype, lt)
    del b, a


def _mm(cap, func, call, outs):
    (args, _kw) = call
    mat1, mat2 = args[0], args[1]
    if outs[0].numel() > 0 and mat1.shape[1] > 0:
        _gemm_2d(cap, "mm", mat1, mat2, False)


def _addmm(cap, func, call, outs):
    (args, kw) = call
    bias, mat1, mat2 = args[0], args[1], args[2]
    beta = kw.get("beta", args[3] if len(args) > 3 else 1)
    m, n = mat1.shape[0], mat2.shape[1]
    squeezed_1d = sum(1 for s in bias.shape if s != 1) <= 1
    # isInputCompliesAddmmCudaLt (Blas.cpp): the gemm_and_bias path
    use_lt = (
        beta == 1
        and bias.is_contiguous()
        and (bias.dim() == 1 or squeezed_1d)
        and bias.shape[-1:] == (n,)
        and mat1.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16)
        and m > 1
        and mat1.shape[1] > 1
        and mat2.shape[0] > 1
        and n > 1
    )
    if outs[0].numel() > 0 and mat1.shape[1] > 0:
        _gemm_2d(cap, "addmm", mat1, mat2, use_lt)


def _bmm(cap, func, call, outs):
    (args, _kw) = call
    if func._schema.name == "aten::baddbmm":
        b1, b2 = args[1], args[2]
    else:
        b1, b2 = args[0], args[1]
    if outs[0].numel() > 0 and b1.shape[2] > 0:
        m, n, k = b2.shape[2], b1.shape[1], b1.shape[2]
        a = _temp(cap, b2, "bmm") if _batch_needs_copy(b2, m, k) else None
        b = _temp(cap, b1, "bmm") if _batch_needs_copy(b1, k, n) else None
        cap.blas("bmm", b1.dtype, False)
        del b, a


for _f in (aten.mm.default, aten.mm.out):
    AFTER[_f] = _mm
for _f in (aten.addmm.default, aten.addmm.out):
    AFTER[_f] = _addmm
for _f in (aten.bmm.default, aten.bmm.out, aten.baddbmm.default, aten.baddbmm.out):
    AFTER[_f] = _bmm


# ---- values read by the program ------------------------------------------------------


def _local_scalar_dense(cap, func, args, kwargs):
    t = args[0]
    if not isinstance(t, CudaTensor):
        return NotImplemented
    return cap.value_of(t, "this line").reshape(()).item()


DISPATCH[aten._local_scalar_dense.default] = _local_scalar_dense


def _to_copy(cap, func, args, kwargs):
    """Copies between the host and the simulated device."""
    src = args[0]
    dev = kwargs.get("device")
    kind = torch.device(dev).type if dev is not None else None
    to_meta = kind == "cuda" or (kind == "meta" and not cap.genuine_meta)
    if isinstance(src, CudaTensor):
        if dev is None or to_meta:
            return NotImplemented
        # device to host: a CPU tensor holding the values the twin knows
        v = cap.value_of(src, "a copy to the host")
        return aten._to_copy.default(v, **kwargs)
    if to_meta and isinstance(src, torch.Tensor) and src.device.type == "cpu":
        # host to device: a new storage on the GPU
        kw = dict(kwargs)
        elem = aten._to_copy.default(src, **dict(kw, device="meta"))
        val = None
        if src.numel() <= 1 << 16:
            val = aten._to_copy.default(src, **dict(kw, device="cpu"))
        return cap.wrap_new(elem, "aten::_to_copy", "input", val)
    return NotImplemented


DISPATCH[aten._to_copy.default] = _to_copy


def _copy_(cap, func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(dst, CudaTensor) and isinstance(src, torch.Tensor) and not isinstance(src, CudaTensor):
        if src.device.type == "cpu":
            aten.copy_.default(dst.elem, src.to("meta"), *args[2:])
            if dst.val is not None:
                dst.val.copy_(src)
            return dst
    if isinstance(src, CudaTensor) and not isinstance(dst, CudaTensor) and dst.device.type == "cpu":
        dst.copy_(cap.value_of(src, "a copy to the host"))
        return dst
    return NotImplemented


DISPATCH[aten.copy_.default] = _copy_


def _record_stream(cap, func, args, kwargs):
    return None


DISPATCH[aten.record_stream.default] = _record_stream


# ---- ops whose CUDA kernels allocate only their outputs --------------------------------

NO_VALUES.update(
    {
        aten.normal_.default: False,
    }
)
