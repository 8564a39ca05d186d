"""2:4 semi-structured sparsity through cuSPARSELt (`torch.sparse.to_sparse_semi_structured` on an
sm_90 GPU, `SparseSemiStructuredTensorCUSPARSELT`): `_cslt_compress` and `_cslt_sparse_mm`
(aten/src/ATen/native/sparse/cuda/cuSPARSELtOps.cpp, torch 2.11).

`_cslt_compress(W)` of an (m, k) matrix asks cuSPARSELt for the compressed size and a buffer's
(`cusparseLtSpMMACompressedSize2`), allocates the packed tensor `(m, ceil(size / (m x itemsize)))` of
W's dtype, then the buffer, which goes when the op returns. `_cslt_sparse_mm(A, B)` allocates the
plan's workspace (`cusparseLtMatmulGetWorkspace`), then the result, `(m, n)` or `(n, m)` with
`transpose_result`; the workspace goes when it returns. The sizes are cuSPARSELt's, measured on the
H200 (`validation/cslt_probe.py`, `fixtures/run/sparse/cslt_probe_h200.jsonl`: seven (m, k) from 128
x 128 to 11008 x 4096, fp16, bf16, int8, float8_e4m3fn, n 128 and 4096, and three sparse
`nn.Linear` forwards): the compressed size is m x k x 9/8 bytes for a 16-bit dtype and m x k x 5/8
for an 8-bit one (k/2 values and k/8 bytes of metadata per row), the buffer m x k / 8 bytes (all 28
problems); the matmul's workspace is m x k / 8 + 512 bytes as the allocator rounds it in 47 of the
56 problems, the plan taking more in 9 (`_MEASURED_WORKSPACE`). Elsewhere (a size not a multiple
of 128, a problem not measured) the same formulas stand in and the problem is named unmeasured."""

from __future__ import annotations

import torch

from . import _kernels

aten = torch.ops.aten

#: (dtype, m, k, n, B contiguous, transpose_result, bias) -> the matmul workspace's bytes as the
#: allocator held it, where the H200 measured it other than m x k / 8 + 512 (cslt_probe_h200.jsonl)
_MEASURED_WORKSPACE = {
    (torch.float16, 768, 3072, 128, True, False, False): 3441152,
    (torch.float16, 4096, 4096, 128, True, False, False): 18875392,
    (torch.float16, 11008, 4096, 4096, True, False, False): 20971520,
    (torch.int8, 768, 3072, 4096, False, False, False): 1868800,
    (torch.int8, 4096, 4096, 128, False, False, False): 2621952,
    (torch.int8, 4096, 4096, 4096, False, False, False): 3146752,
    (torch.float8_e4m3fn, 768, 3072, 128, False, False, False): 1081856,
    (torch.float8_e4m3fn, 4096, 4096, 128, False, False, False): 6292480,
    (torch.float8_e4m3fn, 11008, 4096, 128, False, False, False): 9569280,
    # the sparse nn.Linear's call (B the input transposed, the bias fused)
    (torch.float16, 4096, 4096, 128, False, False, True): 14681088,
}
#: the other problems the H200 measured, whose workspace was m x k / 8 + 512 bytes
_MEASURED_MK = {(128, 128), (768, 768), (1024, 1024), (3072, 768), (768, 3072), (4096, 4096), (11008, 4096)}


def _measured_shape(m: int, k: int) -> bool:
    return m % 128 == 0 and k % 128 == 0


def compressed_bytes(m: int, k: int, itemsize: int) -> int:
    """cuSPARSELt's compressed size of an (m, k) 2:4 matrix (measured: module doc)."""
    return m * k * 9 // 8 if itemsize == 2 else m * k * 5 // 8


