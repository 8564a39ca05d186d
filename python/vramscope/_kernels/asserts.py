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


def cuda_error(what: str) -> str:
    """The message of c10's CUDA error check (`c10_cuda_check_implementation`) for the error `what`,
    with its hints."""
    return (
        f"CUDA error: {what}\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )


#: what CUDA reports after a kernel's failed assert (c10's CUDA error check and its hints)
DEVICE_ASSERT = cuda_error("device-side assert triggered")


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
