"""Embeddings: `embedding` and `EmbeddingBag` and their backwards, whose kernels the eager twin plans
(`EmbeddingBackwardKernel.cu`, `EmbeddingBag.cu`, `Embedding.cpp`)."""

from __future__ import annotations

import torch

from .._tensor import assumed, registered, set_value, value
from .index import _SCALAR_NAMES
from .registry import AFTER, DISPATCH, OUTPUT_ORDER, SCRATCH_UNMODELLED

aten = torch.ops.aten


# ---- ops whose kernels the eager twin plans ---------------------------------------------


def _embedding_plan(cap, grad_sizes, grad, contiguous: bool, indices, num_weights: int, bags=False):
    """The eager twin's plan of `embedding_dense_backward`'s kernel for a gradient of `grad_sizes`
    (`grad`'s dtype) over `indices` into `num_weights` rows; `bags`: the sum/mean `EmbeddingBag`
    backward's call of it (always sorted, never fused). Deterministic algorithms keep the kernel
    off its fused path (EmbeddingBackwardKernel.cu)."""
    return cap.device.embedding_dense_backward_plan(
        grad_sizes,
        str(grad.dtype).removeprefix("torch."),
        contiguous,
        indices.numel(),
        str(indices.dtype).removeprefix("torch."),
        indices.is_contiguous(),
        num_weights,
        bags=bags,
        deterministic=torch.are_deterministic_algorithms_enabled(),
    )


def _replay_plan(cap, out, steps, op: str):
    """A kernel's plan from the eager twin (`vramscope_engine::plans`) replayed into the capture:
    scratch allocated and freed in the plan's order, `out` tracked as the gradient at its step."""
    live = {}
    for kind, sid, nbytes, is_output in steps:
        if kind == "alloc":
            if is_output:
                cap.track(out, op, "gradient", nbytes=nbytes)
            else:
                live[sid] = cap.malloc(nbytes, op, "temporary")
        else:
            live.pop(sid, None)
    live.clear()
    cap.track(out, op, "gradient")
    return out


def _embedding_dense_backward(cap, func, args, kwargs):
    """`embedding_dense_backward` (`EmbeddingBackwardKernel.cu`): the eager
    twin's plan of the kernel (`vramscope_engine::plans`), replayed: the
    sorting path's CUB scratch and segment buffers around the gradient."""
    grad, indices, num_weights = args[0], args[1], args[2]
    if not (registered(grad) and registered(indices)) or kwargs:
        return NotImplemented
    cap.ops += 1
    out = func(*args)
    steps = _embedding_plan(cap, list(grad.shape), grad, grad.is_contiguous(), indices, num_weights)
    return _replay_plan(cap, out, steps, "aten::embedding_dense_backward")


DISPATCH[aten.embedding_dense_backward.default] = _embedding_dense_backward
SCRATCH_UNMODELLED.discard("aten::embedding_dense_backward")


def _embedding_bag_backward(cap, func, args, kwargs):
    """`_embedding_bag_backward` (and `_embedding_bag_dense_backward`) in `sum` or `mean` mode, dense:
    `embedding_bag_backward_cuda_sum_avg` (EmbeddingBag.cu) sorts the indices with
    `radix_sort_pairs` and runs `embedding_backward_cuda_kernel`, as `embedding_dense_backward`
    does over the same indices (the plan above; blind28/ab05's H200 record: 15 allocations,
    363,081,637 bytes for 131,072 indices of rows of 256), but for any number of indices and never
    on the fused path, which `offset2bag` rules out (blind135/ee05's mean bags of 32,768 indices
    into 512 rows of 32: the two-pass path's 484,864-byte per-segment gradient on the H200).
    `_embedding_bag_dense_backward_cuda`
    first takes `grad_.contiguous()`, which lives to its return: a strided gradient (a slice of a
    concatenation's, blind95/cq05) is copied before the plan. `scale_grad_by_freq` is left to the
    meta kernel, named unmeasured; `max` mode is `_embedding_bag_backward_max`."""
    if kwargs:
        return NotImplemented
    dense = func is aten._embedding_bag_dense_backward.default
    if dense:
        grad, indices, num_weights, scale, mode = args[0], args[1], args[5], args[6], args[7]
        sparse = False
    else:
        grad, indices, num_weights, scale, mode, sparse = args[0], args[1], args[6], args[7], args[8], args[9]
    if sparse and not dense:
        return _embedding_bag_sparse_backward(cap, args)
    if not (registered(grad) and registered(indices)) or sparse or scale or grad.dim() != 2:
        return NotImplemented
    if mode == 2:
        return _embedding_bag_backward_max(cap, func, args, grad, num_weights)
    if mode not in (0, 1) or indices.numel() == 0:
        return NotImplemented
    cap.ops += 1
    op = "aten::_embedding_bag_backward"
    copy = None if grad.is_contiguous() else cap.malloc(grad.numel() * grad.element_size(), op, "temporary")
    out = func(*args)
    steps = _embedding_plan(
        cap, [indices.numel(), grad.shape[1]], grad, True, indices, num_weights, bags=True
    )
    out = _replay_plan(cap, out, steps, op)
    del copy
    return out


