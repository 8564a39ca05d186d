"""Sparse COO and CSR tensors on the simulated device.

A simulated sparse COO tensor is PyTorch's own `SparseMeta` tensor whose indices and values are
simulated dense tensors (`_tensor.registered` reads it as simulated where its values are). Its
constructor and metadata (`_indices`, `_values`, `_nnz`, ...) allocate nothing, as on the GPU. The
ops with CUDA kernels of their own (`aten/src/ATen/native/sparse/cuda/*`) have no meta kernel, so
each is reproduced here with what it allocates on CUDA, in order: `_coalesce`
(`_coalesce_sparse_cuda` with Thrust's merge sort and unique-by-key), `sparse_mask` of a dense
tensor, dense + sparse and sparse + sparse `add`, `clone`, `transpose`, the sparse x dense product
(`torch.sparse.mm`, `_sparse_addmm`: CSR conversion and cuSPARSE SpMM) and its backward, and the
autograd engine's `AccumulateGrad` of a sparse gradient (`nn.Embedding(sparse=True)`,
`torch.optim.SparseAdam`). Checked against the H200's memory histories of `validation/run/blind16/
p04`, `blind32/af06` and of each op at several sizes (`fixtures/run/sparse/`,
`fixtures/run/linalg_sparse/`). Sparse CSR tensors are PyTorch's `SparseCsrMeta` tensors over
simulated crow indices, column indices and values: `to_sparse_csr` of a COO matrix and a CSR
matrix times a dense vector (`mv`, cuSPARSE SpMV) or matrix (`mm`, cuSPARSE SpMM) allocate what
their CUDA kernels allocate, checked against blind89/ck06's H200 history
(`fixtures/run/sparse/csr_ck06_h200.json`). Any other op on a sparse tensor runs its `SparseMeta`
(`SparseCsrMeta`) kernel where PyTorch has one (named unmeasured) and stops the program with a
clear error where not.
"""

from __future__ import annotations

import math

import torch

from . import _kernels
from ._opfacts import kept
from ._tensor import registered, set_value, tensors_in, value

aten = torch.ops.aten

_NO_DISPATCH = torch._C._DisableTorchDispatch
_COO = torch.sparse_coo
_CSR = torch.sparse_csr
_CSC = torch.sparse_csc
_BSR = torch.sparse_bsr
_BSC = torch.sparse_bsc
#: the sparse layouts the twin simulates (a CSC tensor is a CSR one's transpose; BSR and BSC their
#: blocked kin, whose values are blocks)
LAYOUTS = (_COO, _CSR, _CSC, _BSR, _BSC)

#: op -> handler(cap, func, args, kwargs), or NotImplemented to take the dense path
OPS: dict = {}


