"""Device-side asserts: the index ops whose CUDA kernels assert their indices in range
(`CUDA_KERNEL_ASSERT` in `cuda/Indexing.cu`, `IndexKernel.cu`, `ScatterGatherKernel.cu`, ...)."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .._opfacts import kept
from .._tensor import assumed, value

aten = torch.ops.aten


# ---- device-side asserts ----------------------------------------------------------------------

#: index ops whose CUDA kernels assert their indices in range (`CUDA_KERNEL_ASSERT` in
#: cuda/Indexing.cu, IndexKernel.cu, ScatterGatherKernel.cu, Embedding.cu, Loss.cu): by op, the (index,
#: size of the indexed dimension, whether negative indices wrap[, a value left out]) of each index argument
INDEX_BOUNDS = {
    aten.embedding.default: lambda a: [(a[1], a[0].shape[0], False)],
    aten.index_select.default: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    aten.gather.default: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    aten.scatter.src: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    aten.scatter.value: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    aten.scatter_add.default: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    # IndexKernel.cu's index_copy kernel: `idx >= 0 && idx < self_dim_size` (blind129/dy03 on the H200)
    aten.index_copy_.default: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    aten.index_copy.default: lambda a: [(a[2], a[0].shape[a[1]] if a[0].dim() else 1, False)],
    aten.index.Tensor: lambda a: (
        []
        if any(i is not None and i.dtype == torch.bool for i in a[1])
        else [(i, a[0].shape[d], True) for d, i in enumerate(a[1]) if i is not None]
    ),
    # the class index of each target but `ignore_index` (cuda/Loss.cu, NLLLoss2d.cu)
    aten.nll_loss_forward.default: lambda a: [(a[1], a[0].shape[-1 if a[0].dim() == 1 else 1], False, a[4])],
    aten.nll_loss2d_forward.default: lambda a: [(a[1], a[0].shape[1], False, a[4])],
}


def cuda_error(what: str, name: str) -> str:
    """The message of c10's CUDA error check (`c10_cuda_check_implementation`, c10/cuda/
    CUDAException.cpp) for the error `what` (`cudaGetErrorString`) named `name` (`cudaGetErrorName`):
    the error, `get_cuda_error_help`'s line (c10/cuda/CUDAMiscFunctions.cpp: one for
    cudaErrorInvalidDevice, else where to look the name up), `get_cuda_check_suffix`'s two and the
    device-side assertion hint. torch 2.11's libc10_cuda.so calls the help between the error string
    and the suffix (its disassembly; the strings are the library's)."""
    if name == "cudaErrorInvalidDevice":
        help_line = "GPU device may be out of range, do you have enough GPUs?"
    else:
        help_line = (
            f"Search for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
            "for more information."
        )
    return (
        f"CUDA error: {what}\n{help_line}\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )


#: what CUDA reports after a kernel's failed assert (c10's CUDA error check and its hints)
DEVICE_ASSERT = cuda_error("device-side assert triggered", "cudaErrorAssert")
#: `cudaSetDevice` of an index past the device count (c10's CUDA error check): a tensor made on or
#: moved to `cuda:1`, `torch.cuda.set_device(1)` on one GPU (H100, oe81_api_corners_probe_h100.out:
#: "AcceleratorError: CUDA error: invalid device ordinal")
INVALID_DEVICE = cuda_error("invalid device ordinal", "cudaErrorInvalidDevice")


def without_broadcast_dims(v: torch.Tensor) -> torch.Tensor:
    """`v` without its broadcast dimensions (stride 0, from `expand`): the same elements, each once, so
    that a reduction over them (min, max, a filter) reads the expanded tensor's storage once, not its
    every logical element (blind329/lr01: DeBERTa-v2's c2p/p2c `gather` indices, a (S, S) table
    expanded to (B * H, S, S))."""
    return v[
        tuple(0 if st == 0 and n > 1 else slice(None) for st, n in zip(v.stride(), v.shape, strict=True))
    ]


def index_out_of_range(func, args) -> str | None:
    """Where an index op's indices, whose values the twin knows (not computed over stand-in zeros),
    fall outside the indexed dimension, as the GPU's kernel asserts: a description, else None."""
    try:
        bounds = func._vramscope_index_bounds
    except AttributeError:
        bounds = kept(func, "_vramscope_index_bounds", INDEX_BOUNDS.get(func))
    if bounds is None:
        return None
    try:
        checks = bounds(args)
    except (IndexError, TypeError):
        return None
    for index, size, wraps, *ignored in checks:
        if not isinstance(index, torch.Tensor) or index.numel() == 0:
            continue
        v = value(index)
        if v is None or assumed(index) or v.is_floating_point() or v.dtype == torch.bool:
            continue
        if isinstance(v, FakeTensor):  # computed under a tracer's fake mode (flex_attention's eager
            continue  # create_fw_bw_graph, blind61/bi05): no values
        v = without_broadcast_dims(v)
        if ignored:
            v = v[v != ignored[0]]
            if v.numel() == 0:
                continue
        low, high = int(v.min()), int(v.max())
        if high >= size or low < (-size if wraps else 0):
            bad = high if high >= size else low
            return f"{func._schema.name} reads index {bad} of a dimension of {size}"
    return None
