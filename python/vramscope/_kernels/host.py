"""Values read by the program and copies between the host and the device: `.item()`, `_to_copy`,
`copy_`'s staging (`native/Copy.cpp`, `cuda/Copy.cu`), pinned memory, `equal`, `allclose`."""

from __future__ import annotations

import math

import torch

from .. import _hostmem, _tensor
from .._tensor import assumed, registered, set_value, value
from .._tensor import non_overlapping_and_dense as _non_overlapping_and_dense
from .registry import DISPATCH

aten = torch.ops.aten


# ---- values read by the program ------------------------------------------------------


def _local_scalar_dense(cap, func, args, kwargs):
    t = args[0]
    if isinstance(t, (int, float, complex)):
        # a wrapped number's `.item()` (the `2` of `loss / 2` that autograd saves and compiled
        # autograd lifts into its graph's inputs): a dispatch mode is handed a wrapped-number tensor
        # as a Python number (`toPyObject`, torch/csrc/jit/python/pybind_utils.cpp); the kernel
        # under no mode, as on the GPU, returns its value
        return t
    if not registered(t):
        return NotImplemented
    return cap.value_of(t, "this line").reshape(()).item()


DISPATCH[aten._local_scalar_dense.default] = _local_scalar_dense


def _h2d_staging(cap, dst, src, non_blocking: bool, op: str) -> None:
    """`copy_kernel_cuda` (cuda/Copy.cu) between host and device: the memcpy needs a contiguous
    destination, so a `dst` that is not contiguous (a 3x3 weight sent as channels-last) gets a
    contiguous device buffer first, copied into `dst` on the device and freed; with `non_blocking`
    the dtype conversion happens on the GPU, so a dtype change takes one too (in `src`'s dtype)."""
    same_type = dst.dtype == src.dtype
    if dst.numel() == 0 or (dst.is_contiguous() and (same_type or not non_blocking)):
        return
    if same_type and dst.stride() == src.stride() and _non_overlapping_and_dense(dst):
        # `copy_requires_temporaries`: the iterator orders both alike, so it is contiguous (a
        # transposed parameter's `.to("cuda")`: blind21/u04's H200 history has no staging)
        return
    elem = src.element_size() if non_blocking else dst.element_size()
    staging = cap.malloc(dst.numel() * elem, op, "temporary")
    del staging


def _d2h_staging(cap, dst_shape, dst_stride, dst_dtype, src, non_blocking: bool, op: str) -> None:
    """`copy_impl`'s temporaries (`copy_requires_temporaries`, native/Copy.cpp) from the device to
    the host: unless both share a dtype and an iteration order that coalesces to one dimension,
    the memcpy reads `src.expand_as(dst).contiguous()` on the device (with `non_blocking`, after
    `src.to(dst.dtype)`), dead as the copy returns (blind40/p07's H200 per-op truth:
    `save_on_cpu` packing transposed activations and weights into contiguous host tensors)."""
    numel = math.prod(dst_shape)
    if numel == 0:
        return
    same_type = dst_dtype == src.dtype
    expanded = src.expand(dst_shape)
    if same_type and (
        (
            expanded.is_contiguous()
            and torch.empty_strided(tuple(dst_shape), tuple(dst_stride), device="meta").is_contiguous()
        )
        or (list(expanded.stride()) == list(dst_stride) and _non_overlapping_and_dense(expanded))
    ):
        return
    if non_blocking and not same_type:
        # `src.to(dst.dtype)` (preserve_format: a dense operand keeps its strides, any other is made
        # contiguous), then `.expand_as(dst).contiguous()`; the conversion dies with the expression
        converted = cap.malloc(src.numel() * dst_dtype.itemsize, op, "temporary")
        laid_out = src.is_contiguous() or not _non_overlapping_and_dense(src)
        same_shape = list(src.shape) == list(dst_shape)
        staging = None if laid_out and same_shape else cap.malloc(numel * dst_dtype.itemsize, op, "temporary")
        del converted
        del staging
        return
    if not expanded.is_contiguous():
        staging = cap.malloc(numel * src.element_size(), op, "temporary")
        del staging


#: the most elements of a boolean or integer host tensor whose values its copy to the simulated
#: device carries (and of a `randint` drawn on it, `_capture._values_at_any_size`): masks and
#: indices decide the results of `nonzero`, `unique`, `coalesce` and indexing, and their values
#: cost one host copy
HOST_INDEX_LIMIT = 1 << 26

#: the most elements of a copy to the host of a tensor without values that takes real zeros; a
#: larger one takes calloc'd zeros (`_hostmem.zeros`) (a cost bound of the twin, not a PyTorch constant)
HOST_VALUE_LIMIT = 1 << 16


def _host_indices(src) -> bool:
    """Whether `src` is a boolean or integer tensor of at most HOST_INDEX_LIMIT elements."""
    return not (src.is_floating_point() or src.is_complex()) and src.numel() <= HOST_INDEX_LIMIT