def _embedding_bag_sparse_backward(cap, args):
    """`sparse=True`: `_embedding_bag_backward_symint` (EmbeddingBag.cpp) calls
    `_embedding_bag_sparse_backward`, a composite: `grad.index_select(0, offset2bag)`, the bag-size
    scaling of `mean`, `mul_` by the per-sample weights, then `embedding_sparse_backward`'s sparse COO
    gradient over the indices; its parts run through the capture. An empty `offset2bag` (rebuilt
    there by `make_offset2bag`) is left to the meta kernel."""
    grad, indices, offsets, offset2bag, bag_size = args[:5]
    if not (registered(grad) and registered(indices)) or (indices.numel() and not offset2bag.numel()):
        return NotImplemented
    psw = args[10] if len(args) > 10 else None
    padding_idx = args[11] if len(args) > 11 else -1
    with cap._modes[1]:  # the parts come back to the mode
        return aten._embedding_bag_sparse_backward.default(
            grad, indices, offsets, offset2bag, bag_size, args[6], args[7], args[8], psw, padding_idx
        )


def _embedding_bag_backward_max(cap, func, args, grad, num_weights):
    """`max` mode: `_embedding_bag_dense_backward_cuda` (EmbeddingBag.cu) takes `grad_.contiguous()`,
    then `embedding_bag_backward_cuda_max` allocates the zeroed gradient and scatters into it (no
    sort). blind44/ar06's H200 record: a 2,097,152-byte copy of a strided (8192, 64) gradient, then
    the 51,200,000-byte weight gradient. Its kernel is dispatched by AT_DISPATCH_FLOATING_TYPES_AND_HALF
    after the `at::zeros` of the gradient: a bfloat16 gradient (an EmbeddingBag(mode="max") of a model
    cast to bfloat16) stops the backward there with NotImplementedError, both freed as it unwinds
    (blind161/fe04's H200 run: "embedding_bag_backward_cuda_max" not implemented for 'BFloat16')."""
    cap.ops += 1
    op = "aten::_embedding_bag_backward"
    copy = None if grad.is_contiguous() else cap.malloc(grad.numel() * grad.element_size(), op, "temporary")
    if grad.dtype not in (torch.float32, torch.float64, torch.float16):
        zeros = cap.malloc(num_weights * grad.shape[1] * grad.element_size(), op, "temporary")
        del zeros, copy
        name = _SCALAR_NAMES.get(grad.dtype, grad.dtype)
        raise NotImplementedError(f"\"embedding_bag_backward_cuda_max\" not implemented for '{name}'")
    out = func(*args)
    cap.track(out, op, "gradient")
    del copy
    return out


DISPATCH[aten._embedding_bag_backward.default] = _embedding_bag_backward
# `_embedding_bag_cuda` (EmbeddingBag.cu) allocates `bag_size`, then `offset2bag`, then `output`, then
# `max_indices` (the meta kernel returns output, offset2bag, bag_size, max_indices): blind123/ds05's
# H200 memory history (a sum EmbeddingBag with per_sample_weights: 65,536, 3,276,800, then 2,097,152)
for _f in (aten._embedding_bag.default, aten._embedding_bag_forward_only.default):
    OUTPUT_ORDER[_f] = (2, 1, 0, 3)


