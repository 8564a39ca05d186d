"""Kernels that pack their metadata to the device (`detail::pack_vecs`, aten/src/ATen/native/cuda/
TensorShape.cu): `split_with_sizes_copy.out` and `_chunk_cat` on their CUDA fast paths copy vectors
of int64 (addresses, sizes, one entry per block of their jagged grid) into a pinned host tensor and
then `.to(device, non_blocking=True)`: one device tensor of 8 bytes per entry, freed when the kernel
has been launched (`split_with_sizes_copy`) or before (`_chunk_cat`: `get_chunk_cat_metadata` keeps
only the raw pointers, its `packed` dies at its return, before `_chunk_cat`'s output is made). Off
the fast path they run ATen's composite (TensorShape.cpp): `split_with_sizes_copy_out` copies each
split into its output (nothing else), `_chunk_cat_out` pads (`_pad_chunk`) and `cat_out`s.

And FSDP2's operators (`torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`), which a GPU runs
as the Python bodies registered for CUDA (`torch.library.impl(lib, ..., "CUDA")`):
`fsdp::all_gather_copy_in` (a `narrow` of the all-gather output, `split`, `_foreach_copy_`),
`fsdp::split_with_sizes_copy` (`torch.split_with_sizes_copy(out=...)`) and `fsdp::chunk_cat`
(`torch._chunk_cat(out=...)`): the twin runs those bodies op by op, each ATen op with its rules."""

from __future__ import annotations

import math

import torch

from .._tensor import non_overlapping_and_dense, registered, tensors_in
from .registry import AFTER, DISPATCH, NAMED_DISPATCH

aten = torch.ops.aten

#: TensorShape.cu's `BLOCK_SIZE` (threads per block) and `BYTES_PER_THREAD`: a block's tile of bytes
BLOCK_SIZE = 128
TILE_SIZE = 16 * BLOCK_SIZE


def _div_up(a: int, b: int) -> int:
    return (a + b - 1) // b


def _pack(cap, elems: int, op: str) -> None:
    """`pack_vecs`' device tensor of `elems` int64s, made and freed (the caching allocator's block
    goes back at once: the kernel runs on the stream it was made on)."""
    packed = cap.malloc(8 * elems, op, "workspace")
    del packed


# ---- split_with_sizes_copy.out ------------------------------------------------------------------


def split_copy_pack_elems(
    self_shape, self_stride, elem: int, split_sizes, dim: int, sms: int, tpsm: int
) -> int:
    """The int64s `split_with_sizes_copy_out_cuda_contiguous_no_cast` packs: dst and src base
    addresses and chunk sizes (one each per split), `block_idx_to_split_idx` (one per block of the
    grid, whose blocks per split follow `iters_per_chunk`, from the device's SMs and threads per SM)
    and `blocks_cumsums` (one per split and one)."""
    chunk = [s * self_stride[dim] * elem for s in split_sizes]
    num_chunks = math.prod(self_shape[:dim])
    num_blocks = sum(_div_up(c, TILE_SIZE) for c in chunk)
    # `num_sms * max_threads_per_sm / detail::BLOCK_SIZE * 2.0`: integer division, then doubled
    max_blocks = sms * tpsm // BLOCK_SIZE * 2
    iter_factor = _div_up(num_blocks * num_chunks, max_blocks)
    n = len(split_sizes)
    if iter_factor == 0:
        # nothing to copy (the kernel's `div_up(0, 0)` is not reached by any program measured)
        return 3 * n + n + 1
    chunks_per_block = min(math.ceil(math.sqrt(iter_factor)), num_chunks)
    iters_per_chunk = _div_up(iter_factor, chunks_per_block)
    blocks = sum(_div_up(c, TILE_SIZE * iters_per_chunk) for c in chunk)
    return 3 * n + blocks + n + 1


def _split_with_sizes_copy_out(cap, func, call, outs):
    """`split_with_sizes_copy_out_cuda`: where the source and every output are non-overlapping and
    dense and of the source's dtype, the fused kernel with its packed metadata, after the outputs
    are resized; else `at::native::split_with_sizes_copy_out` (a `copy_` per split: no scratch)."""
    args, kwargs = call
    self = args[0]
    split_sizes = list(args[1])
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    out = kwargs.get("out", args[3] if len(args) > 3 else None)
    if not registered(self) or not out or self.dim() == 0:
        return
    if not non_overlapping_and_dense(self):
        return
    if not all(non_overlapping_and_dense(t) and t.dtype == self.dtype for t in out):
        return
    dim = dim % self.dim()
    dev = cap.device
    elems = split_copy_pack_elems(
        tuple(self.shape),
        tuple(self.stride()),
        self.element_size(),
        split_sizes,
        dim,
        dev.multi_processor_count,
        dev.max_threads_per_multi_processor,
    )
    _pack(cap, elems, "aten::split_with_sizes_copy")