def _to_copy(cap, func, args, kwargs):
    """Copies between the host and the simulated device."""
    src = args[0]
    dev = kwargs.get("device")
    kind = torch.device(dev).type if dev is not None else None
    to_device = kind == "cuda" or (kind == "meta" and not cap.genuine_meta)
    if registered(src):
        if dev is None or to_device:
            return NotImplemented
        if kind == "meta":
            # the program's own copy to the meta device: a plain meta tensor, nothing on the GPU
            return aten._to_copy.default(src, **kwargs)
        # device to host: a CPU tensor holding the values the twin knows
        fmt = kwargs.get("memory_format")
        keep = fmt in (None, torch.preserve_format) and _non_overlapping_and_dense(src)
        shape = list(src.shape)
        stride = list(src.stride()) if keep else torch.empty(shape, device="meta").stride()
        if fmt is torch.channels_last and src.dim() == 4:
            stride = torch.empty(shape, device="meta").to(memory_format=fmt).stride()
        non_blocking = bool(kwargs.get("non_blocking", False))
        known = cap.value_of(src, "a copy to the host")
        plain = kwargs.get("memory_format") in (None, torch.preserve_format, torch.contiguous_format)
        if value(src) is None and plain and not kwargs.get("pin_memory") and src.numel() > HOST_VALUE_LIMIT:
            # laid out as the copy's strides (preserve_format keeps a dense tensor's: empty_like)
            zeros = _hostmem.zeros([src.numel()], kwargs.get("dtype") or src.dtype)
            out = zeros.as_strided(shape, stride)
        else:
            out = aten._to_copy.default(known, **kwargs)
            if keep and not kwargs.get("pin_memory") and list(out.stride()) != stride:
                # the known value (zeros expanded, or values of another layout) copied into the strides
                # a dense source keeps (`_to_copy`'s empty_like under preserve_format, TensorConversions.cpp)
                out = torch.empty_strided(shape, stride, dtype=out.dtype).copy_(out)
        if non_blocking and not kwargs.get("pin_memory") and out.layout == torch.strided:
            # `_to_copy` (TensorConversions.cpp) makes the host output of a non-blocking copy from
            # an accelerator page-locked (`pin_out`), before the copy: a block of the caching host
            # allocator (`_pinned`), which `is_pinned()` reads
            cap.pinned.allocate(cap, out.untyped_storage())
        _d2h_staging(
            cap, shape, stride, kwargs.get("dtype") or src.dtype, src, non_blocking, "aten::_to_copy"
        )
        return out
    if (
        to_device
        and isinstance(src, torch.Tensor)
        and src.device.type == "cpu"
        and src.layout in (torch.sparse_coo, torch.sparse_csr)
    ):
        from .. import _sparse

        return _sparse.host_to_device(cap, src, kwargs)
    if to_device and isinstance(src, torch.Tensor) and src.device.type == "cpu":
        # host to device: a new storage on the GPU
        out = aten._to_copy.default(src, **dict(kwargs, device=torch.device("meta")))
        cap.ops += 1
        cap.track(out, "aten::_to_copy", "input")
        _h2d_staging(cap, out, src, bool(kwargs.get("non_blocking", False)), "aten::_to_copy")
        if src.numel() <= _tensor.DENSE_LIMIT or _host_indices(src):
            set_value(out, aten._to_copy.default(src, **dict(kwargs, device=torch.device("cpu"))))
        return out
    return NotImplemented


DISPATCH[aten._to_copy.default] = _to_copy


def _copy_(cap, func, args, kwargs):
    dst, src = args[0], args[1]
    if registered(dst) and isinstance(src, torch.Tensor) and src.device.type == "cpu":
        aten.copy_.default(dst, src.to("meta"), *args[2:])
        non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        _h2d_staging(cap, dst, src, non_blocking, "aten::copy_")
        v = value(dst)
        if v is not None:
            v.copy_(src)
        return dst
    if registered(src) and isinstance(dst, torch.Tensor) and dst.device.type == "cpu":
        non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        _d2h_staging(cap, dst.shape, dst.stride(), dst.dtype, src, non_blocking, "aten::copy_")
        known = cap.value_of(src, "a copy to the host")
        if value(src) is None and not (cap.checks_pass and src.dtype == torch.bool):
            # zeros standing in for values the twin does not carry (save_on_cpu's pinned buffers):
            # the destination's pages are handed back rather than written
            _hostmem.zero_(dst)
        else:
            dst.copy_(known)
        return dst
    return NotImplemented


DISPATCH[aten.copy_.default] = _copy_


def _record_stream(cap, func, args, kwargs):
    return None


DISPATCH[aten.record_stream.default] = _record_stream


def _pin_memory(cap, func, args, kwargs):
    """`pin_memory()`: page-locked host memory from CUDA's host allocator, not the device's; on a
    machine without a driver the twin keeps an ordinary host copy, its block laid out (`_pinned`)."""
    t = args[0]
    if registered(t) or t.device.type != "cpu":
        return NotImplemented
    out = t.clone()
    cap.pinned.allocate(cap, out.untyped_storage())
    return out


