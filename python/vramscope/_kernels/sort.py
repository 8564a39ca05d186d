"""Scans, sorts and sort-based kernels: CUB's temporary storage (`aten/src/ATen/cuda/cub.cuh`),
`sort`, `topk`, `unique`, `cumsum`/`cumprod`, `median`, `isin`, torchvision's `nms`."""

from __future__ import annotations

import math

import torch

from .. import _forward_ad as _fad
from .. import _tensor
from .._tensor import assumed, registered, set_value, value
from .._tensor import non_overlapping_and_dense as _non_overlapping_and_dense
from .reduce import reduce_scratch
from .registry import AFTER, DISPATCH, FUNCTIONS, NAMED_DISPATCH, SCRATCH_UNMODELLED

aten = torch.ops.aten

#: `sort_cuda_kernel`'s refusal (cuda/Sort.cpp)
SORT_OF_COMPLEX = "Sort currently does not support complex dtypes on CUDA."


# ---- scans, sorts and sort-based kernels (CUB) ----------------------------------------


def _cub(cap, kind: str, n: int, t_bytes: int, op: str, what: str, **kw) -> None:
    """CUB's temporary storage, allocated and freed inside `CUB_WRAPPER` (ATen cuda/cub.cuh);
    named as unmeasured where the twin has no size for it."""
    nbytes = cap.device.cub_scratch(kind, n, t_bytes, **kw) if n < 2**30 else None
    if nbytes is None:
        cap.note_unmeasured(f"CUB's storage for the {what} of {n} items ({op})")
        return
    tmp = cap.malloc(nbytes, op, "workspace")
    del tmp