def _sparse(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout is _COO


def _csr(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout is _CSR


def _csc(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout is _CSC


def _bsr(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout is _BSR


def _compressed(t) -> bool:
    """Any of the compressed layouts (CSR, CSC, BSR, BSC)."""
    return isinstance(t, torch.Tensor) and t.layout in (_CSR, _CSC, _BSR, _BSC)


def parts(t):
    """A sparse COO tensor's indices and values; a CSR tensor's crow indices, column indices and
    values; a CSC tensor's ccol indices, row indices and values (outside the capture's dispatch)."""
    with _NO_DISPATCH():
        if t.layout is _CSR or t.layout is _BSR:
            return t.crow_indices(), t.col_indices(), t.values()
        if t.layout is _CSC or t.layout is _BSC:
            return t.ccol_indices(), t.row_indices(), t.values()
        return t._indices(), t._values()


def index_values(t):
    """The CPU values of a sparse tensor's indices, where the twin knows them (its indices are
    aliases made anew by each `_indices()`, so the sparse tensor keeps them)."""
    return getattr(t, "_vs_indices", None)


def _set_index_values(t, v) -> None:
    if v is not None:
        t._vs_indices = v


def _meta_kwargs(kwargs: dict) -> dict:
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == "cuda":
        return dict(kwargs, device=torch.device("meta"))
    return kwargs


def _make(t_like, indices, values, coalesced: bool, index_vals=None, size=None):
    """A `SparseMeta` tensor over simulated `indices` and `values`, as `alias_into_sparse` makes
    one (no copy): `_sparse_coo_tensor_with_dims_and_tensors`; `index_vals`: the indices' values;
    `size`: `t_like`'s unless given."""
    size = list(t_like.shape) if size is None else size
    with _NO_DISPATCH():
        out = aten._sparse_coo_tensor_with_dims_and_tensors(
            indices.shape[0],
            values.dim() - 1,
            size,
            indices,
            values,
            dtype=values.dtype,
            layout=_COO,
            device=torch.device("meta"),
            is_coalesced=coalesced,
        )
    _set_index_values(out, index_vals)
    return out


def _empty(cap, shape, dtype, op: str):
    """A new simulated dense tensor (contiguous), allocated in the twin."""
    return cap.track(torch.empty(shape, dtype=dtype, device="meta"), op)


def dispatch(cap, func, args, kwargs):
    """The op, where it has a rule here and involves a simulated sparse tensor; NotImplemented
    otherwise (an op without a rule whose operands include one goes to `fallback`)."""
    try:
        handler = func._vramscope_sparse_rule
    except AttributeError:
        handler = kept(func, "_vramscope_sparse_rule", OPS.get(func))
    if handler is None:
        return NotImplemented
    return handler(cap, func, args, kwargs)


def fallback(cap, func, args, kwargs):
    """An op on a sparse tensor without a rule: its `SparseMeta` kernel, where PyTorch has one
    (new storages allocated at their sizes, named unmeasured); else a clear error."""
    name = func._schema.name
    try:
        with _NO_DISPATCH():
            out = func(*args, **_meta_kwargs(kwargs))
    except (NotImplementedError, RuntimeError) as e:
        raise NotImplementedError(
            f"vramscope: {name} of a sparse {_layout_name(args, kwargs)} CUDA tensor has no rule in "
            f"the twin and no meta kernel in PyTorch ({str(e).splitlines()[0]})"
        ) from None
    cap.ops += 1
    for o in tensors_in(out):
        _adopt(cap, o, name)
        if _sparse(o):
            o._vs_indices = None  # not known past an op without a rule
    cap.note_unmeasured(f"{name} (sparse {_layout_name(args, kwargs)})")
    return out


def _layout_name(args, kwargs) -> str:
    """COO or CSR: the sparse layout among an op's operands (COO where both are)."""
    return "COO" if any(_sparse(t) for t in tensors_in((args, kwargs))) else "CSR"


def _adopt(cap, t, op: str) -> None:
    """Allocate the storages of a meta result the twin has not seen (a sparse tensor's parts)."""
    if not _tensor_is_meta(t):
        return
    for p in parts(t) if _sparse(t) or _compressed(t) else (t,):
        cap.track(p, op)
        set_value(p, None)


def _tensor_is_meta(t) -> bool:
    from ._tensor import BASE_IS_META

    return isinstance(t, torch.Tensor) and BASE_IS_META(t)


# ---- construction and metadata: no allocation -------------------------------------------------


def _construct(cap, func, args, kwargs):
    """`_sparse_coo_tensor_with_dims_and_tensors` (`new_with_dims_and_tensor_sparse`,
    SparseTensor.cpp): the tensor aliases its indices and values."""
    if not any(registered(t) for t in tensors_in(args)):
        return NotImplemented
    cap.ops += 1
    with _NO_DISPATCH():
        out = func(*args, **_meta_kwargs(kwargs))
    _set_index_values(out, value(args[3]))
    return out


OPS[aten._sparse_coo_tensor_with_dims_and_tensors.default] = _construct


def _construct_compressed(cap, func, args, kwargs):
    """`sparse_compressed_tensor(compressed, plain, values, size, layout=...)` (CSR, CSC, and the
    blocked BSR and BSC, whose values are (nnz, b0, b1) blocks: `torch.sparse_bsr_tensor`) and
    `_sparse_compressed_tensor_unsafe` (SparseCsrTensor.cpp) over simulated parts of the asked dtype:
    the new tensor's `set_member_tensors` aliases them (no allocation; the invariant checks, off by
    default, read the indices on the host). The size-less overload infers the size from the
    indices' values, which the twin does not carry: it takes the dense path's error."""
    names = ("compressed_indices", "plain_indices", "values", "size")
    p = dict(zip(names, args, strict=False)) | kwargs
    crow, col, values, size = p["compressed_indices"], p["plain_indices"], p["values"], p.get("size")
    if size is None or not all(registered(t) for t in (crow, col, values)):
        return NotImplemented
    layout = p.get("layout") or _CSR
    dtype = p.get("dtype") or values.dtype
    if layout not in (_CSR, _CSC, _BSR, _BSC) or dtype != values.dtype or crow.dim() != 1 or len(size) != 2:
        return NotImplemented
    if (layout in (_BSR, _BSC)) != (values.dim() == 3):
        return NotImplemented  # blocked layouts hold (nnz, b0, b1) blocks; the others, scalars
    cap.ops += 1
    with _NO_DISPATCH():
        if layout is _CSR:
            return aten._sparse_csr_tensor_unsafe(
                crow, col, values, list(size), dtype=dtype, layout=_CSR, device=torch.device("meta")
            )
        if layout is _CSC:
            return aten._sparse_csc_tensor_unsafe(
                crow, col, values, list(size), dtype=dtype, layout=_CSC, device=torch.device("meta")
            )
        return aten._sparse_compressed_tensor_unsafe(
            crow, col, values, list(size), dtype=dtype, layout=layout, device=torch.device("meta")
        )


OPS[aten.sparse_compressed_tensor.comp_plain_value_size] = _construct_compressed
OPS[aten._sparse_compressed_tensor_unsafe.default] = _construct_compressed


#: the layouts whose metadata and aliases `_metadata` makes: COO, CSR and BSR
_METADATA_LAYOUTS = (_COO, _CSR, _BSR)


def _metadata(cap, func, args, kwargs):
    """Metadata and aliases of a sparse tensor (`_indices`, `_values`, `_nnz`, `detach`, ...; a
    CSR tensor's `crow_indices`, `col_indices`, `values`, ...)."""
    t = args[0] if args else None
    # (one layout read: `detach` of every dense tensor comes here)
    if not (isinstance(t, torch.Tensor) and t.layout in _METADATA_LAYOUTS and registered(t)):
        return NotImplemented
    with _NO_DISPATCH():
        out = func(*args, **kwargs)
    if func in _INDICES:
        set_value(out, index_values(t))
    elif func in _ALIASES:
        _set_index_values(out, index_values(t))
    return out


_INDICES = {aten._indices.default, aten.indices.default}
_ALIASES = {aten.detach.default, aten.alias.default, aten._coalesced_.default}


for _f in (
    aten._indices.default,
    aten._values.default,
    aten.indices.default,
    aten.values.default,
    aten.is_coalesced.default,
    aten._nnz.default,
    aten.sparse_dim.default,
    aten.dense_dim.default,
    aten._dimI.default,
    aten._dimV.default,
    aten._coalesced_.default,
    aten.detach.default,
    aten.alias.default,
    aten.crow_indices.default,
    aten.col_indices.default,
):
    OPS[_f] = _metadata


def _zero(cap, func, args, kwargs):
    """`zero_sparse_` (SparseTensor.cpp): `sparse_resize_and_clear_` gives the tensor empty indices
    and values (no allocation; the old ones are released), marked coalesced."""
    t = args[0]
    if not (_sparse(t) and registered(t)):
        return NotImplemented
    cap.ops += 1
    with _NO_DISPATCH():
        t.zero_()
    indices, values = parts(t)
    cap.track(indices, "aten::zero_")
    cap.track(values, "aten::zero_")
    t._vs_indices = torch.empty(indices.shape, dtype=torch.long)
    return t


OPS[aten.zero_.default] = _zero


def _to_dense(cap, func, args, kwargs):
    """`sparse_to_dense` (SparseTensor.cpp) of a COO tensor: `zeros` of its size, then `add_` of
    the tensor into them in place (`add_out_dense_sparse_cuda`, which allocates nothing on the
    H200, coalesced or not: fixtures/run/sparse/sparse_probe_h200.json)."""
    t = args[0]
    if not (_sparse(t) and registered(t)):
        return NotImplemented
    cap.ops += 1
    out = _empty(cap, tuple(t.shape), t.dtype, "aten::zeros")
    set_value(out, None)
    _dense_sparse_add_scratch(cap, t)
    return out


def _dense_sparse_add_scratch(cap, t) -> None:
    """`add_out_dense_sparse_cuda` (SparseCUDATensorMath.cu) of an uncoalesced COO tensor `t`: its
    `index_add_` runs over `flatten_indices(indices, sizes)`, a view of one sparse dimension's
    indices, else n new int64 linear indices, freed at the end (the H200:
    fixtures/run/sparse/sparse_probe_h200.json, sparse_probe2_h200.json)."""
    indices, values = parts(t)
    if t.is_coalesced() or values.numel() == 0 or indices.shape[0] < 2:
        return
    flat = cap.malloc(indices.shape[1] * 8, "aten::add_", "temporary")
    del flat


OPS[aten._to_dense.default] = _to_dense


def host_to_device(cap, src, kwargs):
    """`_to_copy` of a host COO tensor to the GPU (TensorConversions.cpp): its indices copied (their
    own dtype), then its values (the dtype asked for), each by `at::native::to` as a dense copy
    from the host, and `_sparse_coo_tensor_unsafe` over them with the coalesced flag; the
    indices' values are the host's. A host CSR tensor: `_host_csr_to_device`."""
    if src.layout is _CSR:
        return _host_csr_to_device(cap, src, kwargs)
    with _NO_DISPATCH():
        indices, values = src._indices(), src._values()
    common = {k: kwargs[k] for k in ("device", "pin_memory", "non_blocking") if k in kwargs}
    new_indices = _kernels._to_copy(cap, aten._to_copy.default, (indices,), common)
    dtype = {"dtype": kwargs["dtype"]} if kwargs.get("dtype") is not None else {}
    new_values = _kernels._to_copy(cap, aten._to_copy.default, (values,), dict(common, **dtype))
    with _NO_DISPATCH():
        index_vals = indices.clone()
    return _make(src, new_indices, new_values, src.is_coalesced(), index_vals)


def _to_copy(cap, func, args, kwargs):
    """`_to_copy` of a simulated COO tensor that stays on the GPU (a dtype cast, `A.float()`):
    TensorConversions.cpp's kSparse branch copies the indices (`at::native::to(..., copy=true)`,
    their own dtype), then the values in the dtype asked for, and makes
    `_sparse_coo_tensor_unsafe` over them with the coalesced flag."""
    t = args[0]
    if not (_sparse(t) and registered(t)) or t.layout is not _COO:
        return NotImplemented
    dev = kwargs.get("device")
    if (dev is not None and torch.device(dev).type != "cuda") or kwargs.get("layout") not in (None, _COO):
        return NotImplemented
    cap.ops += 1
    indices, values = parts(t)
    new_indices = cap.dispatch(aten._to_copy.default, (indices,), {})
    dtype = {"dtype": kwargs["dtype"]} if kwargs.get("dtype") is not None else {}
    new_values = cap.dispatch(aten._to_copy.default, (values,), dtype)
    return _make(t, new_indices, new_values, t.is_coalesced(), index_values(t))


OPS[aten._to_copy.default] = _to_copy


def _host_csr_to_device(cap, src, kwargs):
    """`_to_copy` of a host CSR tensor to the GPU (TensorConversions.cpp's compressed branch): its
    values copied (the dtype asked for), then its crow indices, then its column indices (their own
    dtype), each by `at::native::to` as a dense copy from the host, and
    `_sparse_compressed_tensor_unsafe` over them. The H200's order and sizes: blind141/ek01's
    memory history (values 10,006,884, crow 1,354,752, columns 20,013,768 bytes)."""
    crow, col, values = parts(src)
    common = {k: kwargs[k] for k in ("device", "pin_memory", "non_blocking") if k in kwargs}
    dtype = {"dtype": kwargs["dtype"]} if kwargs.get("dtype") is not None else {}
    new_values = _kernels._to_copy(cap, aten._to_copy.default, (values,), dict(common, **dtype))
    new_crow = _kernels._to_copy(cap, aten._to_copy.default, (crow,), common)
    new_col = _kernels._to_copy(cap, aten._to_copy.default, (col,), common)
    with _NO_DISPATCH():
        return aten._sparse_csr_tensor_unsafe(
            new_crow,
            new_col,
            new_values,
            list(src.shape),
            dtype=new_values.dtype,
            layout=_CSR,
            device=torch.device("meta"),
        )


# ---- clone and AccumulateGrad ----------------------------------------------------------------


def _clone(cap, func, args, kwargs):
    """`clone_sparse` (SparseTensor.cpp): `copy_into_sparse` copies values, then indices (the
    H200's order); the result keeps the coalesced flag.

    Inside `AccumulateGrad` (torch/csrc/autograd/functions/accumulate_grad.h) a first sparse
    gradient with contiguous indices and values is not cloned but wrapped
    (`_sparse_coo_tensor_unsafe(new_grad._indices(), new_grad._values(), ...)`) when grad mode is
    off and nothing else holds the gradient's parts: on the GPU the engine's reference is the only
    one, while under the capture's dispatch mode Python holds more, and the engine would clone.
    The H200 keeps `nn.Embedding(sparse=True)`'s gradient on the program's index storage
    (fixtures/run/sparse)."""
    t = args[0]
    if not (_sparse(t) and registered(t)):
        return NotImplemented
    cap.ops += 1
    indices, values = parts(t)
    node = torch._C._current_autograd_node()
    if (
        node is not None
        and node.name() == "torch::autograd::AccumulateGrad"
        and not torch.is_grad_enabled()
        and indices.is_contiguous()
        and values.is_contiguous()
    ):
        return _make(t, indices, values, False, index_values(t))
    new_values = _empty(cap, values.shape, values.dtype, "aten::clone")
    new_indices = _empty(cap, indices.shape, indices.dtype, "aten::clone")
    return _make(t, new_indices, new_values, t.is_coalesced(), index_values(t))


OPS[aten.clone.default] = _clone


# ---- coalesce -----------------------------------------------------------------------------------


def _alias_temporaries(sizes) -> int:
    """CUB's `AliasTemporaries` (`cub/util_temporary_storage.cuh`): each part rounded up to 256
    bytes, plus 255 bytes to align the blob (as `vramscope_engine::ops::cub`)."""
    return sum(-(-s // 256) * 256 for s in sizes) + 255


def merge_sort_pairs_bytes(n: int, key_bytes: int = 8, value_bytes: int = 8) -> int:
    """`thrust::sort_by_key` with a comparator of its own (`LTOp`): CUB's `DispatchMergeSort`
    (CCCL 3.0, `Policy600`: 256 threads of `Nominal4BItemsToItems<int64>(17)` = 8 items, so
    2,048-item tiles) with 32-bit offsets (Thrust's dispatch below 2^31 items): the merge
    partitions, the key and value buffers. The H200 gives these bytes at seven sizes from 100 to
    2,000,000 (fixtures/run/sparse)."""
    tiles = -(-n // 2048)
    return _alias_temporaries([(tiles + 1) * 4, n * key_bytes, n * value_bytes, 0])


def unique_by_key_bytes(n: int) -> int:
    """`thrust::unique_by_key` of int64 keys and values: Thrust's storage aliases CUB's
    (`DispatchUniqueByKey`: the `ScanTileState` of its tiles, 32 + tiles 8-byte words for 32-bit
    offsets, itself aliased) with the 8-byte count it copies to the host; the sm_90 tile for
    8-byte keys and values is 448 threads of 11 (`tuning_unique_by_key.cuh`). The H200 gives these
    bytes at seven sizes (fixtures/run/sparse)."""
    tiles = -(-n // (448 * 11))
    state = _alias_temporaries([(32 + tiles) * 8, 0, 0])
    return _alias_temporaries([_alias_temporaries([state]), 8])


def _distinct(cap, t, n: int):
    """The distinct index tuples of sparse `t`'s `n` entries, sorted (None where the twin does
    not carry the indices' values), and their count: where the values are not carried every
    entry is taken as distinct up to the number of index tuples the sparse dimensions hold
    (the largest result, as for `unique` and `nonzero`), with a warning."""
    v = index_values(t)
    if v is not None:
        # one linear index per entry (`flatten_indices`), whose sorted distinct values unflatten
        # to the distinct tuples in lexicographic order (`unique(dim=1)` is four times slower)
        sizes = t.shape[: v.shape[0]]
        linear = v[0]
        for d in range(1, v.shape[0]):
            linear = linear * sizes[d] + v[d]
        flat = torch.unique(linear)
        cols = []
        for d in reversed(range(v.shape[0])):
            cols.append(flat % sizes[d] if d else flat)
            flat = flat // sizes[d]
        return torch.stack(cols[::-1]), len(cols[0])
    from ._capture import _user_site

    site = _user_site()
    cap.warn_once(
        "coalesce:" + site,
        f"{site}: coalescing a sparse CUDA tensor of {n} entries needs its indices' values, which "
        "the twin does not compute: it takes every index as distinct, at most one per index the "
        "sparse dimensions hold (the largest result; memory after it is an upper bound)",
    )
    # no more distinct tuples than the sparse dimensions hold (blind328/lq03: 3.4M summed rows of
    # SparseAdam's gradient over a 200,000-row table)
    return None, min(n, math.prod(t.shape[: t.sparse_dim()]))


def _coalesce(cap, func, args, kwargs):
    """`_coalesce_sparse_cuda` (sparse/cuda/SparseCUDATensor.cu): under 2 entries a clone;
    else the flattened indices (`flatten_indices(..., force_clone=true)`: n int64), the original
    positions and unique offsets (n int64 each), Thrust's merge sort and unique-by-key scratch
    (allocated and freed in turn), the new values of the distinct count; one sparse dimension
    keeps the flattened indices' storage (resized, not reallocated), more get new indices; the
    offsets and positions die, then the flattened indices where not kept (the H200's order)."""
    t = args[0]
    if not (_sparse(t) and registered(t)):
        return NotImplemented
    indices, values = parts(t)
    n = values.shape[0]
    if n < 2:
        out = _clone(cap, aten.clone.default, (t,), {})
        with _NO_DISPATCH():
            out._coalesced_(True)
        return out
    cap.ops += 1
    op = "aten::_coalesce"
    sd = indices.shape[0]
    flat = _empty(cap, (n,), torch.long, op)
    orig = cap.malloc(n * 8, op, "temporary")
    offsets = cap.malloc(n * 8, op, "temporary")
    del_ = cap.malloc(merge_sort_pairs_bytes(n), op, "workspace")
    del del_
    uniq = cap.malloc(unique_by_key_bytes(n), op, "workspace")
    del uniq
    distinct, nnz = _distinct(cap, t, n)
    new_values = _empty(cap, (nnz, *values.shape[1:]), values.dtype, op)
    copy = (
        None
        if values.is_contiguous()
        else cap.malloc(values.numel() * values.element_size(), op, "temporary")
    )
    if sd == 1:
        with _NO_DISPATCH():
            new_indices = flat.resize_((1, nnz))
    else:
        new_indices = _empty(cap, (sd, nnz), torch.long, op)
    del copy, offsets, orig, flat
    return _make(t, new_indices, new_values, True, distinct)


OPS[aten._coalesce.default] = _coalesce


# ---- sum over dimensions of a sparse COO tensor ------------------------------------------------


def _sparse_sum(cap, func, args, kwargs):
    """`_sparse_sum(input, dims)` (`torch.sparse.sum`; CompositeExplicitAutograd, SparseTensorMath.cpp):
    new values (`values.sum` over the summed dense dimensions, else `values.clone()`); over every
    sparse dimension the sum of those over the entries, a dense tensor (the clone dies); else new
    indices (a clone when no sparse dimension is summed, else `empty` of the kept ones' rows,
    copied), the tensor over them and `coalesce()`, which merges the entries made equal."""
    t, dims = args[0], args[1]
    if not (_sparse(t) and registered(t)) or kwargs:
        return NotImplemented
    cap.ops += 1
    op = "aten::_sparse_sum"
    indices, values = parts(t)
    sd = indices.shape[0]
    dims = [dims] if isinstance(dims, int) else dims
    dims = sorted({d + t.dim() if d < 0 else d for d in dims})
    dense_sum = [d + 1 - sd for d in dims if d >= sd]
    keep = [d for d in range(t.dim()) if d not in dims]
    sparse_summed = len(dims) - len(dense_sum)
    if dense_sum:
        shape = [n for i, n in enumerate(values.shape) if i not in dense_sum]
    else:
        shape = list(values.shape)
    new_values = _empty(cap, tuple(shape), values.dtype, op)
    set_value(new_values, None)
    if sparse_summed == sd:
        out = _empty(cap, tuple(shape[1:]), values.dtype, op)
        set_value(out, None)
        return out
    new_indices = _empty(cap, (sd - sparse_summed, indices.shape[1]), indices.dtype, op)
    known = index_values(t)
    kept_sparse = [d for d in keep if d < sd]
    vals = None if known is None else known[kept_sparse]
    set_value(new_indices, vals)
    summed = _make(t, new_indices, new_values, False, vals, size=[t.shape[d] for d in keep])
    return _coalesce(cap, aten._coalesce.default, (summed,), {})


OPS[aten._sparse_sum.dim] = _sparse_sum


# ---- softmax over a sparse COO tensor --------------------------------------------------------


def _sparse_softmax(cap, func, args, kwargs):
    """`softmax_sparse_cuda` / `log_softmax_sparse_cuda` (sparse/cuda/SoftMax.cu): the input
    coalesced (`softmax_sparse_input_preprocessing`), `empty_like_sparse_coo`, then the output's
    values (`out_values.resize_as_(values)`) and indices (`resize_as_`, `copy_`); over a dense
    dimension `softmax_cuda` of the values replaces the resized ones (`set_`); over a sparse one the
    pools' offsets, sorted positions, sizes and max rows come from Thrust sorts and scans, scratch
    the twin names unmeasured."""
    t = args[0]
    if not (_sparse(t) and registered(t)) or kwargs:
        return NotImplemented
    op = f"aten::{func._schema.name.split('::')[-1]}"
    coalesced = t if t.is_coalesced() else _coalesce(cap, aten._coalesce.default, (t,), {})
    cap.ops += 1
    indices, values = parts(coalesced)
    sd = indices.shape[0]
    dim = args[1] + t.dim() if args[1] < 0 else args[1]
    new_values = _empty(cap, values.shape, values.dtype, op)
    new_indices = _empty(cap, indices.shape, indices.dtype, op)
    if values.numel() > 0:
        if dim >= sd:
            dense = _empty(cap, values.shape, values.dtype, op)
            new_values = dense
        else:
            _softmax_pools(cap, coalesced, values, dim, op)
    return _make(coalesced, new_indices, new_values, True, index_values(coalesced))


#: Thrust's temporary storage in `compute_pool_max` (sparse/cuda/SoftMax.cu) by item count, bytes as
#: the H100 measured them (kx69_blind309_workspaces_probe: blind309/kx02's 1,560,000 entries in
#: 120,000 rows): `reduce_by_key` over the sorted entries and the in-place `exclusive_scan` of the
#: pools' int64 sizes; no formula from CUB's tunings reproduces them yet
REDUCE_BY_KEY_BYTES = {1_560_000: 12_287}
EXCLUSIVE_SCAN_INT64_BYTES = {120_000: 1_791}


def _pool_count(cap, t, dim: int, nnz: int) -> int:
    """`compute_pool_max`'s `new_sz`: the distinct tuples of the sparse indices other than `dim`
    (every entry its own pool where the twin does not carry the indices' values: the most, with a
    warning)."""
    v = index_values(t)
    if v is None:
        from ._capture import _user_site

        site = _user_site()
        cap.warn_once(
            "softmax_pools:" + site,
            f"{site}: a sparse softmax over a sparse dimension of {nnz} entries sizes its pools by the "
            "indices' values, which the twin does not compute: it takes every entry as its own pool "
            "(the largest; memory there is an upper bound)",
        )
        return nnz
    rest = torch.cat([v[:dim], v[dim + 1 :]]) if v.shape[0] > 1 else v[:0]
    return int(torch.unique(rest, dim=1).shape[1]) if rest.shape[0] else 1


def _softmax_pools(cap, t, values, dim: int, op: str) -> None:
    """`cuda_sparse_coo_softmax` over a sparse dimension: `get_offsets` (the strides, ndim int64
    from the host, and each entry's pool offset, nnz int64; the strides die as it returns), then
    `compute_pool_max`: sorted positions (nnz int64), Thrust's merge sort of them by offset
    (`thrust::sort` with a comparator: CUB's merge sort of int64 keys), the pool sizes (nnz int64,
    `reduce_by_key`'s scratch), the pools' offsets (`pool_sizes.clone()` after `resize_` to the pool
    count, then `exclusive_scan`'s scratch) and the max rows (`at::full`: pools x values); the
    offsets die as it returns, the rest after the kernel. Sizes and order as the H100's events of
    kx69_blind309_workspaces_probe."""
    nnz, sd = values.shape[0], t.sparse_dim()
    nvalues = math.prod(values.shape[1:])
    strides = cap.malloc(sd * 8, op, "temporary")
    offsets = cap.malloc(nnz * 8, op, "temporary")
    del strides
    positions = cap.malloc(nnz * 8, op, "temporary")
    sort = cap.malloc(merge_sort_pairs_bytes(nnz, 8, 0), op, "workspace")
    del sort
    sizes = cap.malloc(nnz * 8, op, "temporary")
    _thrust_scratch(cap, REDUCE_BY_KEY_BYTES.get(nnz), op, f"{op}'s Thrust reduce_by_key ({nnz} entries)")
    pools = _pool_count(cap, t, dim, nnz)
    pool_offsets = cap.malloc(pools * 8, op, "temporary")
    _thrust_scratch(
        cap, EXCLUSIVE_SCAN_INT64_BYTES.get(pools), op, f"{op}'s Thrust exclusive_scan ({pools} pools)"
    )
    mx = cap.malloc(pools * nvalues * values.element_size(), op, "temporary")
    del offsets
    del positions, pool_offsets, sizes, mx


def _thrust_scratch(cap, nbytes, op: str, what: str) -> None:
    """Thrust's temporary array from the caching allocator, allocated and freed, or `what` named
    unmeasured."""
    if nbytes is None:
        cap.note_unmeasured(what)
        return
    scratch = cap.malloc(nbytes, op, "workspace")
    del scratch


OPS[aten._sparse_softmax.default] = _sparse_softmax
OPS[aten._sparse_log_softmax.default] = _sparse_softmax


def _sparse_softmax_backward(cap, func, args, kwargs):
    """`softmax_backward_sparse_cuda` / `log_softmax_backward_sparse_cuda` (sparse/cuda/SoftMax.cu):
    the gradient and the output coalesced, then the input's gradient over the output's pattern
    (values `resize_as_` and zeroed, indices `resize_as_` and copied); the offsets, lower bounds and
    pools (Thrust) or the dense backward per row are scratch the twin names unmeasured."""
    grad, output = args[0], args[1]
    if not (_sparse(grad) and _sparse(output) and registered(output)) or kwargs:
        return NotImplemented
    op = f"aten::{func._schema.name.split('::')[-1]}"
    if not grad.is_coalesced():
        grad = _coalesce(cap, aten._coalesce.default, (grad,), {})
    if not output.is_coalesced():
        output = _coalesce(cap, aten._coalesce.default, (output,), {})
    cap.ops += 1
    indices, values = parts(output)
    new_values = _empty(cap, values.shape, values.dtype, op)
    new_indices = _empty(cap, indices.shape, indices.dtype, op)
    if values.numel() > 0:
        cap.note_unmeasured(f"{op}'s offsets and pools (Thrust, sparse COO)")
    return _make(output, new_indices, new_values, True, index_values(output))


OPS[aten._sparse_softmax_backward_data.default] = _sparse_softmax_backward
OPS[aten._sparse_log_softmax_backward_data.default] = _sparse_softmax_backward


# ---- sparse_mask ------------------------------------------------------------------------------


def _sparse_mask(cap, func, args, kwargs):
    """`sparse_mask(dense, mask)` (sparse/SparseTensor.cpp): `mask_template` over `ones({1})`
    expanded to the mask's values, then `t.mul(mask_template)`, which `_mul_dense_sparse_out`'s
    `intersection_binary_op_sparse_dense_out` (SparseTensorMath.cpp) runs as the rows of `t` at
    the mask's indices (`d.index(...)`), a clone of the mask's indices and the product of the rows
    and the ones; the rows die, then the ones (the H200's order). The result takes the mask's
    coalesced flag."""
    t, mask = args[0], args[1]
    if _csr(t) and _csr(mask) and registered(mask) and registered(t) and t.dim() == 2:
        return _csr_mask_of_csr(cap, t, mask)
    if _sparse(t) and _sparse(mask) and registered(mask) and registered(t):
        return _sparse_mask_of_sparse(cap, t, mask)
    if not (_sparse(mask) and registered(mask)) or _sparse(t) or not registered(t):
        return NotImplemented
    cap.ops += 1
    op = "aten::sparse_mask"
    indices, values = parts(mask)
    nnz, sd = values.shape[0], indices.shape[0]
    if nnz == 0 or mask.numel() == 0:
        return _clone(cap, aten.clone.default, (mask,), {})
    ones = cap.malloc(values.element_size(), "aten::ones", "temporary")
    dense_shape = tuple(t.shape[sd:])
    rows = cap.malloc(nnz * math.prod(dense_shape) * t.element_size(), "aten::index", "temporary")
    new_indices = _empty(cap, indices.shape, indices.dtype, op)
    new_values = _empty(cap, (nnz, *dense_shape), torch.promote_types(t.dtype, values.dtype), op)
    del rows, ones
    if new_values.dtype != t.dtype:
        new_values = _empty(cap, new_values.shape, t.dtype, op)
    return _make(mask, new_indices, new_values, mask.is_coalesced(), index_values(mask))


OPS[aten.sparse_mask.default] = _sparse_mask


def _sparse_mask_of_sparse(cap, t, mask):
    """`sparse_mask(t, mask)` of two COO tensors (sparse/SparseTensor.cpp; the backward of
    `sparse_coo_tensor`'s values): the same tensor is returned as is; an empty mask or `t` gives a
    clone of the mask; else `sparse_mask_like_prepare_sparse_inputs` makes `t` the coalesced side
    (sorting it first where it is not) and the mask the source, and `sparse_mask_intersection_out_stub`
    (`_sparse_binary_op_intersection_kernel_impl`, SparseBinaryOpIntersectionKernel.cu) runs: an
    int64 arange of the larger nnz, the hashes of `t`'s indices (nnz_t int64), the 2 x nnz_mask int64
    buffer of the counts and first matches and an 8-byte dummy output (freed), then the result's
    indices (a clone of the mask's) and values (nnz_mask, `t`'s dtype, over the mask's pattern); the
    buffer, the hashes and the arange die (rp62_sparse_mask probe's H100 history: 1, 1, 2 MiB, 8
    bytes, 2 MiB, 512 KiB at nnz 131,072 float32, peak +6,815,744). The result takes the mask's
    coalesced flag. An uncoalesced `t` (its flatten, sort and index_select first) and mixed value
    dtypes (the `.to()`s) are named unmeasured."""
    if t is mask:
        return t
    indices, values = parts(mask)
    t_values = parts(t)[1]
    nnz, sd = values.shape[0], indices.shape[0]
    t_nnz = t_values.shape[0]
    if nnz == 0 or mask.numel() == 0 or t_nnz == 0:
        out = _clone(cap, aten.clone.default, (mask,), {})
        if out.dtype != t.dtype:
            out = _make(
                mask,
                parts(out)[0],
                _empty(cap, values.shape, t.dtype, "aten::sparse_mask"),
                mask.is_coalesced(),
            )
        return out
    cap.ops += 1
    op = "aten::sparse_mask"
    measured = t.is_coalesced() and t_values.dtype == values.dtype and indices.dtype == torch.int64
    if measured:
        arange = cap.malloc(8 * max(nnz, t_nnz), "aten::arange", "temporary")
        hashes = cap.malloc(8 * t_nnz, op, "temporary")
        buffer = cap.malloc(16 * nnz, op, "temporary")
        dummy = cap.malloc(8, op, "temporary")
        del dummy
    new_indices = _empty(cap, (sd, nnz), indices.dtype, op)
    new_values = _empty(cap, (nnz, *values.shape[1:]), t.dtype, op)
    if measured:
        del buffer, hashes, arange
    else:
        cap.note_unmeasured(
            f"{op} of an uncoalesced sparse tensor or of other value dtypes (the intersection's "
            "sorting and conversions)"
        )
    return _make(mask, new_indices, new_values, mask.is_coalesced(), index_values(mask))


def _csr_mask_of_csr(cap, t, mask):
    """`sparse_mask(t, mask)` of two CSR matrices (`sparse_mask_sparse_compressed`,
    SparseCsrTensorMath.cpp; `sparse_sampled_addmm`'s backward projects its gradient so):
    `t.mul(ones_like(mask))`. `ones_like` is `empty_like` of the mask (new values, then the column
    and crow indices copied) filled with ones; `mul_sparse_csr` makes the result `empty({0, 0})`
    (its crow indices one int64) and `mul_out_sparse_csr` runs through COO: both operands
    `to_sparse()` (new indices, shared values) and their product, `_sparse_binary_op_intersection_
    kernel_impl` (SparseBinaryOpIntersectionCommon.h): both coalesced, the larger operand (`t` on a
    tie) is the one searched, the other the source; an int64 `arange` of the larger nnz, the
    searched operand's index hashes (int64, its nnz), the intersection buffer (2 x the source's nnz,
    int64), a one-element dummy (dies), the source's indices cloned and the selected values (the
    source's nnz: the result's), then the buffer, hashes and arange die. The product is made
    `to_sparse_csr()` (new crow indices; column indices and values shared), the result resized as it
    (`resize_as_sparse_`: crow indices grown, the one-element ones freed, then column indices and
    values) and copied. Then, as the locals die: the product's CSR crow indices, its values, its
    indices, the two COO index tensors, and the ones' values, column and crow indices (the H100's
    order, pt62_tunableop_and_csr_backward_probe)."""
    if t is mask:
        return t
    cap.ops += 1
    op = "aten::sparse_mask"
    m_crow, m_col, m_values = parts(mask)
    if m_values.shape[0] == 0 or mask.numel() == 0:
        return NotImplemented
    ones_values = _empty(cap, m_values.shape, m_values.dtype, "aten::ones_like")
    ones_col = _empty(cap, m_col.shape, m_col.dtype, "aten::ones_like")
    ones_crow = _empty(cap, m_crow.shape, m_crow.dtype, "aten::ones_like")
    for x in (ones_values, ones_col, ones_crow):
        set_value(x, None)
    with _NO_DISPATCH():
        ones = aten._sparse_csr_tensor_unsafe(
            ones_crow,
            ones_col,
            ones_values,
            list(mask.shape),
            dtype=m_values.dtype,
            layout=_CSR,
            device=torch.device("meta"),
        )
    first_crow = _empty(cap, (1,), m_crow.dtype, "aten::empty")
    t_coo = _csr_to_coo(cap, t)
    ones_coo = _csr_to_coo(cap, ones)
    t_values = parts(t)[2]
    t_nnz, m_nnz = t_values.shape[0], m_values.shape[0]
    searched, nnz = (t_nnz, m_nnz) if t_nnz >= m_nnz else (m_nnz, t_nnz)
    dtype = torch.promote_types(t_values.dtype, m_values.dtype)
    arange = cap.malloc(max(searched, nnz) * 8, "aten::arange", "temporary")
    hashes = cap.malloc(searched * 8, op, "temporary")
    buffer = cap.malloc(2 * nnz * 8, op, "temporary")
    dummy = cap.malloc(8, op, "temporary")
    del dummy
    prod_indices = _empty(cap, (2, nnz), m_crow.dtype, op)
    # the values brought to the common dtype (`.to`: a copy where they differ), until the selection
    source_dtype, searched_dtype = (
        (m_values.dtype, t_values.dtype) if t_nnz >= m_nnz else (t_values.dtype, m_values.dtype)
    )
    cast = [
        cap.malloc(n * dtype.itemsize, "aten::_to_copy", "temporary")
        for n, d in ((nnz, source_dtype), (searched, searched_dtype))
        if d != dtype
    ]
    prod_values = _empty(cap, (nnz,), dtype, op)
    del cast
    del buffer, hashes, arange
    set_value(prod_indices, None)
    set_value(prod_values, None)
    prod = _make(t_coo, prod_indices, prod_values, True)
    prod_csr = _to_sparse_csr(cap, aten._to_sparse_csr.default, (prod,), {})
    p_crow, p_col, p_values = parts(prod_csr)
    r_crow = _empty(cap, p_crow.shape, p_crow.dtype, "aten::resize_as_sparse_")
    del first_crow
    r_col = _empty(cap, p_col.shape, p_col.dtype, "aten::resize_as_sparse_")
    r_values = _empty(cap, p_values.shape, p_values.dtype, "aten::resize_as_sparse_")
    for x in (r_crow, r_col, r_values):
        set_value(x, None)
    with _NO_DISPATCH():
        out = aten._sparse_csr_tensor_unsafe(
            r_crow, r_col, r_values, list(t.shape), dtype=dtype, layout=_CSR, device=torch.device("meta")
        )
    del p_col, p_values, prod_csr
    del p_crow
    del prod
    del prod_values
    del prod_indices
    del ones_coo
    del t_coo, t_values
    del ones
    del ones_values
    del ones_col
    del ones_crow
    return out


# ---- add and sub --------------------------------------------------------------------------------


def _add(cap, func, args, kwargs):
    """`add`/`sub` with a sparse operand (sparse/cuda/SparseCUDATensorMath.cu):

    - dense + sparse (`add_out_dense_sparse_cuda`): the sparse values are added into the result
      in place (`sparseElementwiseKernel` where coalesced, else `index_add_` over the flattened
      indices: `_dense_sparse_add_scratch`); out of place the result is a new dense tensor, a
      copy of the dense operand;
    - sparse + sparse (`add_out_sparse_cuda`): the values scaled by `alpha` where it is not 1,
      then the concatenated indices and the concatenated values; in place the tensor takes
      them."""
    self_, other = args[0], args[1]
    if not (_sparse(other) and registered(other)) or not registered(self_):
        return NotImplemented
    name = func._schema.name
    in_place = name.endswith("_")
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    cap.ops += 1
    if not _sparse(self_):
        set_value(self_, None)
        if in_place:
            _dense_sparse_add_scratch(cap, other)
            return self_
        out = _empty(
            cap, self_.shape, torch.promote_types(self_.dtype, other.dtype), "aten::" + name.split("::")[1]
        )
        _dense_sparse_add_scratch(cap, other)
        return out
    op = "aten::add"
    t_indices, t_values = parts(self_)
    s_indices, s_values = parts(other)
    scaled = None
    if (alpha != 1 and alpha is not None) or name.startswith("aten::sub"):
        scaled = cap.malloc(s_values.numel() * s_values.element_size(), "aten::mul", "temporary")
    new_indices = _empty(cap, (t_indices.shape[0], t_indices.shape[1] + s_indices.shape[1]), torch.long, op)
    new_values = _empty(cap, (t_values.shape[0] + s_values.shape[0], *t_values.shape[1:]), t_values.dtype, op)
    del scaled
    a, b = index_values(self_), index_values(other)
    cat = torch.cat([a, b], 1) if a is not None and b is not None else None
    if not in_place:
        return _make(self_, new_indices, new_values, False, cat)
    # `alias_into_sparse(r_, ...)`: the tensor takes the new parts (`set_data` keeps its identity)
    new = _make(self_, new_indices, new_values, False, cat)
    with _NO_DISPATCH(), torch._C.DisableTorchFunction():
        self_.data = new
    self_._vs_indices = cat
    return self_


for _f in (aten.add.Tensor, aten.add_.Tensor, aten.sub.Tensor, aten.sub_.Tensor):
    OPS[_f] = _add


# ---- Tensor.new of a sparse tensor (SparseAdam's make_sparse) -------------------------------


def tensor_new(cap, func, args, kwargs):
    """`grad.new(indices, values, size)` (`legacy_sparse_tensor_generic_ctor_new`): a sparse tensor
    over the given indices and values, no copy; PyTorch's binding knows no `SparseMeta` type."""
    self_ = args[0] if args else None
    rest = args[1:]
    if not (_sparse(self_) and registered(self_)) or kwargs or len(rest) != 3:
        return NotImplemented
    indices, values, size = rest
    if not (isinstance(indices, torch.Tensor) and isinstance(values, torch.Tensor)):
        return NotImplemented
    return aten._sparse_coo_tensor_unsafe.default(indices, values, list(size))


# (registered for `Tensor.new` by `_legacy`, which takes its other forms)


# ---- sparse x dense products (torch.sparse.mm, the backward's S.t() @ grad) ----------------------


def spmm_buffer_bytes(nnz: int, n: int) -> int | None:
    """`cusparseSpMM_bufferSize` (CSR, `CUSPARSE_CSRMM_ALG1`) as `_csrmm2` allocates it: an H200's
    22 cases (fixtures/run/linalg_sparse) give 4 (ceil(nnz / 256) + 2) - 1 bytes for n >= 2 dense
    columns, whatever the rows, columns, real dtype or layout; one case of n = 1 gave 107 bytes at
    99,948 entries, too few to rule on (None)."""
    if n < 2:
        return None
    return 4 * (-(-nnz // 256) + 2) - 1


def _transpose(cap, func, args, kwargs):
    """`transpose` / `t` of a sparse COO tensor over two sparse dimensions (TensorShape.cpp): a
    clone (`clone_sparse`: values, then indices), then `sparse_transpose_`, which swaps the two
    index rows through a `zeros_like` row (nnz int64, freed) and marks the result uncoalesced."""
    t = args[0]
    if _compressed(t) and registered(t) and t.dim() == 2:
        # `transpose` of a 2-D CSR (CSC) matrix (`sparse_compressed_transpose`, TensorShape.cpp):
        # the CSC (CSR) matrix over the same indices and values, no allocation
        cap.ops += 1
        with _NO_DISPATCH():
            return func(*args, **kwargs)
    if not (_sparse(t) and registered(t)):
        return NotImplemented
    if func is aten.t.default:
        d0, d1 = 0, 1
    else:
        p = dict(zip(("self", "dim0", "dim1"), args, strict=False)) | kwargs
        d0, d1 = p["dim0"], p["dim1"]
    sd = t.sparse_dim()
    d0, d1 = d0 % max(t.dim(), 1), d1 % max(t.dim(), 1)
    if t.dim() < 2 or d0 >= sd or d1 >= sd:
        return NotImplemented
    out = _clone(cap, aten.clone.default, (t,), {})
    if d0 == d1:
        return out
    indices, values = parts(out)
    row = cap.malloc(indices.shape[1] * 8, "aten::zeros_like", "temporary")
    del row
    size = list(t.shape)
    size[d0], size[d1] = size[d1], size[d0]
    known = index_values(t)
    if known is not None:
        known = known.clone()
        known[[d0, d1]] = known[[d1, d0]]
    return _make(t, indices, values, False, known, size=size)


OPS[aten.t.default] = _transpose
OPS[aten.transpose.int] = _transpose


def _addmm_core(cap, t, sparse, dense):
    """`s_addmm_out_sparse_dense_cuda` (SparseCUDATensorMath.cu) into a new result, and its
    workers (SparseBlasLegacy.cpp, SparseCUDABlas.cpp): the result (`resize_` to m x n), the
    sparse operand coalesced where it is not, then (nnz > 0) `_to_csr_int`'s row offsets
    ((m + 1) int32) and row indices (nnz int32, freed), the column indices (nnz int32), the result's
    column-major copy unless it is one already, the dense operand's contiguous copy where neither
    of cuSPARSE's layouts fits, `cusparseSpMM_bufferSize`'s buffer (allocated and freed); the copies
    die, then the index arrays, then the coalesced operand (values, indices); `beta` scales or zeroes
    the result in place. nnz = 0: the result is `t * beta` over a one-element `scalar_tensor`. The
    H200's order (fixtures/run/linalg_sparse)."""
    op = "aten::_sparse_addmm"
    m, k = sparse.shape[0], sparse.shape[1]
    n = dense.shape[1]
    r = _empty(cap, (m, n), t.dtype, op)
    set_value(r, None)
    coalesced = None
    if not sparse.is_coalesced():
        coalesced = _coalesce(cap, aten._coalesce.default, (sparse,), {})
        sparse = coalesced
    indices, values = parts(sparse)
    nnz = values.shape[0]
    if nnz == 0:
        scalar = cap.malloc(r.element_size(), "aten::scalar_tensor", "temporary")
        del scalar
    else:
        esize = r.element_size()
        csr = cap.malloc((m + 1) * 4, op, "temporary")
        rows = cap.malloc(nnz * 4, op, "temporary")
        del rows
        cols = cap.malloc(nnz * 4, op, "temporary")
        column_major = r.stride(0) == 1 and r.stride(1) == r.size(0)
        r_copy = None if column_major else cap.malloc(m * n * esize, op, "temporary")
        ds, dz = dense.stride(), dense.shape
        fits = (ds[0] == 1 and ds[1] == dz[0]) or (ds[1] == 1 and ds[0] == dz[1]) or dense.is_contiguous()
        d_copy = None if fits else cap.malloc(dense.numel() * dense.element_size(), op, "temporary")
        nbytes = spmm_buffer_bytes(nnz, n)
        if nbytes is None or values.dtype.is_complex:
            cap.note_unmeasured(
                f"cuSPARSE SpMM's buffer ({m} x {k}, {nnz} entries, {n} columns, {values.dtype})"
            )
        else:
            buffer = cap.malloc(nbytes, op, "workspace")
            del buffer
        del d_copy, r_copy, cols, csr
    del indices, values, sparse
    if coalesced is not None:
        c_indices, c_values = parts(coalesced)
        del coalesced
        del c_values, c_indices
    return r


def _dense_operand(x) -> bool:
    return isinstance(x, torch.Tensor) and not _sparse(x) and x.dim() == 2 and registered(x)


def _sparse_operand(x) -> bool:
    return _sparse(x) and registered(x) and x.sparse_dim() == 2 and x.dense_dim() == 0


def _autocast_addmm_operands(cap, t, s, d):
    """The operands `_sparse_csr_addmm`'s `at::addmm` runs on: `_sparse_addmm` has no autocast
    kernel, so under the program's `torch.autocast("cuda")` the inner `addmm` reaches addmm's
    (lower precision): each floating operand of another dtype is cast, the last first (`mat2`,
    the CSR matrix by `_to_copy`: its values in the new dtype, then copies of its crow and column
    indices, then `self`), and the casts die as the op returns. The autograd node is
    `_sparse_addmm`'s, so backward multiplies by the uncast matrix. blind198/gp06's H200 history:
    the bfloat16 values (8,599,804 bytes), crow (2,400,008) and column (34,399,216) copies before
    the result, freed values, columns, crow after cuSPARSE's buffer."""
    from . import _autocast

    if not _autocast.PROGRAM_ON[0]:
        return t, s, d
    lower = torch.get_autocast_dtype("cuda")

    def cast(x):
        if not x.is_floating_point() or x.dtype in (lower, torch.float64):
            return x
        if x.layout is not _CSR:
            return _empty(cap, x.shape, lower, "aten::_to_copy")
        crow, col, values = parts(x)
        new_values = _empty(cap, values.shape, lower, "aten::_to_copy")
        new_crow = _empty(cap, crow.shape, crow.dtype, "aten::_to_copy")
        new_col = _empty(cap, col.shape, col.dtype, "aten::_to_copy")
        with _NO_DISPATCH():
            return aten._sparse_csr_tensor_unsafe(
                new_crow,
                new_col,
                new_values,
                list(x.shape),
                dtype=lower,
                layout=_CSR,
                device=torch.device("meta"),
            )

    d = cast(d)
    s = cast(s)
    return cast(t), s, d


def _sparse_addmm(cap, func, args, kwargs):
    """`_sparse_addmm(t, S, D, beta, alpha)` (`torch.sparse.mm`'s `_sparse_mm` and `torch.sparse.
    addmm`): `addmm_sparse_dense_cuda`, see `_addmm_core`."""
    names = ("self", "mat1", "mat2", "beta", "alpha")
    p = dict(zip(names, args, strict=False)) | kwargs
    t, s, d = p["self"], p["mat1"], p["mat2"]
    if _csr_operand(s) and _dense_operand(d) and registered(t) and t.layout is torch.strided:
        # `_sparse_csr_addmm` (SparseCsrTensorMath.cpp): `addmm(t, S, D, beta, alpha)`
        cap.ops += 1
        t, s, d = _autocast_addmm_operands(cap, t, s, d)
        return _csr_addmm(cap, s, d, t.dtype)
    if not (_sparse_operand(s) and _dense_operand(d) and registered(t)) or _sparse(t):
        return NotImplemented
    cap.ops += 1
    return _addmm_core(cap, t, s, d)


OPS[aten._sparse_addmm.default] = _sparse_addmm


def _mm(cap, func, args, kwargs):
    """`mm(S, D)` of a sparse COO matrix (`_sparse_mm`, SparseTensorMath.cpp): `zeros` of the
    result's shape (m x n in D's dtype), `_sparse_addmm` into a new result, then the zeros die. The
    backward of `torch.sparse.mm` takes it for D's gradient (`mm_mat2_backward`: `S.t().mm(grad)`).
    A CSR matrix's product: `_csr_mm`."""
    s, d = args[0], args[1]
    if _csr_operand(s) and _dense_operand(d):
        return _csr_mm(cap, s, d)
    if _csc(s) and registered(s) and s.dim() == 2 and _dense_operand(d):
        return _csc_mm(cap, s, d)
    if _bsr(s) and registered(s) and s.dim() == 2 and _dense_operand(d) and d.dim() == 2:
        return _bsr_mm(cap, s, d)
    if (
        _dense_operand(s)
        and s.dim() == 2
        and isinstance(d, torch.Tensor)
        and d.layout is _BSC
        and registered(d)
    ):
        return _dense_bsc_mm(cap, s, d)
    if _dense_operand(s) and _sparse_operand(d) and s.dim() == 2:
        return _dense_sparse_mm(cap, s, d)
    if _dense_operand(s) and _csr(d) and registered(d) and d.dim() == 2 and s.dtype == d.dtype:
        return _dense_csr_mm(cap, s, d)
    if not (_sparse_operand(s) and _dense_operand(d)):
        return NotImplemented
    cap.ops += 1
    t = _empty(cap, (s.shape[0], d.shape[1]), d.dtype, "aten::zeros")
    out = _addmm_core(cap, t, s, d)
    del t
    return out


def _view_or_copy(cap, t, shape, op: str):
    """`t.reshape(shape)`: a view where the strides allow one, else a contiguous copy (the copy is
    returned second, to be released by the caller)."""
    with _NO_DISPATCH():
        try:
            return t.view(shape), None
        except RuntimeError:
            pass
    copy = _empty(cap, tuple(t.shape), t.dtype, op)
    set_value(copy, None)
    with _NO_DISPATCH():
        return copy.view(shape), copy


def _bsr_mm(cap, a, d):
    """`mm(A, D)` of a BSR matrix and a dense one: `_sparse_csr_mm` (SparseCsrTensorMath.cpp) makes
    `zeros(m, n)` and `addmm`s into a new result (`addmm_out_sparse_compressed_cuda`: resized to
    m x n, the zeros copied in), then `block_sparse_mm` (sparse/cuda/SparseBlasImpl.cpp): see
    `_bsr_strided_mm`; the zeros die at the return."""
    if not _bsr_supported(a, d):
        return NotImplemented
    cap.ops += 1
    m, n = a.shape[0], d.shape[1]
    zeros = _empty(cap, (m, n), d.dtype, "aten::zeros")
    set_value(zeros, None)
    r = _empty(cap, (m, n), d.dtype, "aten::addmm")
    set_value(r, None)
    _bsr_strided_mm(cap, a, d, r)
    del zeros
    return r


def _bsr_supported(a, d) -> bool:
    """Whether `block_sparse_mm` (sparse/cuda/SparseBlasImpl.cpp) has a rule here for BSR `a` times
    dense `d`: float32, half or bfloat16 blocks of `d`'s dtype, which take Triton's kernel
    (`_bsr_triton`) or else the reference path, `_compressed_row_strided_addmm_out` (float64 and
    complex go to cuSPARSE's bsrmm: no rule here)."""
    _crow, _col, values = parts(a)
    dtype = d.dtype
    if values.dim() != 3 or values.dtype != dtype or d.dim() != 2:
        return False
    return dtype in (torch.float32, torch.float16, torch.bfloat16)


def _bsr_triton(a, d) -> bool:
    """Whether `_compressed_row_strided_addmm_out` hands BSR `a` times dense `d` to Triton's
    `bsr_dense_addmm` (registered for SparseCsrCUDA by torch.cuda's `_register_triton_kernels`
    where triton is installed, as with every CUDA wheel): `operands_support_triton_mm_kernel`
    (sparse/SparseBlasImpl.cpp) -- half, bfloat16 or float32 of one dtype, power-of-two blocks of
    16 or more, `d`'s columns a multiple of b0. Measured on an H100 (session 64,
    probes/pt63_ldl_and_bsr_mm_scratch_probe.py): float32 nnzb 1024 of 64 x 64 blocks times
    2048 x 8192 took Triton (out + 1024 bytes of scratch), times 2048 x 1000 the reference path."""
    b0, b1 = parts(a)[2].shape[1:]
    pow2 = not (b0 & (b0 - 1)) and not (b1 & (b1 - 1))
    return pow2 and b0 >= 16 and b1 >= 16 and d.shape[1] % b0 == 0


def _bsr_strided_mm(cap, a, d, result) -> None:
    """The product of BSR A and dense D into `result`: Triton's kernel where `_bsr_triton`, else
    `_compressed_row_strided_mm_out(A, D, result)` (sparse/SparseBlasImpl.cpp), which
    `block_sparse_mm` (sparse/cuda/SparseBlasImpl.cpp) runs for float32, float16 and bfloat16
    instead of cuSPARSE: D tiled to (k / b1, b1, 1, n) by `reshape` (a view where its strides
    allow, else a contiguous copy), the block rows each stored block meets gathered by
    `index_select` (nnzb x b1 x n), the pairwise block products by `matmul` (a bmm: nnzb x b0 x n,
    in float32; half and bfloat16 operands are first copied to float32, copies that die with the
    expression), the crow indices made COO (`_convert_indices_from_csr_to_coo`, 2 x nnzb), then
    `index_add_` into the zeroed result (a view of it; half and bfloat16: into a float32 `zeros`
    buffer copied back, which dies); the COO indices, the products and the gathered rows die at
    the return."""
    crow, col, values = parts(a)
    nnzb, b0, b1 = values.shape
    k = a.shape[1]
    n = d.shape[1]
    if nnzb == 0 or result.numel() == 0:
        return
    op = "aten::addmm"
    if _bsr_triton(a, d):
        # `bsr_dense_addmm` (torch/sparse/_triton_ops.py) writes the given result in place; its only
        # allocations are `left_alpha` and `right_alpha`, `dense.new_empty(())` each, expanded views
        # that die at the return (the H100's 1,024 bytes over the result)
        left = _empty(cap, (), d.dtype, op)
        right = _empty(cap, (), d.dtype, op)
        del left, right
        return
    half = d.dtype != torch.float32
    tiled, d_copy = _view_or_copy(cap, d, (k // b1, b1, 1, n), op)
    with _NO_DISPATCH():
        tiled = tiled.transpose(-3, -2)
    selected = cap.dispatch(aten.index_select.default, (tiled, -4, col), {})
    v, s = values, selected
    if half:
        v = cap.dispatch(aten._to_copy.default, (values,), {"dtype": torch.float32})
        s = cap.dispatch(aten._to_copy.default, (selected,), {"dtype": torch.float32})
    v3, v_copy = _view_or_copy(cap, v, (nnzb, b0, b1), op)
    s3, s_copy = _view_or_copy(cap, s, (nnzb, b1, n), op)
    pairwise = cap.dispatch(aten.bmm.default, (v3, s3), {})
    del v3, s3, v_copy, s_copy, v, s
    coo = _empty(cap, (2, nnzb), crow.dtype, "aten::_convert_indices_from_csr_to_coo")
    if half:
        promoted = _empty(cap, tuple(result.shape), torch.float32, "aten::zeros")
        del promoted
    del coo, pairwise, selected, tiled, d_copy


def _bsc_of(cap, s):
    """The BSR matrix a BSC one is the transpose of (`sparse_compressed_transpose`: the same
    indices, the blocks transposed as a view; no allocation)."""
    with _NO_DISPATCH():
        return s.transpose(-2, -1)


def _dense_bsc_mm(cap, d, s):
    """`mm(D, S)` of a dense matrix and a BSC one (`F.linear(x, W_bsr)` without bias: `x @ W.t()`):
    `_sparse_csr_mm` makes `zeros(m, n)` in D's options and `addmm`s into a new result;
    `addmm_out_sparse_csr` (sparse/cuda/SparseBlasImpl.cpp) computes the transpose,
    `block_sparse_mm(zeros.t(), S.t(), D.t(), ...)` into `result.t()` (`_bsr_strided_mm` with S^T
    the BSR matrix and D^T a column-major view); the zeros die at the return."""
    a = _bsc_of(cap, s)
    with _NO_DISPATCH():
        dt = d.transpose(-2, -1)
    if not _bsr_supported(a, dt):
        return NotImplemented
    cap.ops += 1
    m, n = d.shape[0], s.shape[1]
    zeros = _empty(cap, (m, n), d.dtype, "aten::zeros")
    set_value(zeros, None)
    r = _empty(cap, (m, n), d.dtype, "aten::addmm")
    set_value(r, None)
    with _NO_DISPATCH():
        rt = r.transpose(-2, -1)
    _bsr_strided_mm(cap, a, dt, rt)
    del rt, zeros
    return r


def _addmm_blocked(cap, func, args, kwargs):
    """`addmm(T, A, B, beta, alpha)` with a BSR A (dense B) or a BSC B (dense A): a new result
    (`addmm_sparse_compressed_dense`: resized to m x n, T broadcast and copied in), then
    `block_sparse_mm` (sparse/cuda/SparseBlasImpl.cpp; for dense @ BSC on the transposes): the
    product into the result (`_bsr_strided_mm`), then, beta not 0, `result.add_(T.mul(beta))`
    (`_compressed_row_strided_addmm_out`: the product, m x n, dies after the add). `F.linear(x,
    W_bsr, bias)` is `addmm(bias, x, W.t())`."""
    p = dict(zip(("self", "mat1", "mat2", "beta", "alpha"), args, strict=False)) | kwargs
    t, m1, m2 = p["self"], p["mat1"], p["mat2"]
    blocked_left = _bsr(m1) and registered(m1) and _dense_operand(m2)
    blocked_right = (
        isinstance(m2, torch.Tensor) and m2.layout is _BSC and registered(m2) and _dense_operand(m1)
    )
    if not (blocked_left or blocked_right) or not registered(t) or t.layout is not torch.strided:
        return NotImplemented
    if m1.dim() != 2 or m2.dim() != 2:
        return NotImplemented
    if blocked_left:
        a, d = m1, m2
    else:
        a = _bsc_of(cap, m2)
        with _NO_DISPATCH():
            d = m1.transpose(-2, -1)
    if not _bsr_supported(a, d) or t.dtype != d.dtype:
        return NotImplemented
    cap.ops += 1
    m, n = m1.shape[0], m2.shape[1]
    r = _empty(cap, (m, n), t.dtype, "aten::addmm")
    set_value(r, None)
    with _NO_DISPATCH():
        target = r if blocked_left else r.transpose(-2, -1)
    _bsr_strided_mm(cap, a, d, target)
    beta = p.get("beta", 1)
    if r.numel() and a.values().shape[0] and beta != 0 and not _bsr_triton(a, d):
        scaled = _empty(cap, (m, n), t.dtype, "aten::mul")
        del scaled
    del target
    return r


OPS[aten.addmm.default] = _addmm_blocked


def _dense_sparse_mm(cap, d, s):
    """`mm(D, S)` of a dense matrix and a sparse COO one (`_sparse_mm`, SparseTensorMath.cpp):
    `zeros` of the result's shape in D's dtype, then `_sparse_addmm(t^T, S^T, D^T)` -- S's
    transpose a clone with swapped index rows -- whose new result is returned transposed (a view)."""
    cap.ops += 1
    t = _empty(cap, (d.shape[0], s.shape[1]), d.dtype, "aten::zeros")
    set_value(t, None)
    st = _transpose(cap, aten.transpose.int, (s, -2, -1), {})
    with _NO_DISPATCH():
        tt, dt = t.transpose(-2, -1), d.transpose(-2, -1)
    r = _addmm_core(cap, tt, st, dt)
    del st, tt, dt
    with _NO_DISPATCH():
        out = r.transpose(-2, -1)
    del r, t
    return out


OPS[aten.mm.default] = _mm


# ---- sparse CSR matrices ----------------------------------------------------------------------


def _to_sparse_csr(cap, func, args, kwargs):
    """`coo_to_sparse_csr` (TensorConversions.cpp): `coalesce` (itself where coalesced), the crow
    indices from the first index row (`_convert_indices_from_coo_to_csr`: rows + 1 of the
    indices' dtype, no scratch), the column indices the second index row made contiguous (a view
    of the indices' storage where the row is contiguous), the values the coalesced values. The
    H200's blind89/ck06 allocates the crow indices alone (fixtures/run/sparse/csr_ck06_h200.json)."""
    t = args[0]
    dense_dim = kwargs.get("dense_dim", args[1] if len(args) > 1 else None)
    if registered(t) and t.layout is torch.strided and t.dim() == 2 and not dense_dim:
        return _dense_to_sparse_csr(cap, t)
    if not (_sparse(t) and registered(t)) or dense_dim is not None or t.sparse_dim() != 2 or t.dense_dim():
        return NotImplemented
    cap.ops += 1
    c = t if t.is_coalesced() else _coalesce(cap, aten._coalesce.default, (t,), {})
    indices, values = parts(c)
    op = "aten::_to_sparse_csr"
    crow = _empty(cap, (t.shape[0] + 1,), indices.dtype, op)
    set_value(crow, None)
    with _NO_DISPATCH():
        col = indices[1]
    if not col.is_contiguous():
        col = _empty(cap, col.shape, col.dtype, op)
    set_value(col, None)
    with _NO_DISPATCH():
        return aten._sparse_csr_tensor_unsafe(
            crow, col, values, list(t.shape), dtype=values.dtype, layout=_CSR, device=torch.device("meta")
        )


OPS[aten._to_sparse_csr.default] = _to_sparse_csr


def _dense_to_sparse_csr(cap, t):
    """`dense_to_sparse_compressed<SparseCsr>` (TensorConversions.cpp) of a dense matrix, its parts on
    the simulated GPU: the mask `t != 0`; its `nonzero()`, whose columns are the column and row
    indices (`_not_zero_mask_to_col_row_indices`: views, the column indices kept strided; the twin's
    count where the values are not carried: every element); the crow indices from the rows
    (`_convert_indices_from_coo_to_csr`, int64); the values `t.flatten(0, 1).index_select` of the
    flat mask's `nonzero` (`_mask_to_indices`), which dies there; then the CSR tensor over them. The
    H200's allocations, case by case: fixtures/run/sparse/dense_csr_h200.json."""
    cap.ops += 1
    m = t.shape[0]
    with cap._modes[1]:  # the parts come back to the mode
        mask = t != 0
        nz = mask.nonzero()
        cols, rows = nz.select(1, 1), nz.select(1, 0)
        crow = aten._convert_indices_from_coo_to_csr(rows, m, out_int32=False)
        mask_indices = mask.flatten().nonzero().flatten()
        values = t.flatten(0, 1).index_select(0, mask_indices)
        del mask_indices
    del nz, rows, mask
    with _NO_DISPATCH():
        return aten._sparse_csr_tensor_unsafe(
            crow, cols, values, list(t.shape), dtype=t.dtype, layout=_CSR, device=torch.device("meta")
        )


def _dense_to_sparse(cap, func, args, kwargs):
    """`dense_to_sparse` (SparseTensor.cpp) of a dense simulated tensor, its parts on the simulated
    GPU: `nonzero().transpose(0, 1)` (the twin's count where the values are not carried: every
    element); over all dims the indices a `clone` of it, over fewer (a hybrid tensor) the distinct
    columns of its first rows (`unique_dim`) made contiguous, while it lives on; the values
    `self.index(indices.chunk(...)).squeeze(0).clone()`; then the COO tensor over them, marked
    coalesced. With `layout=torch.sparse_csr`, `to_sparse_csr`'s parts (`_dense_to_sparse_csr`)."""
    t = args[0]
    sparse_dim = args[1] if len(args) > 1 else None
    layout = kwargs.get("layout")
    if _csr(t) and registered(t) and t.dim() == 2 and layout in (None, _COO) and sparse_dim in (None, 2):
        return _csr_to_coo(cap, t)
    if _sparse(t) and registered(t) and layout is _CSR and not kwargs.get("blocksize"):
        # `sparse_coo_to_sparse` (TensorConversions.cpp): to a CSR layout, `to_sparse_csr(dense_dim)`
        # (the backward of `to_sparse_coo` of a CSR tensor takes this path)
        extra = {"dense_dim": kwargs["dense_dim"]} if kwargs.get("dense_dim") is not None else {}
        return _to_sparse_csr(cap, aten._to_sparse_csr.default, (t,), extra)
    if _sparse(t) or not registered(t) or t.layout is not torch.strided or t.dim() == 0:
        return NotImplemented
    if layout is _CSR and t.dim() == 2 and not kwargs.get("blocksize") and not kwargs.get("dense_dim"):
        return _dense_to_sparse_csr(cap, t)  # TensorConversions.cpp's dense_to_sparse: to_sparse_csr
    if (sparse_dim is not None and not 0 < sparse_dim <= t.dim()) or layout not in (None, _COO):
        return NotImplemented
    if kwargs.get("dense_dim"):
        return NotImplemented
    sd = t.dim() if sparse_dim is None else sparse_dim
    cap.ops += 1
    with cap._modes[1]:  # the parts come back to the mode
        nz = t.nonzero().transpose(0, 1)
        if nz.shape[1] == 0:
            out = aten._sparse_coo_tensor_unsafe(
                torch.empty((sd, 0), dtype=torch.long, device=t.device),
                torch.empty((0, *t.shape[sd:]), dtype=t.dtype, device=t.device),
                t.shape,
            )
            return out._coalesced_(True)
        if sd == t.dim():
            indices = nz.clone()
        else:
            indices = torch.unique(nz.narrow(0, 0, sd), dim=1).contiguous()
        values = t[tuple(i.squeeze(0) for i in indices.chunk(indices.shape[0], 0))].clone()
        del nz
        out = aten._sparse_coo_tensor_unsafe(indices, values, t.shape)
        return out._coalesced_(True)


def _csr_to_coo(cap, t):
    """`sparse_compressed_to_sparse` (TensorConversions.cpp) of a CSR matrix: new COO indices from
    `_convert_indices_from_csr_to_coo(crow, col)` (2 x nnz of the indices' dtype), the values shared,
    the result marked coalesced (a CSR matrix is)."""
    cap.ops += 1
    crow, col, values = parts(t)
    indices = _empty(cap, (2, col.shape[0]), crow.dtype, "aten::_convert_indices_from_csr_to_coo")
    set_value(indices, None)
    return _make(t, indices, values, True)


OPS[aten._to_sparse.default] = _dense_to_sparse
OPS[aten._to_sparse.sparse_dim] = _dense_to_sparse


#: `cusparseSpMV_bufferSize` (CSR, `CUSPARSE_SPMV_ALG_DEFAULT`) as `addmv_out_sparse_csr` allocates
#: it, by (rows, columns, entries, values' dtype, indices' dtype): the H200's bytes where measured
#: (blind89/ck06's 300 products, fixtures/run/sparse/csr_ck06_h200.json); cuSPARSE documents no
#: formula
SPMV_BUFFER = {(2_250_000, 2_250_000, 11_244_000, torch.float64, torch.int64): 29_303}

#: `cusparseSpMM_bufferSize` (CSR, `CUSPARSE_SPMM_CSR_ALG2`) as SparseBlasImpl.cpp's `spmm`
#: allocates it, by (rows, columns, entries, dense columns, values' dtype, indices' dtype, whether
#: the dense operand is passed transposed): the H200's bytes where measured (blind89/ck06's 200
#: products, fixtures/run/sparse/csr_ck06_h200.json)
SPMM_BUFFER = {
    (2_250_000, 2_250_000, 11_244_000, 8, torch.float64, torch.int64, False): 3_748_007,
    # blind99/cu03's H200 history (LightGCN's normalised adjacency by 64-wide embeddings)
    (100_000, 100_000, 2_996_202, 64, torch.float32, torch.int64, False): 998_743,
    # blind140/ej02's per-op truth (Mult-VAE's fold-in users by the 600-wide encoder) and
    # validation/run/sparse_probe2.py's products and their transposes' in backward
    # (fixtures/run/sparse/sparse_probe2_h200.json): the same bytes either way
    (2_000, 41_140, 200_000, 600, torch.float32, torch.int64, False): 66_679,
    (2_000, 41_140, 199_782, 600, torch.float32, torch.int64, False): 66_607,
    (41_140, 2_000, 199_782, 600, torch.float32, torch.int64, False): 66_607,
    (1_024, 41_140, 130_890, 600, torch.float32, torch.int64, False): 43_639,
    (41_140, 1_024, 130_890, 600, torch.float32, torch.int64, False): 43_639,
    (64, 1_000, 447, 32, torch.float32, torch.int64, False): 159,
    (1_000, 64, 447, 32, torch.float32, torch.int64, False): 159,
    # blind198/gp06's H200 history and per-op truth (a GCN's normalised 300,000-node adjacency by
    # 256-wide features, float32 and, under bf16 autocast, its bfloat16 cast): the same bytes
    (300_000, 300_000, 4_299_902, 256, torch.float32, torch.int64, False): 1_433_311,
    (300_000, 300_000, 4_299_902, 256, torch.bfloat16, torch.int64, False): 1_433_311,
    # the H100's, session 62 (pt62_tunableop_and_csr_backward_probe: sampled_addmm's backward,
    # the masked gradient by k): the bytes of the column-major-result products of the same problems
    (4_096, 4_096, 130_555, 64, torch.float32, torch.int64, False): 43_527,
    (32_768, 32_768, 1_048_101, 64, torch.float32, torch.int64, False): 349_375,
    # kx69_blind309_workspaces_probe's H100 events (blind309/kx02's 120,000-node adjacency by 128-
    # and 16-wide features, forward and the backward's products): the same bytes either width
    (120_000, 120_000, 1_560_000, 128, torch.float32, torch.int64, False): 520_007,
    (120_000, 120_000, 1_560_000, 16, torch.float32, torch.int64, False): 520_007,
}


#: `cusparseSpMM_bufferSize` as `addmm_out_sparse_csr` allocates it for `mm(D, A)` of a dense and a
#: CSR matrix (`A.t()` made CSR, multiplied into the result's transpose: a column-major result), by
#: (A^T's rows, its columns, entries, dense columns, values' dtype, indices' dtype): the H100's
#: bytes where measured (session 62, pt62_tunableop_and_csr_backward_probe's `dense @ csr`, also
#: the second product of sampled_addmm's backward)
SPMM_COLUMN_MAJOR_BUFFER = {
    (4_096, 4_096, 130_555, 64, torch.float32, torch.int64): 43_527,
    (32_768, 32_768, 1_048_101, 64, torch.float32, torch.int64): 349_375,
}

#: `cusparseSDDMM_bufferSize` (CSR, `CUSPARSE_SDDMM_ALG_DEFAULT`) as SparseBlasImpl.cpp's
#: `sampled_addmm_out_sparse_csr` allocates it, after the result's values, by (rows, columns,
#: entries, inner size, dtype): the H100's bytes where measured (session 62,
#: pt62_tunableop_and_csr_backward_probe: one byte, allocated and freed, at both sizes)
SDDMM_BUFFER = {
    (4_096, 4_096, 130_555, 64, torch.float32): 1,
    (32_768, 32_768, 1_048_101, 64, torch.float32): 1,
}


def _csr_buffer(cap, table: dict, key: tuple, op: str, what: str) -> None:
    """cuSPARSE's buffer from the caching allocator for `op`, allocated and freed, where `table`
    has the problem's bytes; else `what` is named unmeasured."""
    nbytes = table.get(key)
    if nbytes is None:
        cap.note_unmeasured(what)
        return
    buffer = cap.malloc(nbytes, op, "workspace")
    del buffer


def _blas_row_major(t) -> bool:
    """`is_blas_compatible_row_major_order` (LinearAlgebraUtils.h) of a matrix."""
    return t.stride(1) == 1 and t.stride(0) >= max(1, t.shape[1])


def _blas_column_major(t) -> bool:
    """`is_blas_compatible_column_major_order` (LinearAlgebraUtils.h) of a matrix."""
    return t.stride(0) == 1 and t.stride(1) >= max(1, t.shape[0])


def _csr_operand(x) -> bool:
    return _csr(x) and registered(x) and x.dim() == 2


def _csr_mv(cap, func, args, kwargs):
    """`mv(A, x)` of a CSR matrix (Blas.cpp's `mv`: `empty` of the rows in x's options, then
    `addmv_` into it): `addmv_out_sparse_compressed_cuda` with beta 0 copies nothing; no entries
    zero the result; else SparseBlasImpl.cpp's `addmv_out_sparse_csr`: x's contiguous clone where
    it is not non-overlapping and dense, cuSPARSE SpMV's buffer (allocated and freed), then the
    clone dies. The H200's order (blind89/ck06)."""
    a, x = args[0], args[1]
    if not (_csr_operand(a) and registered(x) and not _sparse(x) and x.dim() == 1):
        return NotImplemented
    cap.ops += 1
    m, k = a.shape
    r = _empty(cap, (m,), x.dtype, "aten::mv")
    set_value(r, None)
    crow, _col, values = parts(a)
    nnz = values.shape[0]
    if nnz == 0:
        return r
    from ._tensor import non_overlapping_and_dense

    x_copy = None
    if not non_overlapping_and_dense(x):
        x_copy = cap.malloc(x.numel() * x.element_size(), "aten::clone", "temporary")
    what = f"cuSPARSE SpMV's buffer ({m} x {k}, {nnz} entries, {values.dtype}, {crow.dtype} indices)"
    _csr_buffer(cap, SPMV_BUFFER, (m, k, nnz, values.dtype, crow.dtype), "aten::mv", what)
    del x_copy
    return r


OPS[aten.mv.default] = _csr_mv


def _csr_mm(cap, a, d):
    """`mm(A, D)` of a CSR matrix and a dense one (`_sparse_csr_mm`, SparseCsrTensorMath.cpp):
    `zeros` of the result's shape, `addmm` of them (`_csr_addmm`), then the zeros die. The H200's
    order (blind89/ck06)."""
    cap.ops += 1
    zeros = _empty(cap, (a.shape[0], d.shape[1]), d.dtype, "aten::zeros")
    r = _csr_addmm(cap, a, d, d.dtype)
    del zeros
    return r


def _csr_addmm(cap, a, d, dtype):
    """`addmm(T, A, D)` of a CSR matrix A (`addmm_sparse_compressed_dense`): its result
    (`resize_output` to m x n, contiguous, taking T's values without an allocation); no entries
    zero it; else SparseBlasImpl.cpp's `spmm`: D's contiguous clone where it is neither BLAS row-
    nor column-major, cuSPARSE SpMM's buffer (allocated and freed), then the clone dies."""
    m, k = a.shape
    n = d.shape[1]
    r = _empty(cap, (m, n), dtype, "aten::addmm")
    set_value(r, None)
    crow, _col, values = parts(a)
    nnz = values.shape[0]
    if nnz and r.numel() and values.dtype != d.dtype:
        # `spmm` describes A, B and C each in its own dtype; cuSPARSE's SpMM takes A and B of one
        # type only, so `cusparseSpMM_bufferSize` fails (blind198/gp06 on the H200: a float32
        # CSR matrix's transpose by a bfloat16 gradient in backward, after its result was made)
        raise RuntimeError(
            "CUDA error: operation not supported when calling `cusparseSpMM_bufferSize( handle, opA, "
            "opB, &alpha_, descA.descriptor(), descB.unsafe_mutable_descriptor(), &beta_, "
            "descC.descriptor(), compute_type, algorithm, &buffer_size )`"
        )
    if nnz and r.numel():
        d_copy = None
        row_major = _blas_row_major(d)
        if not (row_major or _blas_column_major(d)):
            d_copy = cap.malloc(d.numel() * d.element_size(), "aten::clone", "temporary")
            row_major = True
        # the result is row-major: D is passed transposed where it is column-major
        key = (m, k, nnz, n, values.dtype, crow.dtype, not row_major)
        what = (
            f"cuSPARSE SpMM's buffer ({m} x {k}, {nnz} entries, {n} columns, {values.dtype}, "
            f"{crow.dtype} indices)"
        )
        _csr_buffer(cap, SPMM_BUFFER, key, "aten::mm", what)
        del d_copy
    return r


def _csc_mm(cap, a, d):
    """`mm(A, D)` of a CSC matrix (a CSR matrix's transpose: `mm_mat2_backward`'s `A.t().mm(grad)`
    of a CSR product) and a dense one: `_sparse_csr_mm` converts A `to_sparse_csr`
    (`sparse_compressed_to_flipped`, TensorConversions.cpp), then multiplies as `_csr_mm`, and the
    converted matrix dies. The conversion, in the H200's order (blind99/cu03's history): the nnz
    as a one-element tensor and its `cumsum` (CUB's scan storage; the tensor dies), the ccol
    offsets `add`ed (k) into an `empty` (k + 1) compressed index (the sum dies),
    `_convert_indices_from_csr_to_coo` (2 x nnz), the batch's `div` and `mul` (nnz each, both
    die), an `arange` (nnz), the stable `sort` (values, indices, its own int64 range and CUB's
    radix sort storage; the range, then the values die), `index_select` of the indices (2 x nnz)
    and of the values (nnz), the new crow indices (`_convert_indices_from_coo_to_csr`, m + 1)
    moved into `zeros` (m + 1) through a `sub` (m): the sum, then the first crow indices die; then
    the sort's indices, the arange, the COO indices, the compressed index and the cumsum."""
    cap.ops += 1
    csr, col, new_values, new_indices, crow = _csc_to_csr(cap, a)
    out = _csr_mm(cap, csr, d)
    # the converted matrix dies with `_sparse_csr_mm`: its values, column and crow indices
    del csr, col
    del new_values
    del new_indices
    del crow
    return out


def _csc_to_csr(cap, a):
    """`_csc_mm`'s conversion of CSC matrix `a` to CSR (see there), in the H200's order; returns the
    CSR matrix and its parts (column indices, values, the COO indices they view, crow indices) for
    the caller to release in that order."""
    from ._kernels import _cub

    op = "aten::_to_sparse_csr"
    ccol, _row, values = parts(a)
    m, k = a.shape
    nnz = values.shape[0]
    idx = ccol.element_size()
    wrapped = cap.malloc(idx, op, "temporary")
    offset = cap.malloc(idx, op, "temporary")
    _cub(cap, "scan", 1, idx, op, "scan")
    del wrapped
    summed = cap.malloc(k * idx, op, "temporary")
    compressed = cap.malloc((k + 1) * idx, op, "temporary")
    del summed
    coo = cap.malloc(2 * nnz * idx, op, "temporary")
    div = cap.malloc(nnz * idx, op, "temporary")
    mul = cap.malloc(nnz * idx, op, "temporary")
    del mul, div
    rng = cap.malloc(nnz * 8, op, "temporary")
    sorted_values = cap.malloc(nnz * idx, op, "temporary")
    sorted_indices = cap.malloc(nnz * 8, op, "temporary")
    sort_range = cap.malloc(nnz * 8, op, "temporary")
    if nnz > _kernels.SMALL_SORT:  # rows up to 4096 sort in place (sparse_probe2_h200.json)
        _cub(cap, "sort", nnz, idx, op, "radix sort")
    del sort_range, sorted_values
    new_indices = _empty(cap, (2, nnz), ccol.dtype, op)
    new_values = _empty(cap, (nnz,), values.dtype, op)
    first_crow = cap.malloc((m + 1) * idx, op, "temporary")
    crow = _empty(cap, (m + 1,), ccol.dtype, op)
    sub = cap.malloc(m * idx, op, "temporary")
    del sub, first_crow
    del sorted_indices, rng, coo, compressed, offset
    set_value(crow, None)
    set_value(new_indices, None)
    set_value(new_values, None)
    with _NO_DISPATCH():
        col = new_indices[1]
        csr = aten._sparse_csr_tensor_unsafe(
            crow, col, new_values, [m, k], dtype=values.dtype, layout=_CSR, device=torch.device("meta")
        )
    return csr, col, new_values, new_indices, crow


def _dense_csr_mm(cap, d, a):
    """`mm(D, A)` of a dense matrix and a CSR one (`_sparse_csr_mm`, SparseCsrTensorMath.cpp):
    `addmm(zeros(m, n), D, A)`, whose result (m x n) is resized and copied from the zeros
    (`addmm_out_sparse_compressed_cuda`), then `addmm_out_sparse_csr` (sparse/cuda/SparseBlasImpl.cpp)
    multiplies `A.t().to_sparse_csr()` (the CSC-to-CSR conversion `_csc_mm` runs) by `D.t()` into the
    result's transpose (cuSPARSE SpMM with a column-major result: its buffer allocated and freed
    where `SPMM_COLUMN_MAJOR_BUFFER` has its bytes, else named unmeasured);
    the converted matrix dies, then the zeros."""
    cap.ops += 1
    m, n = d.shape[0], a.shape[1]
    zeros = _empty(cap, (m, n), d.dtype, "aten::zeros")
    set_value(zeros, None)
    r = _empty(cap, (m, n), d.dtype, "aten::addmm")
    set_value(r, None)
    with _NO_DISPATCH():
        at = a.transpose(0, 1)
    csr, col, new_values, new_indices, crow = _csc_to_csr(cap, at)
    nnz = new_values.shape[0]
    if nnz and r.numel():
        key = (n, a.shape[0], nnz, m, new_values.dtype, crow.dtype)
        what = (
            f"cuSPARSE SpMM's buffer ({n} x {a.shape[0]}, {nnz} entries, {m} columns, {new_values.dtype}, "
            "column-major result)"
        )
        _csr_buffer(cap, SPMM_COLUMN_MAJOR_BUFFER, key, "aten::addmm", what)
    del csr, col
    del new_values
    del new_indices
    del crow, at
    del zeros
    return r


def _sampled_addmm(cap, func, args, kwargs):
    """`sparse_sampled_addmm(C, A, B)` of a CSR matrix and two dense ones on CUDA
    (`sparse_sampled_addmm_sparse_csr_cuda`, sparse/cuda/SparseBlas.cpp): the result `empty({0, 0})`
    (its compressed indices one int64), `resize_`d to C's entries and sizes
    (`SparseCsrTensorImpl::resize_`: the compressed indices grown to rows + 1, then the column
    indices and values), C copied into it; where A and B are not empty, cuSPARSE SDDMM's buffer
    (SparseBlasImpl.cpp's `sampled_addmm_out_sparse_csr`), allocated and freed after the values,
    where `SDDMM_BUFFER` has its bytes, else named unmeasured. Found by
    opinfo_sweep.py (GRAD=1, float32), where the twin stopped on it."""
    c, a, b = args[0], args[1], args[2]
    if not (_csr_operand(c) and registered(a) and registered(b) and a.dim() == 2 and b.dim() == 2):
        return NotImplemented
    m, n = c.shape
    if a.layout is not torch.strided or b.layout is not torch.strided or (a.shape[0], b.shape[1]) != (m, n):
        return NotImplemented
    if a.shape[1] != b.shape[0]:
        return NotImplemented
    cap.ops += 1
    op = "aten::sparse_sampled_addmm"
    _crow_c, _col_c, values_c = parts(c)
    nnz = values_c.shape[0]
    crow = _empty(cap, (1,), torch.int64, op)
    if m > 0:
        grown = _empty(cap, (m + 1,), torch.int64, op)
        del crow
        crow = grown
    kept = min(nnz, m * n)
    col = _empty(cap, (kept,), torch.int64, op)
    values = _empty(cap, (kept,), c.dtype, op)
    for t in (crow, col, values):
        set_value(t, None)
    if a.numel() and b.numel():
        what = f"cuSPARSE SDDMM's buffer ({m} x {n}, {nnz} entries, {a.shape[1]} inner, {c.dtype})"
        _csr_buffer(cap, SDDMM_BUFFER, (m, n, nnz, a.shape[1], c.dtype), op, what)
    with _NO_DISPATCH():
        return aten._sparse_csr_tensor_unsafe(
            crow, col, values, [m, n], dtype=c.dtype, layout=_CSR, device=torch.device("meta")
        )


OPS[aten.sparse_sampled_addmm.default] = _sampled_addmm