def _is_pinned(cap, func, args, kwargs):
    """`is_pinned()`: the GPU asks the driver whether the data's address is page-locked
    (`isPinnedPtr`, cudaPointerGetAttributes): the twin's page-locked blocks are ordinary host
    memory, so a storage holding one of its host allocator's blocks (`_pinned`) is, any other is
    not. `Tensor.pin_memory()` returns a pinned tensor itself (`if (self.is_pinned(device)) return
    self;`, aten/src/ATen/native/Memory.cpp), without a second block."""
    t = args[0]
    if registered(t) or t.device.type != "cpu":
        return NotImplemented
    return cap.pinned.holds(t.untyped_storage())


DISPATCH[aten._pin_memory.default] = _pin_memory
DISPATCH[aten.is_pinned.default] = _is_pinned


def _left_aligned(cap, func, args, kwargs):
    """`_nested_tensor_from_mask_left_aligned` (`nn.TransformerEncoder`'s fast-path check) reads the
    mask back from the GPU. The twin does not model nested tensors, so it answers False: the encoder
    then runs its dense masked path, which holds at least what the nested one would (an upper bound),
    with a warning."""
    from .._capture import _user_site

    site = _user_site()
    cap.warn_once(
        "nested:" + site,
        f"{site}: nn.TransformerEncoder would convert the padded batch to a nested tensor, which the "
        "twin does not model: it runs the dense masked path instead (memory from here is an upper "
        "bound)",
    )
    return False


DISPATCH[aten._nested_tensor_from_mask_left_aligned.default] = _left_aligned


def _is_all_true(cap, func, args, kwargs):
    """`torch._is_all_true`, the check behind `torch.distributions`' argument validation and
    `torch._assert`: where the twin does not carry the checked values (or computed them over zeros
    standing in for unknown ones) it answers True, so a
    program that passes its checks on the GPU passes them here (documented in docs/run.md)."""
    x = args[0]
    if kwargs or not registered(x) or (value(x) is not None and not assumed(x)):
        return NotImplemented
    out = cap.run(func, args, kwargs, [x])
    set_value(out, torch.tensor(True))
    return out


DISPATCH[aten._is_all_true.default] = _is_all_true


def _equal(cap, func, args, kwargs):
    """`torch.equal` on CUDA (`cuda_equal`, cuda/Equal.cpp): False for other sizes, True for no
    elements or the same view, else `at::eq(self, src).all().item()` (blind44/ar03's H200 record:
    two 1-byte results for 0-d operands)."""
    a, b = args
    if kwargs or not (registered(a) and registered(b)):
        return NotImplemented
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    if (
        a.untyped_storage()._cdata == b.untyped_storage()._cdata
        and a.storage_offset() == b.storage_offset()
        and a.dtype == b.dtype
        and a.stride() == b.stride()
        and a.is_neg() == b.is_neg()
        and a.is_conj() == b.is_conj()
    ):
        return True
    with cap._modes[1]:  # the parts come back to the mode
        same = torch.eq(a, b).all()
    if cap.istft_envelope and (value(same) is None or assumed(same)):
        # istft's `is_scalar_tensor_true(window_envelop.abs().min().lt(1e-11))` over an envelope
        # whose values the twin does not carry: the window overlaps, as the GPU's run found
        return False
    return bool(cap.value_of(same, "torch.equal").item())


DISPATCH[aten.equal.default] = _equal


def _allclose(cap, func, args, kwargs):
    """`torch.allclose` (TensorCompare.cpp): `isclose(self, other, rtol, atol, equal_nan).all().item()`,
    its parts on the simulated GPU and the result read on the host."""
    names = ("self", "other", "rtol", "atol", "equal_nan")
    a = dict(zip(names, args, strict=False)) | kwargs
    if not (registered(a["self"]) or registered(a["other"])):
        return NotImplemented
    with cap._modes[1]:  # the parts come back to the mode
        close = torch.isclose(
            a["self"],
            a["other"],
            rtol=a.get("rtol", 1e-05),
            atol=a.get("atol", 1e-08),
            equal_nan=a.get("equal_nan", False),
        ).all()
    return bool(cap.value_of(close, "torch.allclose").item())


DISPATCH[aten.allclose.default] = _allclose


def _masked_fill_cpu_value(cap, func, args, kwargs):
    """`masked_fill(mask, value)` of a CUDA tensor with a 0-dim CPU tensor `value`: CUDA reads the
    value on the host (`masked_fill__cuda` calls `value.item()`, cuda/Indexing.cu), the Scalar
    overload's kernel; PyTorch's reference (meta) checks the devices as if `self` were not CUDA."""
    self, mask, fill = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("value")
    if not (
        registered(self)
        and isinstance(fill, torch.Tensor)
        and not registered(fill)
        and fill.device.type == "cpu"
        and fill.dim() == 0
    ):
        return NotImplemented
    scalar = aten.masked_fill_.Scalar if func is aten.masked_fill_.Tensor else aten.masked_fill.Scalar
    with cap._modes[1]:  # the Scalar overload comes back to the mode
        return scalar(self, mask, fill.item())


DISPATCH[aten.masked_fill.Tensor] = _masked_fill_cpu_value
DISPATCH[aten.masked_fill_.Tensor] = _masked_fill_cpu_value