def cslt_compress(cap, func, args, kwargs):
    """`_cslt_compress`: the packed tensor, then cuSPARSELt's buffer, freed as it returns."""
    from torch.utils._python_dispatch import _disable_current_modes

    (w,) = args
    if w.dim() != 2:
        return NotImplemented
    cap.ops += 1
    m, k = w.shape
    size = compressed_bytes(m, k, w.element_size())
    cols = -(-size // max(m * w.element_size(), 1))
    with _disable_current_modes():
        out = torch.empty((m, cols), dtype=w.dtype, device="meta")
    op = "aten::_cslt_compress"
    cap.track(out, op)
    buf = cap.malloc(m * k // 8, op, "temporary")
    del buf
    if not _measured_shape(m, k):
        cap.note_unmeasured(f"cuSPARSELt's compressed size and buffer of a {m} x {k} {w.dtype} matrix")
    return out


def cslt_sparse_mm(cap, func, args, kwargs):
    """`_cslt_sparse_mm`: the plan's workspace, then the result (the meta kernel's), then the
    workspace freed."""
    a, b = args[0], args[1]
    names = ("bias", "alpha", "out_dtype", "transpose_result")
    extra = dict(zip(names, args[2:], strict=False))
    extra.update(kwargs)
    m, k, n = a.shape[0], b.shape[0], b.shape[1]
    key = (
        a.dtype,
        m,
        k,
        n,
        b.is_contiguous(),
        bool(extra.get("transpose_result")),
        extra.get("bias") is not None,
    )
    nbytes = _MEASURED_WORKSPACE.get(key)
    if nbytes is None:
        nbytes = m * k // 8 + 512
        if not (_measured_shape(m, k) and (m, k) in _MEASURED_MK and n in (128, 4096)):
            what = f"cuSPARSELt's matmul workspace of {m} x {k} by {k} x {n} ({a.dtype})"
            cap.note_unmeasured(
                what,
                f"{what} was not measured: taken as m x k / 8 + 512 bytes, as in 47 of the 56 "
                "measured problems",
            )
    cap.ops += 1
    op = "aten::_cslt_sparse_mm"
    ws = cap.malloc(nbytes, op, "workspace")
    out = func(*args, **kwargs)
    cap.track(out, op)
    del ws
    return out


#: `named_algorithms` (cuda/ComputeSparseTile.h): the tile kernel's algorithms by name
_TILE_ALGORITHMS = ("largest_values_greedy", "causal1122", "largest_abs_values_greedy", "")


def sparse_semi_structured_tile(cap, func, args, kwargs):
    """`_sparse_semi_structured_tile(dense, algorithm, use_cutlass)` (sparse/cuda/
    SparseSemiStructuredTile.cu; `prune_dense_static_sort` of both semi-structured subclasses), which
    has no meta kernel: for the (rows, cols) matrix and then its transpose, the compressed
    representation of its format (`create_compressed_representation`), then the threads' masks, a
    byte tensor (ceil(rows / 32) x 4, ceil(cols / 64) x 8, 8) (`getBlocksGrid` x `getThreadsGrid`
    of 32 x 64 warps of 8 x 8 threads, one uint64 each). CUTLASS's: the packed values
    (round_up(rows, 32), round_up(cols, 64) / 2) of the input's dtype, then the metadata, int16
    (round_up(rows, 32) x round_up(cols, 64) / 16) viewed (rows', 2, cols' / 32) by
    `permute(1, 2, 0)`; cuSPARSELt's: one 1-D storage of rows x ceil(cols / 2) values and
    rows x cols / 16 metadata scalars of the input's dtype, the metadata its (rows / 128, cols / 32,
    256) view past the values (rows and cols multiples of 128, checked first). The columns (a
    multiple of 32) and the algorithm's name are checked after the representations."""
    from torch.utils._python_dispatch import _disable_current_modes

    from ._kernels.typenames import scalar_type_name

    x = args[0]
    algorithm = kwargs.get("algorithm", args[1] if len(args) > 1 else "")
    use_cutlass = kwargs.get("use_cutlass", args[2] if len(args) > 2 else True)
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(scalar_type_name(x.dtype))
    if x.dim() != 2:
        raise RuntimeError("Can only sparsify 2d tensors")
    if x.stride(1) != 1:
        raise RuntimeError("Can only sparsify contiguous tensors. Sparsify the transpose otherwise.")
    cap.ops += 1
    op = "aten::_sparse_semi_structured_tile"

    def new(shape, dtype):
        with _disable_current_modes():
            t = torch.empty(shape, dtype=dtype, device="meta")
        return cap.track(t, op)

    def view(t, shape, strides, offset=0):
        with _disable_current_modes():
            return t.as_strided(shape, strides, offset)

    def representation(rows, cols):
        if not use_cutlass:
            if rows % 128 or cols % 128:
                raise RuntimeError("Only supports rows/cols multiples of 128")
            data = rows * -(-cols // 2)
            storage = new((data + rows * cols // 16,), x.dtype)
            return storage, view(storage, (rows // 128, cols // 32, 256), (cols // 32 * 256, 256, 1), data)
        rx, ry = -(-rows // 32) * 32, -(-cols // 64) * 64
        packed = new((rx, ry // 2), x.dtype)
        meta = new((rx * ry // 16,), torch.int16)
        return packed, view(meta, (rx, 2, ry // 32), (2, 1, rx * 2))

    rows, cols = x.shape
    packed, meta = representation(rows, cols)
    packed_t, meta_t = representation(cols, rows)
    if cols % 32:
        raise RuntimeError("Number of cols should be multiple of 32")
    masks = new((-(-rows // 32) * 4, -(-cols // 64) * 8, 8), torch.uint8)
    if algorithm not in _TILE_ALGORITHMS:
        raise RuntimeError(f'Unknown algorithm "{algorithm}"')
    return packed, meta, packed_t, meta_t, masks


_kernels.DISPATCH[aten._cslt_compress.default] = cslt_compress
_kernels.DISPATCH[aten._cslt_sparse_mm.default] = cslt_sparse_mm
_kernels.DISPATCH[aten._sparse_semi_structured_tile.default] = sparse_semi_structured_tile