def _embedding_bag_forward(cap, func, call, outs):
    """`_embedding_bag_cuda` allocates nothing but its outputs (`max_indices` empty outside `max`
    mode; 343 calls in the blind sets' H200 per-op records, none allocating more) once
    `promoteIndicesAndOffsets` (EmbeddingBag.cpp) has found indices and offsets of one dtype; of two,
    one is first converted to the other's, a copy the twin does not place."""
    (args, kw) = call
    indices = args[1] if len(args) > 1 else kw.get("indices")
    offsets = args[2] if len(args) > 2 else kw.get("offsets")
    if (
        isinstance(indices, torch.Tensor)
        and isinstance(offsets, torch.Tensor)
        and indices.dtype != offsets.dtype
    ):
        cap.note_unmeasured(f"{func._schema.name} of {indices.dtype} indices and {offsets.dtype} offsets")
    o2b = outs[1] if len(outs) > 1 else None
    held = value(o2b) if isinstance(o2b, torch.Tensor) else None
    if held is not None and held.shape != o2b.shape:
        # the CPU's fast path leaves offset2bag empty; CUDA's kernel writes each index's bag
        # (EmbeddingBag.cu), which the sparse backward's `index_select` reads
        offs = value(offsets) if isinstance(offsets, torch.Tensor) else None
        last = bool(args[7]) if len(args) > 7 else bool(kw.get("include_last_offset", False))
        if offs is None or offs.dim() != 1 or indices.dim() != 1:
            set_value(o2b, None)
        else:
            starts = offs[:-1] if last else offs
            bags = (
                torch.searchsorted(starts, torch.arange(indices.numel(), dtype=starts.dtype), right=True) - 1
            )
            set_value(o2b, bags.to(o2b.dtype), assumed(offsets))


for _f in (aten._embedding_bag.default, aten._embedding_bag_forward_only.default):
    AFTER[_f] = _embedding_bag_forward
SCRATCH_UNMODELLED.discard("aten::_embedding_bag")
DISPATCH[aten._embedding_bag_dense_backward.default] = _embedding_bag_backward


def _embedding(cap, func, args, kwargs):
    """`embedding` (Embedding.cpp): `weight.index_select(0, indices.reshape(-1))`: indices that
    cannot be viewed flat are copied first."""
    w, idx = args[0], args[1]
    if kwargs or not (registered(w) and registered(idx)) or idx.dim() <= 1:
        return NotImplemented
    try:
        idx.view(-1)
        return NotImplemented
    except RuntimeError:
        pass
    cap.ops += 1
    flat = cap.malloc(idx.numel() * idx.element_size(), "aten::reshape", "temporary")
    out = func(*args)
    cap.track(out, "aten::embedding")
    del flat
    return out


DISPATCH[aten.embedding.default] = _embedding


def _embedding_renorm(cap, func, args, kwargs):
    """`embedding_renorm_cuda_` (cuda/Embedding.cu, `F.embedding(max_norm=...)`): the indices sorted
    (`std::get<0>(indices.sort()).contiguous()`: the sort's indices die with the statement), then
    `unique_indices = at::empty(numel)`, the 8-byte unique count and `cuda::cub::unique`'s storage;
    the renorm kernel writes the weight in place; the locals die at the return (blind28/ab03's H200
    per-op truth: 8,192 indices into a (500000, 128) table, 7 allocations, 413,190 bytes, where
    the twin made none)."""
    weight, indices = args[0], args[1]
    if kwargs or not (registered(weight) and registered(indices)) or indices.numel() == 0:
        return NotImplemented
    cap.ops += 1
    op = "aten::embedding_renorm_"
    n, es = indices.numel(), indices.element_size()
    with cap._modes[1]:  # the sort's own rules
        contig = torch.sort(indices)[0].contiguous()
    unique = cap.malloc(n * es, op, "temporary")
    count = cap.malloc(8, op, "temporary")
    nbytes = cap.device.cub_scratch("unique", n, es)
    if nbytes is None:
        cap.note_unmeasured(f"CUB's storage for the unique selection of {n} items ({op})")
    elif nbytes:
        tmp = cap.malloc(nbytes, op, "workspace")
        del tmp
    del count, unique, contig
    return weight


DISPATCH[aten.embedding_renorm_.default] = _embedding_renorm