def _scan(cap, func, call, outs):
    """`cumsum`/`cumprod` (ReduceOps.cpp `impl_func_cum_ops`, cuda/ScanUtils.cuh `scan_dim`): the
    input cast to the result's dtype when it differs (`self.to(result.scalar_type())`), else made
    contiguous; when its numel is the scanned dim's size, `cuda::cub::inclusive_scan` over it (a
    floating or complex `cumsum` under deterministic algorithms: `inclusive_deterministic_scan`).
    Other shapes scan in PyTorch's own kernels, with no scratch."""
    (args, kw) = call
    x = args[0]
    if not registered(x) or x.dim() == 0 or x.numel() == 0:
        return
    out = outs[0] if isinstance(outs, (list, tuple)) else outs
    dim = (args[1] if len(args) > 1 else kw["dim"]) % x.dim()
    op = func._schema.name
    copy = None
    if out.dtype != x.dtype or not x.is_contiguous():
        copy = cap.malloc(x.numel() * out.element_size(), op, "temporary")
    if x.numel() == x.shape[dim]:
        sums = func in (aten.cumsum.default, aten.cumsum_.default)
        if (
            sums
            and torch.are_deterministic_algorithms_enabled()
            and (out.is_floating_point() or out.is_complex())
        ):
            # torch 2.11's `inclusive_deterministic_scan` (ATen cuda/cub.cuh) in place of CUB's: one
            # partial sum per block, a block per tile of 16 items a thread (512, 256 or 128
            # threads for items under 8, under 16, of 16 bytes or more), at most one per SM (found
            # by blind286 probing)
            size = out.element_size()
            threads = 128 if size >= 16 else 256 if size >= 8 else 512
            blocks = min(cap.device.multi_processor_count, -(-x.numel() // (threads * 16)))
            agg = cap.malloc(blocks * size, op, "temporary")
            del agg
        else:
            _cub(cap, "scan", x.numel(), out.element_size(), op, "scan")
    del copy


for _f in (aten.cumsum.default, aten.cumprod.default, aten.cumsum_.default, aten.cumprod_.default):
    AFTER[_f] = _scan


def _scan_own_kernels(cap, func, call, outs):
    """`cummax`/`cummin` (cuda/ScanKernels.cpp `cummax_helper_cuda`, ScanUtils.cuh
    `scan_dim_with_indices`) and `logcumsumexp` (`_logcumsumexp_out_cuda`, `scan_dim`):
    `self.expect_contiguous()`, a copy of an input that is not contiguous, after the results (the
    contiguous `at::empty`s) and freed at the return; a 1-d `logcumsumexp` is
    `cuda::cub::inclusive_scan` over it (CUB's storage, as a 1-d `cumsum`'s; the deterministic scan
    is for sums only). Nothing for a 0-dim or empty input (a `fill_` or `zero_`)."""
    (args, kw) = call
    x = args[0]
    if not registered(x) or x.dim() == 0 or x.numel() == 0:
        return
    op = func._schema.name
    copy = None if x.is_contiguous() else cap.malloc(x.numel() * x.element_size(), op, "temporary")
    dim = (args[1] if len(args) > 1 else kw["dim"]) % x.dim()
    if func is aten.logcumsumexp.default and x.numel() == x.shape[dim]:
        _cub(cap, "scan", x.numel(), x.element_size(), op, "scan")
    del copy


for _f in (aten.cummax.default, aten.cummin.default, aten.logcumsumexp.default):
    AFTER[_f] = _scan_own_kernels


def _searchsorted(cap, func, call, outs):
    """`searchsorted_out_cuda` (cuda/Bucketization.cu; `bucketize` calls it with its boundaries):
    after the result, where the input, the boundaries or the sorter is not contiguous or the input's
    dtype is not the boundaries', `searchsorted_maybe_trim_input_tensors` (BucketizationUtils.h)
    makes contiguous copies of those that are not (input, boundaries, sorter), then converts the
    input and the boundaries that differ from their common dtype (`.to`, the copy it replaces freed
    after); all die at the return, the sorter's first. Nothing for an empty input (blind115/dk03's
    H200 per-op truth: `bucketize` of a bfloat16 (14, 32) input by float32 boundaries, the input made
    float32, 1,792 bytes beside the result)."""
    (args, kw) = call
    if func is aten.bucketize.Tensor:
        x, bnd, sorter = args[0], args[1], None
    else:
        bnd, x = args[0], args[1]
        sorter = kw.get("sorter")
    if not registered(x) or not isinstance(bnd, torch.Tensor) or x.numel() == 0:
        return
    sorter_dense = sorter is None or sorter.is_contiguous()
    if x.is_contiguous() and bnd.is_contiguous() and x.dtype == bnd.dtype and sorter_dense:
        return
    op = func._schema.name
    trimmed = {}
    for name, t in (("input", x), ("boundaries", bnd), ("sorter", sorter)):
        if t is not None and not t.is_contiguous():
            trimmed[name] = cap.malloc(t.numel() * t.element_size(), op, "temporary")
    if x.dtype != bnd.dtype:
        common = torch.result_type(bnd, x)
        for name, t in (("input", x), ("boundaries", bnd)):
            if common != t.dtype:
                converted = cap.malloc(t.numel() * common.itemsize, op, "temporary")
                trimmed[name] = converted
                del converted
    for name in ("sorter", "boundaries", "input"):
        trimmed.pop(name, None)


for _f in (aten.searchsorted.Tensor, aten.bucketize.Tensor):
    AFTER[_f] = _searchsorted


#: `should_use_small_sort` (cuda/Sort.cpp): rows up to this length sort in place in one kernel
SMALL_SORT = 4096


def _sort(cap, func, call, outs):
    """`sort` (cuda/Sort.cpp `sort_stable_kernel`, cuda/SortStable.cu) of a contiguous input along
    its last dim into fresh outputs. Rows of up to 4096 sort in place, with an int64 index row
    beside them. Longer rows: one segment goes to `cuda::cub::radix_sort_pairs` of its keys with an
    int64 `arange` as values, on every key bit; 2 to 127 segments to
    `segmented_sort_pairs_by_full_sort`: two `int2` (index, segment) buffers, a pair sort of all
    keys with them as values (its keys out in a temporary), then a keys-only sort of the pairs on
    the segment bits; 128 segments or more to `segmented_sort_pairs`. Measured on the H200
    (`validation/run/sweeps/scratch_sweep.py`, blind9/i06). Rows of a million or more sort one
    segment at a time as a single segment does (`nsort >= 1000000`)."""
    (args, kw) = call
    x = args[0]
    if not registered(x) or x.numel() == 0:
        return
    if x.is_complex() and x.dim() > 0:
        # `sort_cuda_kernel` (cuda/Sort.cpp), after the structured outputs; a 0-dim input never
        # reaches it (`sort_stable_out`)
        raise RuntimeError(SORT_OF_COMPLEX)
    op = func._schema.name
    dim = kw.get("dim", -1)
    for a in args[1:]:
        if isinstance(a, int) and not isinstance(a, bool):
            dim = a
            break
    n = x.shape[dim % x.dim()] if x.dim() else 1
    indices = outs[1] if isinstance(outs, (list, tuple)) and len(outs) > 1 else None
    if x.dim() and indices is not None and value(indices) is None:
        # a permutation of 0..n-1 along `dim` whatever the values (`_capture._count_ranks`)
        _tensor.set_fact(indices, ("perm", dim % x.dim()))
    if n <= SMALL_SORT:
        row = cap.malloc(n * 8, op, "temporary")
        del row
        return
    segments = x.numel() // n
    if x.dim() == 0:
        cap.note_unmeasured(f"the sort of {tuple(x.shape)} along {dim} ({op})")
        return
    d = dim % x.dim()
    key = x.element_size()
    # `sort_cuda_kernel` (cuda/Sort.cpp): an input not dense with stride 1 along `dim` is copied
    # into `infer_dense_strides_dim_last`'s layout; a values (indices) output of other strides gets
    # a temporary of that layout, copied back after the sort; all die in reverse (blind118/dn03's
    # H200 history: `torch.quantile` of (1, 64, 65536) along its non-contiguous last dim)
    dense = _non_overlapping_and_dense(x) and x.stride(d) == 1
    strides = tuple(x.stride()) if dense else _dense_strides_dim_last(x, d)
    tmps = []
    if not dense:
        tmps.append(cap.malloc(x.numel() * key, op, "temporary"))
    values, indices = (outs[0], outs[1]) if isinstance(outs, (list, tuple)) else (outs, None)
    if values is not None and tuple(values.stride()) != strides:
        tmps.append(cap.malloc(x.numel() * key, op, "temporary"))
    if indices is not None and tuple(indices.stride()) != strides:
        tmps.append(cap.malloc(x.numel() * 8, op, "temporary"))
    _stable_sort_kernel(cap, x, n, segments, key, op)
    while tmps:
        tmps.pop()


def _dense_strides_dim_last(x, d: int) -> tuple:
    """`infer_dense_strides_dim_last` (cuda/Sort.cpp): `d` innermost, the other dims ordered by
    their strides (largest outermost), contiguous over that order."""
    ndim = x.dim()
    order = list(range(ndim))
    order[d], order[-1] = order[-1], order[d]
    head = sorted(order[:-1], key=lambda i: -x.stride(i))
    order = [*head, order[-1]]
    out = [0] * ndim
    step = 1
    for i in reversed(order):
        out[i] = step
        step *= x.shape[i]
    return tuple(out)


def _stable_sort_kernel(cap, x, n: int, segments: int, key: int, op: str) -> None:
    """`launch_stable_sort_kernel` (cuda/SortStable.cu) of `x`'s layout made dense along the dim:
    batches of `min(numel, INT_MAX) // n` whole rows, each sorted by the path its segment count
    picks."""
    total = x.numel()
    nbatch = (min(total, 2**31 - 1) // n) * n
    while total > 0:
        batch = min(total, nbatch)
        _sort_batch(cap, n, batch // n, batch, key, op)
        total -= batch


def _sort_batch(cap, n: int, segments: int, total: int, key: int, op: str) -> None:
    """One batch of `launch_stable_sort_kernel`: `segments` rows of `n`, `total` keys."""
    if segments == 1 or n >= 1_000_000:
        # `segmented_sort_large_segments`: the int64 `0..n` row (a `DeviceArray`), then one
        # `radix_sort_pairs` of n keys a segment, each with its own CUB storage (blind118/dn04's H200
        # record: (64, 1000000) fp16, 65 allocations beyond the outputs)
        rng = cap.malloc(n * 8, op, "temporary")
        for _ in range(segments):
            _cub(cap, "sort", n, key, op, "radix sort")
        del rng
        return
    if segments >= 128:
        # `segmented_sort_pairs`: the int64 reverse indices, then CUB's DeviceSegmentedRadixSort
        # storage: alternate keys and int64 values, each 256-aligned, and 255 bytes of alignment
        # slack (`AliasTemporaries`); blind9/i06's H200 record: 5 x 256 MiB + 255 bytes at 8192 x 8192
        reverse = cap.malloc(total * 8, op, "temporary")
        align = lambda b: (b + 255) // 256 * 256  # noqa: E731
        storage = cap.malloc(align(total * key) + align(total * 8) + 255, op, "workspace")
        del storage, reverse
        return
    index_segment = cap.malloc(total * 8, op, "temporary")
    index_segment2 = cap.malloc(total * 8, op, "temporary")
    keys_out = cap.malloc(total * key, op, "temporary")
    _cub(cap, "sort", total, key, op, "radix sort")
    del keys_out
    segment_bits = max(1, math.ceil(math.log2(segments)))
    _cub(cap, "sort", total, 8, op, "radix sort", value_bytes=0, end_bit=segment_bits)
    del index_segment2, index_segment


for _f in (aten.sort.default, aten.sort.stable):
    AFTER[_f] = _sort


def _multiblock_topk(slices: int, n: int) -> bool:
    """`should_use_multiblock` (cuda/TensorTopK.cu, CUB with scan-by-key)."""
    return (
        (slices <= 20 and n >= 20000)
        or (20 < slices <= 40 and n >= 10000)
        or (40 < slices <= 80 and n >= 8000)
        or (80 < slices < 200 and n >= 5000)
        or (200 <= slices < 800 and n >= 3000)
        or (800 <= slices <= 4000 and n >= 800)
        or (slices > 4000 and n >= 400)
    )


def _topk(cap, func, call, outs):
    """`topk` (cuda/TensorTopK.cu) into its fresh outputs: a non-contiguous input copied; slices
    that `should_use_multiblock` picks go to `mbtopk::launch`, whose buffers (k-th values, k to find,
    desired bits, per-block digit counts, digit sums, within-k and k-th counts) live through two
    `cuda::cub::inclusive_sum_by_key` calls over the blocks; its blocks follow
    `get_items_per_thread` (40 registers a thread, 256 threads a block). A single block a slice
    allocates nothing. `sorted` results of up to 4096 sort in place; longer ones
    (TensorTopK.cpp) are sorted by `values.sort(dim, largest)` into new indices and values, then
    `indices.gather(dim, sortedIndices)`, all freed at the return. As the H200's sweep lists them
    (`validation/run/sweeps/topk_isin_sweep.py`)."""
    (args, kw) = call
    x = args[0]
    if not registered(x) or x.numel() == 0:
        return
    op = func._schema.name
    k = args[1] if len(args) > 1 else kw["k"]
    dim = args[2] if len(args) > 2 else kw.get("dim", -1)
    largest = args[3] if len(args) > 3 else kw.get("largest", True)
    is_sorted = args[4] if len(args) > 4 else kw.get("sorted", True)
    n = x.shape[dim % x.dim()] if x.dim() else 1
    slices = x.numel() // n
    copy = None if x.is_contiguous() else cap.malloc(x.numel() * x.element_size(), op, "temporary")
    if _multiblock_topk(slices, n):
        blocks_per_mp = min(65536 // (40 * 256), 32)  # sm_80 / sm_90: 64K registers, 32 blocks an SM
        items = max(4, min(-(-n * slices // (cap.device.multi_processor_count * blocks_per_mp * 256)), 64))
        blocks = slices * -(-n // (items * 256))
        radix = 8 if x.element_size() == 8 else 4
        sizes = [slices * x.element_size(), 2 * slices * 4, 2 * slices * radix, blocks * 256 * 2]
        sizes += [slices * 256 * 4, blocks * 4, blocks * 4]
        buffers = [cap.malloc(b, op, "workspace") for b in sizes]
        for _ in range(2):
            _cub(cap, "scanbykey", blocks, 4, op, "scan by key")
        while buffers:
            buffers.pop()
    values = outs[0]
    if is_sorted and k > SMALL_SORT and registered(values):
        sorted_indices = cap.malloc(values.numel() * 8, op, "temporary")
        sorted_values = cap.malloc(values.numel() * values.element_size(), op, "temporary")
        _sort(cap, aten.sort.default, ((values, dim, largest), {}), None)
        gathered = cap.malloc(values.numel() * 8, "aten::gather", "temporary")
        del gathered, sorted_values, sorted_indices
    del copy


AFTER[aten.topk.default] = _topk
SCRATCH_UNMODELLED.discard("aten::topk")


for _name in ("aten::sort", "aten::cumsum", "aten::index_put_", "aten::_index_put_impl_"):
    SCRATCH_UNMODELLED.discard(_name)


def _unique_cub(cap, x, consecutive: bool, inverse: bool, counts: bool, op: str):
    """`unique_cuda_template` / `UniqueCub` (`cuda/UniqueCub.cu`) for a non-bool input: the input
    made contiguous, the sorted copy and CUB's radix sort (with the `arange` and sorted indices for
    an inverse; nothing for `unique_consecutive`), then `compute_unique`: the inverse (its int64
    scan of an int buffer), `data_out` of every item (resized, not reallocated, to the unique
    count), the 8-byte length, counts of every item with `run_length_encode`, else
    `cuda::cub::unique`; the locals die in that order (the H200's selection sweep). The unique
    count comes from the values where the twin carries them, else every item is taken as unique
    (the largest result), with a warning."""
    n, es = x.numel(), x.element_size()
    v = value(x)
    if v is not None and assumed(x):
        # values computed over zeros standing in for values the twin does not carry (indices taken
        # from a tensor without them: blind198/gp02's seeds before `randperm` carried its values):
        # the count goes on from them, the user is told, as `nonzero_count` does
        from .._capture import _user_site

        site = _user_site()
        cap.warn_once(
            "assumed-unique:" + site,
            f"{site}: {op} of a CUDA tensor of {tuple(x.shape)} counts distinct values the twin computed "
            "over zeros standing in for values it does not carry",
        )
    if v is not None:
        if consecutive:
            res = torch.unique_consecutive(v, return_inverse=True, return_counts=True)
        else:
            res = torch.unique(v, sorted=True, return_inverse=True, return_counts=True)
        n_out = res[0].numel()
    else:
        from .._capture import _user_site

        res = None
        n_out = n
        site = _user_site()
        cap.warn_once(
            "unique:" + site,
            f"{site}: {op} of a CUDA tensor of {tuple(x.shape)} needs its values, which the twin does not "
            "compute: it takes every item as unique (the largest result; its buffers are the same)",
        )
    scratch = lambda kind, **kw: cap.device.cub_scratch(kind, n, es, **kw)  # noqa: E731

    def cub(nbytes, what):
        if nbytes is None:
            cap.note_unmeasured(f"CUB's storage for the {what} of {n} items ({op})")
        elif nbytes:
            tmp = cap.malloc(nbytes, op, "workspace")
            del tmp

    copy = None if x.is_contiguous() else cap.malloc(n * es, op, "temporary")
    sorted_ = sorted_indices = None
    if not consecutive:
        sorted_ = cap.malloc(n * es, op, "temporary")
        if not inverse:
            cub(scratch("sort", value_bytes=0), "radix sort")
        else:
            rng = cap.malloc(n * 8, "aten::arange", "temporary")
            sorted_indices = cap.malloc(n * 8, op, "temporary")
            cub(scratch("sort", value_bytes=8), "radix sort")
            del rng
    inv_out = None
    if inverse:
        inv_out = cap.track(torch.empty(x.shape, dtype=torch.long, device="meta"), op)
        loc = cap.malloc(n * (4 if consecutive else 8), op, "temporary")
        cub(cap.device.cub_scratch("sumscan", n, 4), "inverse's scan")
        del loc
    else:
        inv_out = cap.track(torch.empty((0,), dtype=torch.long, device="meta"), op)
    # resized to the unique count, keeping the storage of every item
    data_out = cap.track(torch.empty((n,), dtype=x.dtype, device="meta").resize_((n_out,)), op)
    length = cap.malloc(8, op, "temporary")
    if counts:
        counts_out = cap.track(torch.empty((n,), dtype=torch.long, device="meta").resize_((n_out,)), op)
        cub(cap.device.cub_scratch("encode", n, es), "run-length encoding")
    else:
        counts_out = cap.track(torch.empty((0,), dtype=torch.long, device="meta"), op)
        cub(cap.device.cub_scratch("unique", n, es), "unique selection")
    del length, sorted_indices, sorted_, copy
    if res is not None:
        set_value(data_out, res[0])
        if inverse:
            set_value(inv_out, res[1])
        if counts:
            set_value(counts_out, res[2])
    return data_out, inv_out, counts_out


def _unique2(cap, func, args, kwargs):
    names = ("self", "sorted", "return_inverse", "return_counts")
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a["self"]
    if not registered(x) or x.dtype == torch.bool or x.numel() == 0 or x.numel() > 2**31 - 1:
        return NotImplemented
    cap.ops += 1
    return _unique_cub(
        cap, x, False, a.get("return_inverse", False), a.get("return_counts", False), "aten::_unique2"
    )


def _unique_consecutive(cap, func, args, kwargs):
    names = ("self", "return_inverse", "return_counts", "dim")
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a["self"]
    if (
        not registered(x)
        or a.get("dim") is not None
        or x.dtype == torch.bool
        or x.numel() == 0
        or x.numel() > 2**31 - 1
    ):
        return NotImplemented
    cap.ops += 1
    return _unique_cub(
        cap,
        x,
        True,
        a.get("return_inverse", False),
        a.get("return_counts", False),
        "aten::unique_consecutive",
    )


def _unique(cap, func, args, kwargs):
    """`_unique` (cuda/Unique.cu `_unique_cuda`): `unique_cuda_template` without counts."""
    names = ("self", "sorted", "return_inverse")
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a["self"]
    if not registered(x) or x.dtype == torch.bool or x.numel() == 0 or x.numel() > 2**31 - 1:
        return NotImplemented
    cap.ops += 1
    data, inverse, _counts = _unique_cub(
        cap, x, False, a.get("return_inverse", False), False, "aten::_unique"
    )
    return data, inverse


DISPATCH[aten._unique2.default] = _unique2


def _unique_dim(cap, func, args, kwargs):
    """`unique_dim` of a tensor whose values the twin does not carry: every slice taken as unique (the
    largest result), with a warning, where a CPU run over stand-in zeros would give one slice. Its
    outputs as `unique_dim_cuda_template` (cuda/Unique.cu) makes them, `compute_unique`'s inverse and
    counts, then `index_select`'s result; thrust's sort and unique storage is not modelled."""
    names = ("self", "dim", "sorted", "return_inverse", "return_counts")
    a = dict(zip(names, args, strict=False)) | kwargs
    x = a["self"]
    if not registered(x) or (value(x) is not None and not assumed(x)) or x.dim() == 0:
        return NotImplemented
    from .._capture import _user_site

    dim = a["dim"] % x.dim()
    n = x.shape[dim]
    site = _user_site()
    cap.warn_once(
        "unique:" + site,
        f"{site}: unique(dim={dim}) of a CUDA tensor of {tuple(x.shape)} needs its values, which the twin "
        "does not compute: it takes every slice as unique (the largest result)",
    )
    cap.note_unmeasured("aten::unique_dim (thrust's sort and unique storage)")
    cap.ops += 1
    op = "aten::unique_dim"
    inverse = cap.track(
        torch.empty(n if a.get("return_inverse") else 0, dtype=torch.int64, device="meta"), op
    )
    counts = cap.track(torch.empty(n if a.get("return_counts") else 0, dtype=torch.int64, device="meta"), op)
    out = cap.track(torch.empty(x.shape, dtype=x.dtype, device="meta"), op)
    return out, inverse, counts


DISPATCH[aten.unique_dim.default] = _unique_dim
DISPATCH[aten._unique.default] = _unique
DISPATCH[aten.unique_consecutive.default] = _unique_consecutive


def _median_all(cap, func, args, kwargs):
    """`median()` without a dim on CUDA: `median_impl` (cuda/Sorting.cpp) sorts `self.flatten()`
    (the indices die with the statement), then returns `where(sorted[-1].isnan(), sorted[-1],
    sorted[k])`; `sorted` dies at the return (blind111/dg06's H200 record of a (4, 100) float32
    median: 5 allocations, 8,005 bytes)."""
    x = args[0]
    if kwargs or len(args) != 1 or not registered(x) or x.numel() == 0:
        return NotImplemented
    cap.ops += 1
    with cap._modes[1]:  # the parts come back to the mode
        values = torch.sort(x.flatten())[0]
        out = torch.where(values[-1].isnan(), values[-1], values[(x.numel() - 1) // 2])
        del values
    return out


DISPATCH[aten.median.default] = _median_all


def _median_dim(cap, func, args, kwargs):
    """`median(dim)` / `nanmedian(dim)` on CUDA: `median_with_indices_impl` (cuda/Sorting.cpp), after
    its `alertNotDeterministic`, takes `in = self.contiguous()` before it resizes the `at::empty({0})`
    values and indices, the copy freed at the return; `gatherMedian` reads it in place (no sort)."""
    x = args[0]
    if kwargs or not registered(x) or x.dim() == 0 or x.numel() == 0 or x.is_contiguous():
        return NotImplemented
    if (
        torch.are_deterministic_algorithms_enabled()
        and not torch.is_deterministic_algorithms_warn_only_enabled()
    ):
        return NotImplemented  # it raises before the copy
    cap.ops += 1
    op = func._schema.name
    copy = cap.malloc(x.numel() * x.element_size(), op, "temporary")
    values, indices = func(*args)
    out = (cap.track(values, op), cap.track(indices, op))
    del copy
    return out


DISPATCH[aten.median.dim] = _median_dim


def _mode(cap, func, call, outs):
    """`mode(dim)` on CUDA (cuda/TensorModeKernel.cpp `mode_kernel_impl`), after the resized values
    and indices: slices of one item are copied; otherwise `self.transpose(dim, -1).contiguous()`, a
    copy where the sorted dimension is not innermost and dense, freed at the return, and slices of
    up to 2,048 items run the fused kernel (blind218/hj01's H200 per-op truth: `mode(0)` of a (16, 64)
    int64, one 8,192-byte copy beside the outputs); longer slices take thrust's sort, not modelled."""
    (args, kw) = call
    x = args[0]
    if not registered(x) or x.numel() == 0 or x.dim() == 0:
        return
    dim = (args[1] if len(args) > 1 else kw.get("dim", -1)) % x.dim()
    n = x.shape[dim]
    if n == 1:
        return
    op = func._schema.name
    transposed = x.transpose(dim, x.dim() - 1)
    copy = None if transposed.is_contiguous() else cap.malloc(x.numel() * x.element_size(), op, "temporary")
    if n > 2048:
        cap.note_unmeasured(f"{op}'s sort of slices of {n} items (launch_apply_mode_kernel)")
    del copy


AFTER[aten.mode.default] = _mode
DISPATCH[aten.nanmedian.dim] = _median_dim


def _kthvalue(cap, func, args, kwargs):
    """`kthvalue_out_cuda` (cuda/Sorting.cpp) passes `self.contiguous()` to its impl ("expects
    contiguous in input `self`"), a copy of a strided input made before the impl resizes the
    `at::empty({0})` values and indices (CompositeExplicitAutograd's `kthvalue`), freed at the
    return."""
    x = args[0]
    if not registered(x) or x.is_contiguous():
        return NotImplemented
    cap.ops += 1
    op = func._schema.name
    copy = cap.malloc(x.numel() * x.element_size(), op, "temporary")
    values, indices = func(*args, **kwargs)
    out = (cap.track(values, op), cap.track(indices, op))
    del copy
    return out


DISPATCH[aten.kthvalue.default] = _kthvalue


#: torchvision's `threadsPerBlock` in csrc/ops/cuda/nms_kernel.cu: one 64-bit mask word per 64 boxes
NMS_BLOCK = 64


def _nms(cap, func, args, kwargs):
    """torchvision's `nms_kernel` (csrc/ops/cuda/nms_kernel.cu): the scores sorted descending (the
    sorted values die at once, the order is kept), the boxes gathered in that order, an int64 mask
    of n x ceil(n / 64) words, a bool `keep` of n filled on the device (`gather_keep_from_mask`),
    then `order.masked_select(keep)`; `keep`, the mask, the gathered boxes and the order die at the
    return (blind21/u03's H200 memory history). How many boxes survive depends on their values:
    where the twin does not carry them, `masked_select` keeps all (the largest result)."""
    names = ("dets", "scores", "iou_threshold")
    a = dict(zip(names, args, strict=False)) | kwargs
    dets, scores, threshold = a["dets"], a["scores"], a["iou_threshold"]
    if not (registered(dets) and registered(scores)) or dets.dim() != 2 or scores.dim() != 1:
        return NotImplemented
    cap.ops += 1
    op = "torchvision::nms"
    n = dets.shape[0]
    if dets.numel() == 0:
        return cap.track(torch.empty(0, dtype=torch.long, device="meta"), op)
    order = cap.dispatch(aten.sort.stable, (scores,), {"stable": False, "dim": 0, "descending": True})[1]
    ordered = cap.dispatch(aten.index_select.default, (dets, 0, order), {})
    mask = cap.malloc(n * -(-n // NMS_BLOCK) * 8, op, "temporary")
    keep = cap.track(torch.empty(n, dtype=torch.bool, device="meta"), op, "temporary")
    vd, vs = value(dets), value(scores)
    if vd is not None and vs is not None and not (assumed(dets) or assumed(scores)):
        import torchvision  # the program itself runs torchvision's op

        kept = torchvision.ops.nms(vd.float(), vs.float(), float(threshold))
        flags = torch.zeros(n, dtype=torch.bool)
        flags[torch.argsort(torch.argsort(vs.float(), descending=True))[kept]] = True
        set_value(keep, flags)
    out = cap.dispatch(aten.masked_select.default, (order, keep), {})
    del keep, mask, ordered, order
    return out


NAMED_DISPATCH["torchvision::nms"] = _nms


def _isin(cap, func, call, outs):
    """`isin_default_kernel_gpu` (cuda/TensorCompare.cu): `elements.unsqueeze(-1).eq(test.view(...))`
    (elements x tests bools) reduced by `any(-1)` (or `ne`/`all` inverted) into a temporary, then
    copied into the result; both temporaries die at the return (blind8/h06's H200 record). Many
    test elements (`numel < 10 * elements ** 0.145` fails) take `_isin_sorting`."""
    (args, _kw) = call
    elements, test = args[0], args[1]
    if not (isinstance(elements, torch.Tensor) and registered(elements)) or outs[0].numel() == 0:
        return
    n_test = test.numel() if isinstance(test, torch.Tensor) else 1
    if n_test >= 10.0 * float(elements.numel()) ** 0.145:
        return  # the sorting path, `_isin_sorting`
    n = elements.numel()
    compared = cap.malloc(n * n_test, "aten::eq", "temporary")
    reduce_scratch(cap, [n, n_test], None, [False, True], 1, 1, "aten::any")
    found = cap.malloc(n, "aten::any", "temporary")
    del found, compared


for _f in (aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar):
    AFTER[_f] = _isin


def _isin_sorting(cap, func, args, kwargs):
    """`isin_sorting` (TensorCompare.cpp), the CUDA path for many test elements, run as its parts
    on the simulated GPU: the result, `_unique(elements, sorted=False, return_inverse=True)` and
    `_unique(test_elements)` (or both raveled with `assume_unique`), `cat`, a stable `sort`, the
    duplicate mask (`empty_like`, `eq`/`ne` of the shifted halves, `copy_`), `index_copy_` into a
    second mask, `index` by the unique order, `copy_` into the result; the locals die in reverse
    order of their declaration (the H200's sweep, `validation/run/sweeps/topk_isin_sweep.py`)."""
    names = ("elements", "test_elements", "assume_unique", "invert")
    a = dict(zip(names, args, strict=False)) | kwargs
    elements, test = a.get("elements"), a.get("test_elements")
    if not (registered(elements) and registered(test)) or elements.numel() == 0 or set(a) - set(names):
        return NotImplemented
    if test.numel() < 10.0 * float(elements.numel()) ** 0.145:
        return NotImplemented  # the default path: the op and `_isin`'s temporaries
    invert = bool(a.get("invert", False))
    cap.ops += 1
    with cap._modes[1]:
        out = elements.new_empty(elements.shape, dtype=torch.bool)
        if a.get("assume_unique", False):
            flat, test_flat, order = elements.ravel(), test.ravel(), None
        else:
            flat, order = torch._unique(elements, sorted=False, return_inverse=True)
            test_flat, _ = torch._unique(test, sorted=False)
        everything = torch.cat([flat, test_flat])
        del test_flat, flat  # the moved operands die after `cat`, the last first
        sorted_, sorted_order = everything.sort(stable=True, dim=0)
        duplicate = torch.empty_like(sorted_, dtype=torch.bool)
        first, last = sorted_[1:], sorted_[:-1]
        same = first.ne(last) if invert else first.eq(last)
        duplicate[:-1].copy_(same)
        del same
        duplicate.select(0, -1).fill_(invert)  # `index_put_({-1}, invert)`: a host scalar, no buffer
        mask = torch.empty_like(duplicate)
        mask.index_copy_(0, sorted_order, duplicate)
        found = mask[: elements.numel()] if order is None else mask[order]
        out.copy_(found.view_as(out))
        # `auto [sorted_elements, sorted_order]`: the tuple frees its values before its indices
        del found, mask, last, first, duplicate, sorted_, sorted_order, everything, order
    return out


DISPATCH[aten.isin.Tensor_Tensor] = _isin_sorting


class _Cumprod(torch.autograd.Function):
    """`cumprod` with the backward a plain CUDA tensor takes (`cumprod_backward`, FunctionsManual.cpp):
    `w = output * grad`, `is_zero = input == 0`, and where `is_zero.any()` reads False,
    `reversed_cumsum(w, dim).div(input)` (`w.flip(dim).cumsum(dim).flip(dim)`, whose temporaries die
    at that return, the flip's last). Simulated tensors count as subclass-like there and skip the
    check for a loop over the dimension (O(n^2) in its allocations)."""

    @staticmethod
    def forward(ctx, cap, x, dim):
        out = aten.cumprod.default(x, dim)
        ctx.cap, ctx.dim = cap, dim
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        dim = ctx.dim
        if x.numel() <= 1 or x.shape[dim] == 1:
            return None, grad, None
        w = out * grad
        is_zero = x == 0
        any_zero = is_zero.any()
        if value(x) is None or assumed(x):
            ctx.cap.warn_once(
                "cumprod-zeros",
                f"cumprod's backward checks its input of {tuple(x.shape)} for zeros, whose values the "
                "twin does not compute: it takes none (the formula without a loop)",
            )
        del any_zero
        flipped = w.flip(dim)
        summed = flipped.cumsum(dim)
        rev = summed.flip(dim)
        del summed, flipped
        gx = rev.div(x)
        del rev, is_zero, w
        return None, gx, None


def _cumprod(cap, func, args, kwargs):
    """`torch.cumprod` of a simulated floating tensor that needs its gradient: `_Cumprod`, unless its
        values are known to hold a zero (the GPU's masked formula then) or autocast casts it (its fp32
    policy leaves float32 and float64 inputs as they are)."""
    a = dict(zip(("input", "dim"), args, strict=False)) | kwargs
    x, dim = a.get("input", a.get("self")), a.get("dim")
    if (
        not registered(x)
        or set(a) - {"input", "self", "dim"}
        or not isinstance(dim, int)
        or not x.is_floating_point()
        or not (x.requires_grad and torch.is_grad_enabled())
        or (torch.is_autocast_enabled("cuda") and x.dtype not in (torch.float32, torch.float64))
        or _fad.has_tangent(x)
    ):
        return NotImplemented
    v = value(x)
    if v is not None and not assumed(x) and bool((v == 0).any()):
        return NotImplemented
    cap.ops += 1
    return _Cumprod.apply(cap, x, dim % max(x.dim(), 1))


FUNCTIONS[torch.cumprod] = _cumprod
FUNCTIONS[torch.Tensor.cumprod] = _cumprod


class _ProdDim(torch.autograd.Function):
    """`prod(input, dim, keepdim)` with the backward a plain CUDA tensor takes (`prod_backward`,
    FunctionsManual.cpp, its dim overload): `grad` and `result` unsqueezed (views), `zero_mask =
    input == 0`, `slice_zero_count = zero_mask.sum(dim, true)`, its `sum().item()`, and where that
    reads 0, `grad * (result / input)` (the quotient freed at the return, then the count and the
    mask). Simulated tensors are meta tensors and took its `is_meta()` path,
    `prod_safe_zeros_backward` (ones, two cats, two cumprods, a flip), blind213/he02 (NODE's
    product over tree depth)."""

    @staticmethod
    def forward(ctx, cap, x, dim, keepdim):
        out = aten.prod.dim_int(x, dim, keepdim)
        ctx.cap, ctx.dim, ctx.keepdim = cap, dim, keepdim
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        dim = ctx.dim
        if not ctx.keepdim:
            grad, out = grad.unsqueeze(dim), out.unsqueeze(dim)
        zero_mask = x == 0
        slice_zero_count = zero_mask.sum(dim, True)
        total = slice_zero_count.sum()
        if value(x) is None or assumed(x):
            ctx.cap.warn_once(
                "prod-zeros",
                f"prod's backward checks its input of {tuple(x.shape)} for zeros, whose values the "
                "twin does not compute: it takes none (grad * result / input)",
            )
        del total
        quotient = out.div(x)
        gx = grad.mul(quotient)
        del quotient, slice_zero_count, zero_mask
        return None, gx, None, None


def _prod_dim(cap, func, args, kwargs):
    """`torch.prod(input, dim, keepdim=False)` of a simulated floating tensor that needs its
    gradient: `_ProdDim`, unless its values are known to hold a zero (the GPU's
    `prod_safe_zeros_backward` then, which the meta path takes). Under autocast `prod` is an fp32
    op (autocast_mode.cpp `fp32_set_opt_dtype`): a float16/bfloat16 input is cast first."""
    a = dict(zip(("input", "dim", "keepdim"), args, strict=False)) | kwargs
    x, dim, keepdim = a.get("input", a.get("self")), a.get("dim"), a.get("keepdim", False)
    if (
        not registered(x)
        or set(a) - {"input", "self", "dim", "keepdim"}
        or not isinstance(dim, int)
        or not isinstance(keepdim, bool)
        or not x.is_floating_point()
        or x.dim() == 0
        or not (x.requires_grad and torch.is_grad_enabled())
        or _fad.has_tangent(x)
    ):
        return NotImplemented
    v = value(x)
    if v is not None and not assumed(x) and bool((v == 0).any()):
        return NotImplemented
    if torch.is_autocast_enabled("cuda") and x.dtype in (torch.float16, torch.bfloat16):
        x = x.to(torch.float32)
    cap.ops += 1
    return _ProdDim.apply(cap, x, dim % x.dim(), keepdim)


FUNCTIONS[torch.prod] = _prod_dim
FUNCTIONS[torch.Tensor.prod] = _prod_dim