AFTER[aten.split_with_sizes_copy.out] = _split_with_sizes_copy_out


# ---- _chunk_cat ---------------------------------------------------------------------------------


def chunk_cat_pack_elems(shapes, dim: int, num_chunks: int, dst_elem: int) -> int:
    """The int64s `get_chunk_cat_metadata` packs: per tensor its source address, actual size, padded
    chunk size and block count, one entry per block (`block_idx_to_tensor_idx`: a padded chunk's
    bytes in tiles), and the start bytes and start blocks (one per tensor and one each)."""
    blocks = 0
    for shape in shapes:
        padded = _div_up(shape[dim], num_chunks) * num_chunks
        chunk = padded * math.prod(shape[dim + 1 :]) * dst_elem // num_chunks
        blocks += _div_up(chunk, TILE_SIZE)
    n = len(shapes)
    return 4 * n + blocks + 2 * (n + 1)


def _pad_chunk(tensors, dim: int, num_chunks: int):
    """TensorShape.cpp's `_pad_chunk`: a tensor whose `dim` does not divide into `num_chunks` is
    copied into a zeroed padded one (`new_zeros`, `narrow(...).copy_`); each is then reshaped to
    (leading..., num_chunks, -1) (a copy where that is no view)."""
    padded = []
    for t in tensors:
        size = list(t.shape)
        size[dim] = _div_up(size[dim], num_chunks) * num_chunks
        p = t
        if size != list(t.shape):
            p = t.new_zeros(size)
            p.narrow(dim, 0, t.shape[dim]).copy_(t)
        padded.append(p.reshape([*t.shape[:dim], num_chunks, -1]))
    return padded


def _chunk_cat(cap, func, args, kwargs):
    """`_chunk_cat_cuda` / `_chunk_cat_out_cuda`: tensors all non-overlapping and dense (and, into
    `out`, of its dtype or bf16 into float32) take the CUDA kernel, its packed metadata made and
    freed before the output; otherwise the composite (`_pad_chunk`, then `cat` / `cat_out` while
    the padded copies live), run op by op."""
    tensors = list(args[0])
    dim = args[1] if len(args) > 1 else kwargs["dim"]
    num_chunks = args[2] if len(args) > 2 else kwargs["num_chunks"]
    out = kwargs.get("out")
    if not tensors or not all(registered(t) for t in tensors) or any(t.numel() == 0 for t in tensors):
        return NotImplemented
    if out is not None and not registered(out):
        return NotImplemented
    dim = dim % tensors[0].dim()
    src = tensors[0].dtype
    dst = src if out is None else out.dtype
    same = dst == src or (src == torch.bfloat16 and dst == torch.float32)
    if same and all(non_overlapping_and_dense(t) for t in tensors):
        elems = chunk_cat_pack_elems([tuple(t.shape) for t in tensors], dim, num_chunks, dst.itemsize)
        _pack(cap, elems, "aten::_chunk_cat")
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        padded = _pad_chunk(tensors, dim, num_chunks)
        if out is None:
            return torch.cat(padded, dim + 1)
        torch.cat(padded, dim + 1, out=out)
        return out


DISPATCH[aten._chunk_cat.default] = _chunk_cat
DISPATCH[aten._chunk_cat.out] = _chunk_cat


# ---- FSDP2's operators --------------------------------------------------------------------------

#: the `_fsdp_collectives` function each operator's CUDA kernel is
_FSDP_CUDA = {
    "fsdp::all_gather_copy_in": "all_gather_copy_in_cuda",
    "fsdp::split_with_sizes_copy": "split_with_sizes_copy",
    "fsdp::chunk_cat": "chunk_cat",
}


def _fsdp_op(cap, func, args, kwargs):
    """An `fsdp::` operator on simulated tensors: the Python body its CUDA kernel is, op by op."""
    if not any(registered(t) for t in tensors_in((args, kwargs))):
        return NotImplemented
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_collectives
    except ImportError:
        return NotImplemented
    body = getattr(_fsdp_collectives, _FSDP_CUDA[func._schema.name], None)
    if body is None:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:
        return body(*args, **kwargs)


for _name in _FSDP_CUDA:
    NAMED_DISPATCH[_name] = _fsdp_op
