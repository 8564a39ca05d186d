"""Strided nested tensors on the simulated GPU (`torch.nested.nested_tensor(list)` without
`layout=torch.jagged`), as PyTorch 2.11 builds and runs them.

A strided nested tensor is a `NestedTensorImpl` (aten/src/ATen/NestedTensorImpl.cpp): one
contiguous device buffer with the components' sizes, strides and storage offsets in host tensors
(`construct_nested_strides`, `construct_offsets`). Its impl takes no meta storage ("NestedTensorImpl
storage must be either CUDA, CPU, XPU or privateuseone"), so the twin keeps it as `StridedNested`, a
wrapper holding the simulated buffer and the metadata as Python lists; its ops run the dense ops the
nested kernels run on the buffer, through the capture (so their rules, saved tensors and frees are
the GPU's), and keep the metadata as the kernels do. An op on it the twin has no rule for raises
(`__torch_dispatch__`), naming the op.
"""

from __future__ import annotations

import math

import torch

from . import _kernels, _tensor

#: the capture the patches were made for (`patch`)
_CAP = [None]


def _unmodelled(what: str):
    return NotImplementedError(f"vramscope: {what} on a strided nested tensor is not modelled by the twin")


def _device_tensor(shape, dtype, op: str, category: str):
    """A simulated tensor of `shape` that the nested kernel `op` allocates (`category` as the
    capture's reports name it)."""
    cap = _CAP[0]
    cap.genuine_meta += 1
    try:
        t = torch.empty(shape, dtype=dtype, device="meta")
    finally:
        cap.genuine_meta -= 1
    return cap.track(t, op, category)


def _contiguous_strides(size) -> tuple:
    """`construct_nested_strides`' row for one component: row-major strides."""
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def _numel(size) -> int:
    return math.prod(size)


def _contiguous_offsets(sizes) -> list:
    """`construct_offsets`: the components packed one after another."""
    offsets, acc = [], 0
    for size in sizes:
        offsets.append(acc)
        acc += _numel(size)
    return offsets


class StridedNested(torch.Tensor):
    """A strided nested tensor of the simulated GPU: `_vs_buffer` is the 1-D simulated storage
    (`get_unsafe_storage_as_tensor`), `_vs_sizes`/`_vs_strides` one tuple per component and
    `_vs_offsets` their storage offsets, in elements. It reads as a CUDA tensor."""

    @staticmethod
    def __new__(cls, buffer, sizes, strides, offsets):
        sizes = [tuple(int(x) for x in s) for s in sizes]
        ndim = len(sizes[0]) if sizes else 1
        # the wrapper's own size: the batch, then each dimension's largest (the program reads
        # the regular ones through `size(d)`, which answers as `NestedTensorImpl::size_custom`)
        shape = [len(sizes)] + [max((s[d] for s in sizes), default=0) for d in range(ndim)]
        out = torch.Tensor._make_wrapper_subclass(
            cls, shape, dtype=buffer.dtype, device="meta", requires_grad=buffer.requires_grad
        )
        setattr(out, _tensor._MOVED, True)
        out._vs_buffer = buffer
        out._vs_sizes = sizes
        out._vs_strides = [tuple(int(x) for x in s) for s in strides]
        out._vs_offsets = [int(o) for o in offsets]
        return out

    def __init__(self, *args, **kwargs):
        pass

    @property
    def is_nested(self):
        return True

    def __repr__(self, *, tensor_contents=None):
        sizes = ", ".join(str(list(s)) for s in self._vs_sizes)
        return f"nested_tensor(sizes=[{sizes}], device='cuda:0', dtype={self.dtype})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLERS.get(getattr(func, "__name__", None))
        if handler is None:
            # getters (dtype, device, requires_grad, dim) read the wrapper; an op reaches
            # `__torch_dispatch__`, which raises
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        return _under_mode(handler, *args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise _unmodelled(str(func))


def _under_mode(fn, *args, **kwargs):
    """Run `fn` under the capture's function mode (a subclass's `__torch_function__` runs with the
    mode popped: the dense ops it calls on the buffer take the twin's function-level rules as the
    program's own do)."""
    cap = _CAP[0]
    mode = cap._modes[0] if cap is not None and cap._modes else None
    stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
    if mode is None or any(m is mode for m in stack):
        return fn(*args, **kwargs)
    torch._C._push_on_torch_function_stack(mode)
    try:
        return fn(*args, **kwargs)
    finally:
        torch._C._pop_torch_function_stack()


def is_strided_nested(t) -> bool:
    return isinstance(t, StridedNested)


def _view(t, sizes, strides, offsets):
    """`create_nested_view_tensor`: the same storage, new metadata."""
    return StridedNested(t._vs_buffer, sizes, strides, offsets)


def _is_contiguous(t) -> bool:
    """`nested_tensor_impl_is_contiguous` (NestedTensorImpl.h): every component row-major, the
    first at offset 0 and each next one right after the previous (`offsets[i] == offsets[i-1] +
    sizes[i-1][0] * strides[i-1][0]`)."""
    if not t._vs_sizes:
        return True
    for size, stride in zip(t._vs_sizes, t._vs_strides, strict=True):
        if not size:
            continue
        if stride != _contiguous_strides(size):
            return False
    if not t._vs_sizes[0]:
        return all(o == i for i, o in enumerate(t._vs_offsets))
    if t._vs_offsets[0] != 0:
        return False
    for i in range(1, len(t._vs_sizes)):
        prev = t._vs_offsets[i - 1] + t._vs_sizes[i - 1][0] * t._vs_strides[i - 1][0]
        if t._vs_offsets[i] != prev:
            return False
    return True


def _opt_size(t, d: int):
    """`NestedTensorImpl::opt_size`: the size of dimension `d` where every component has the same."""
    if d == 0:
        return len(t._vs_sizes)
    values = {s[d - 1] for s in t._vs_sizes}
    return values.pop() if len(values) == 1 else None


def _wrap_dim(d: int, ndim: int) -> int:
    if not -ndim <= d < ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {d})"
        )
    return d % ndim


def _size(t, dim=None):
    """`NestedTensorImpl::size_custom`: a regular dimension's size, else the error PyTorch raises."""
    ndim = t.dim()
    if dim is None:
        raise RuntimeError("Internal error: NestedTensorImpl doesn't support sizes. Please file an issue.")
    d = _wrap_dim(dim, ndim)
    size = _opt_size(t, d)
    if size is None:
        raise RuntimeError(f"Given dimension {d} is irregular and does not have a size.")
    return size


# ---- construction -------------------------------------------------------------------------------


def nested_tensor_fn(original):
    """`torch.nested.nested_tensor` for the strided layout: `nested_tensor_ctor`
    (torch/csrc/utils/nested.cpp) detaches each tensor of the list (lists of numbers become host
    tensors), then `_nested_tensor_from_tensor_list` -> `wrap_tensor_node` (NestedTensorUtils.h):
    host tensors, all contiguous and of one dtype, are packed on the host (`memcpy`) and the buffer
    goes to the device with `nt_buffer.to(options)`; otherwise (device tensors) each one's
    `reshape(-1).contiguous()` (a copy where it is not contiguous), `at::cat` of them into the
    buffer, then `.to(options)` (a copy only for another dtype)."""

    def nested_tensor(
        tensor_list, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False
    ):
        def fallback():
            return original(
                tensor_list,
                dtype=dtype,
                layout=layout,
                device=device,
                requires_grad=requires_grad,
                pin_memory=pin_memory,
            )

        if layout not in (None, torch.strided) or not isinstance(tensor_list, list):
            return fallback()
        items = [
            t.detach() if isinstance(t, torch.Tensor) else torch.tensor(t, dtype=dtype) for t in tensor_list
        ]
        ours = [_tensor.is_ours(t) for t in items]
        to_gpu = device is not None and torch.device(device).type == "cuda"
        if not items or not (any(ours) or to_gpu):
            return fallback()
        out = _from_tensor_list(items, dtype, to_gpu)
        if requires_grad:
            out.requires_grad_(True)
        return out

    return nested_tensor


def as_nested_tensor_fn(original):
    """`torch.nested.as_nested_tensor` for the strided layout (torch/nested/__init__.py): a list
    goes to `_nested_tensor_from_tensor_list` as it is (autograd kept: no detach); a tensor's
    `contiguous().view(-1).to(device, dtype)` becomes the buffer of `_nested_view_from_buffer` (a
    view)."""

    def as_nested_tensor(ts, dtype=None, device=None, layout=None):
        if layout not in (None, torch.strided) or isinstance(ts, StridedNested):
            return original(ts, dtype, device, layout)
        to_gpu = device is not None and torch.device(device).type == "cuda"
        if isinstance(ts, torch.Tensor):
            if not (_tensor.is_ours(ts) or to_gpu):
                return original(ts, dtype, device, layout)
            buffer = ts.contiguous().view(-1).to(device=device, dtype=dtype)
            sizes = [tuple(ts.shape[1:])] * ts.shape[0]
            return StridedNested(
                buffer, sizes, [_contiguous_strides(s) for s in sizes], _contiguous_offsets(sizes)
            )
        if not isinstance(ts, list) or not ts or not (any(_tensor.is_ours(t) for t in ts) or to_gpu):
            return original(ts, dtype, device, layout)
        return _from_tensor_list(list(ts), dtype, to_gpu)

    return as_nested_tensor


def host_to_device(cap, func, args, kwargs):
    """`Tensor.to(cuda)` / `Tensor.cuda()` of a host strided nested tensor: `_to_copy_nested`
    (NestedTensorMath.cpp): `empty_like` on the device (one buffer of its elements, contiguous)
    and the buffer's copy; the twin packs its components on the host and copies them once."""
    t = args[0] if args else kwargs.get("self")
    if not isinstance(t, torch.Tensor) or not t.is_nested or isinstance(t, StridedNested):
        return NotImplemented
    if t.layout != torch.strided or t.device.type != "cpu":
        return NotImplemented
    if func is torch.Tensor.cuda:
        device, dtype = torch.device("cuda"), None
    else:
        device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
    if device is None or device.type != "cuda":
        return NotImplemented
    parts = t.unbind()
    return _under_mode(_from_tensor_list, list(parts), dtype, True)


def _from_tensor_list(items, dtype, to_gpu: bool):
    if any(isinstance(t, StridedNested) or t.is_nested for t in items):
        raise RuntimeError("We do not accept nested tensors as input to nested tensors")
    final_dtype = dtype if dtype is not None else items[0].dtype
    sizes = [tuple(t.shape) for t in items]
    fast = all(not _tensor.is_ours(t) and t.device.type == "cpu" for t in items)
    fast = fast and all(t.is_contiguous() and t.dtype == items[0].dtype for t in items)
    if fast:
        # the host buffer (`at::empty({total_size})`, the `memcpy`s), then `nt_buffer.to(options)`
        host = torch.cat([t.reshape(-1) for t in items]) if items else torch.empty(0)
        buffer = host.to(device="cuda" if to_gpu else "cpu", dtype=final_dtype)
        del host
    else:
        flat = [t.reshape(-1).contiguous() for t in items]
        cat = torch.cat(flat)
        del flat
        buffer = cat.to(dtype=final_dtype)
        del cat
    return StridedNested(buffer, sizes, [_contiguous_strides(s) for s in sizes], _contiguous_offsets(sizes))


# ---- views ----------------------------------------------------------------------------------------


def _transpose(t, dim0, dim1):
    """`transpose_nested` (NestedTensorMath.cpp): the batch dimension cannot move; the components'
    sizes and strides swap the two dimensions."""
    ndim = t.dim()
    d0, d1 = _wrap_dim(dim0, ndim), _wrap_dim(dim1, ndim)
    if d0 == d1:
        return t
    if d0 == 0 or d1 == 0:
        raise RuntimeError("Nested tensor dimension 0 cannot be transposed")
    a, b = d0 - 1, d1 - 1

    def swap(row):
        row = list(row)
        row[a], row[b] = row[b], row[a]
        return tuple(row)

    return _view(t, [swap(s) for s in t._vs_sizes], [swap(s) for s in t._vs_strides], t._vs_offsets)


def _chunk(t, chunks, dim=0):
    """`chunk_nested_tensor` (NestedTensorUtils.cpp): the last dimension only, of a contiguous
    tensor whose components agree on it; views at offsets `start_val` further."""
    ndim = t.dim()
    d = _wrap_dim(dim, ndim)
    if d != ndim - 1:
        raise RuntimeError("Chunk for nested tensors is currently only supported for the last dimension.")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    if not _is_contiguous(t):
        raise RuntimeError("chunk expects `self` to be contiguous.")
    last = _opt_size(t, d)
    if last is None:
        raise RuntimeError("Expected all tensors in nested tensor to have the same trailing dimension")
    if last % chunks:
        raise RuntimeError(
            "Chunk for nested tensors is only supported for nested tensors with trailing dimension "
            f"divisible by chunks, got: {last} % {chunks} != 0"
        )
    split = last // chunks
    out = []
    for i in range(chunks):
        sizes = [(*s[:-1], split) for s in t._vs_sizes]
        offsets = [o + i * split for o in t._vs_offsets]
        out.append(_view(t, sizes, t._vs_strides, offsets))
    return tuple(out)


def _view_strides(size, stride, shape):
    """`at::detail::computeStride` for one component: the strides viewing (size, stride) as `shape`,
    or None where it cannot be viewed."""
    numel = _numel(size)
    if numel == 0:
        return _contiguous_strides(shape)
    new = [0] * len(shape)
    view_d = len(shape) - 1
    chunk_base_stride = stride[-1] if stride else 1
    tensor_numel, view_numel = 1, 1
    for d in range(len(size) - 1, -1, -1):
        tensor_numel *= size[d]
        if d == 0 or (size[d - 1] != 1 and stride[d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or shape[view_d] == 1):
                new[view_d] = view_numel * chunk_base_stride
                view_numel *= shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base_stride = stride[d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(new)


def _nested_shapes(t, shape, op: str = "view"):
    """`NestedTensor_compute_size_stride`'s sizes (NestedTensorMath.cpp, Note [Special size rule for
    nested tensor]): the batch dimension kept (`view` takes -1 for it, `reshape` does not); -1
    inherits the component's old size of that dimension; a dimension past the old ones takes no -1
    ("nested tensor does not infer shape")."""
    shape = list(shape)
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        shape = list(shape[0])
    if shape and not all(isinstance(s, int) for s in shape):
        raise _unmodelled(f"{op}({', '.join(map(str, shape))})")
    if not shape:
        raise RuntimeError("shape '[]' is invalid for a nested tensor")
    if not t._vs_sizes:
        raise RuntimeError("empty nested tensor cannot be reshaped")
    batch = len(t._vs_sizes) if op == "view" and shape[0] == -1 else shape[0]
    if batch != len(t._vs_sizes):
        raise RuntimeError(f"{op}: For now nested {op} cannot change or infer the implicit batch dimension")
    out = []
    for size in t._vs_sizes:
        row = list(shape[1:])
        for i, s in enumerate(row):
            if s < -1:
                raise RuntimeError(f"invalid shape dimension {s}")
            if s == -1:
                if i >= len(size):
                    raise RuntimeError("nested tensor does not infer shape")
                row[i] = size[i]
        out.append(tuple(row))
    return out


def _view_op(t, *shape):
    """`view_nested` (NestedTensorMath.cpp): each component viewed as its new shape, an error where
    one cannot be (no memory)."""
    sizes = _nested_shapes(t, shape)
    strides = []
    for size, stride, new in zip(t._vs_sizes, t._vs_strides, sizes, strict=True):
        s = _view_strides(size, stride, new)
        if s is None:
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least one dimension "
                "spans across two contiguous subspaces). Use .reshape(...) instead."
            )
        strides.append(s)
    return _view(t, sizes, strides, t._vs_offsets)


def _reshape(t, *shape):
    """`reshape_nested` (NestedTensorMath.cpp): a view where every component can be viewed, else
    the contiguous clone viewed."""
    sizes = _nested_shapes(t, shape, "reshape")
    if all(
        _view_strides(a, b, c) is not None for a, b, c in zip(t._vs_sizes, t._vs_strides, sizes, strict=True)
    ):
        return _view_op(t, *shape)
    return _view_op(_clone_contiguous(t), *shape)


def _contiguous(t, memory_format=torch.contiguous_format):
    """`NestedTensor_contiguous` -> `clone(contiguous_format)` (NestedTensorMath.cpp): a new buffer
    of the components' numel, each component copied into it."""
    if _is_contiguous(t):
        return t
    return _clone_contiguous(t)


def _clone_contiguous(t):
    buffer = _device_tensor((sum(_numel(s) for s in t._vs_sizes),), t.dtype, "aten::clone", "output")
    for size, stride, offset, start in zip(
        t._vs_sizes, t._vs_strides, t._vs_offsets, _contiguous_offsets(t._vs_sizes), strict=True
    ):
        n = _numel(size)
        if n:
            src = t._vs_buffer.as_strided(size, stride, offset)
            buffer.narrow(0, start, n).view(size).copy_(src)
            del src
    sizes = t._vs_sizes
    return StridedNested(buffer, sizes, [_contiguous_strides(s) for s in sizes], _contiguous_offsets(sizes))


def _unbind(t, dim=0):
    """`NestedTensor_unbind`: each component a strided view of the storage (no memory)."""
    if dim != 0:
        raise RuntimeError("unbind(): only supported for dim=0 on a nested tensor")
    return tuple(
        t._vs_buffer.as_strided(size, stride, offset)
        for size, stride, offset in zip(t._vs_sizes, t._vs_strides, t._vs_offsets, strict=True)
    )


# ---- ops ------------------------------------------------------------------------------------------


def _linear(input, weight, bias=None):
    """`nested_linear` (nested/NestedTensorTransformerFunctions.cpp): a contiguous 3-D input, whose
    buffer `at::linear` runs as `(-1, in_features)` (the dense 2-D linear: its rules, its autograd),
    the result's buffer wrapped with the last size `weight.size(0)`."""
    if isinstance(weight, StridedNested):
        raise RuntimeError("Linear does not support nested weight when input is a nested tensor.")
    if not _is_contiguous(input):
        raise RuntimeError("for now linear only supports contiguous nested tensor")
    if input.dim() != 3 or weight.dim() != 2:
        raise RuntimeError(
            "Linear requires nested_tensor.dim == 3 and dense_matrix.dim == 2. Nested tensor dim: "
            f"{input.dim()}. Dense tensor dim: {weight.dim()}"
        )
    last = _opt_size(input, 2)
    if last != weight.shape[1]:
        raise RuntimeError(
            "Shape mismatch for NestedTensor Linear: Expected input's (a nested tensor) 'last_dim' to "
            f"equal 'weight.size(1),' but got: last_dim = {last}, and weight.size(1) = {weight.shape[1]}"
        )
    out = torch.nn.functional.linear(input._vs_buffer.reshape(-1, weight.shape[1]), weight, bias)
    buffer = out.reshape(-1)
    del out
    sizes = [(*s[:-1], weight.shape[0]) for s in input._vs_sizes]
    return StridedNested(buffer, sizes, [_contiguous_strides(s) for s in sizes], _contiguous_offsets(sizes))


def _dropout(input, p=0.5, training=True, inplace=False):
    """`dropout` (Dropout.cpp): out of training (or p == 0) the input itself."""
    if not training or p == 0:
        return input
    raise _unmodelled("dropout in training")


def _to_padded(t, padding, output_size=None):
    """`NestedTensor_to_padded_tensor_cuda` (nested/cuda/NestedTensorTransformerFunctions.cpp): for
    fp32, fp64 and fp16 of 2 to 4 dimensions, a contiguous tensor; a 3-D one with a regular last
    size and no `output_size` goes through its 2-D view (its result reshaped, a view); the padded
    output (`NestedTensor_get_max_size`, or `output_size`), then `cat(offsets, sizes)` copied to
    the device as int (`metadata.to(kCUDA, kInt)`) and split; other dtypes and dims take
    `NestedTensor_to_padded_tensor_generic`, not modelled."""
    ndim = t.dim()
    if not (2 <= ndim <= 4 and t.dtype in (torch.float32, torch.float64, torch.float16)):
        raise _unmodelled(f"to_padded_tensor of a {ndim}-D {t.dtype} tensor (the generic kernel)")
    if not _is_contiguous(t):
        raise RuntimeError("for now to_padded_tensor only supports contiguous nested tensor")
    if ndim == 3 and (_opt_size(t, 2) or 0) > 0 and output_size is None:
        d = _opt_size(t, 2)
        flat = [(s[0] * d,) for s in t._vs_sizes]
        padded = _pad(t._vs_buffer, flat, padding, None)
        return padded.reshape(padded.shape[0], -1, d)
    return _pad(t._vs_buffer, t._vs_sizes, padding, output_size)


def _pad(buffer, sizes, padding, output_size):
    n, dims = len(sizes), len(sizes[0]) if sizes else 0
    shape = [n] + [max(s[d] for s in sizes) for d in range(dims)]
    if output_size is not None:
        output_size = list(output_size)
        if len(output_size) != len(shape):
            raise RuntimeError(
                "Length of output_size does not match NestedTensor dims. Broadcasting is not supported."
            )
        for i, (want, have) in enumerate(zip(output_size, shape, strict=True)):
            if want < have:
                raise RuntimeError(
                    "Value in output_size is less than NestedTensor padded size. Truncation is not supported."
                )
            shape[i] = want
    out = _device_tensor(shape, buffer.dtype, "aten::to_padded_tensor", "output")
    # `metadata.to(at::Device(kCUDA), at::kInt)`: the (n + 1) offsets and the n * dims sizes
    metadata = _device_tensor((n + 1 + n * dims,), torch.int32, "aten::to_padded_tensor", "temporary")
    del metadata
    return out


# ---- scaled dot product attention ----------------------------------------------------------------


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """`scaled_dot_product_attention` (attention.cpp) on strided nested query, key and value:
    `select_sdp_backend` (cuda/sdp_utils.cpp; cuDNN takes nested tensors only with
    TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED), then the nested flash or memory-efficient kernel
    (`_scaled_dot_product_{flash,efficient}_attention_nestedtensor_cuda`); the math path on nested
    tensors is not modelled."""
    if not all(isinstance(x, StridedNested) for x in (query, key, value)):
        raise _unmodelled("scaled_dot_product_attention with dense and nested inputs (the broadcast path)")
    if attn_mask is not None:
        raise _unmodelled("scaled_dot_product_attention with an attn_mask")
    cap = _CAP[0]
    which = _backend(query, key, value, dropout_p, cap.device.sdpa)
    # `select_sdp_backend` asks cuDNN's runtime version (`can_use_cudnn_attention`, first in the
    # H200's order, before its nested check): its graph library loads, as for dense inputs
    cap.device.sdpa_backend_choice()
    cap.sdpa_backends[which] = cap.sdpa_backends.get(which, 0) + 1
    if which == "math":
        raise _unmodelled("scaled_dot_product_attention's math path")
    if which == "error":
        raise RuntimeError("No available kernel. Aborting execution.")
    d = query._vs_sizes[0][-1] if query._vs_sizes else 0
    # attention.cpp: the scale of the unpadded head dim (`calculate_scale`); the nested checks
    # passed only for head dims `pad_last_dim<8>` leaves as they are
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    prep = _preprocess(query, key, value)
    qd, kd, vd, cu_q, cu_k, max_q, max_k, out_sizes = prep
    del prep
    aten = torch.ops.aten
    if which == "flash":
        results = list(
            aten._flash_attention_forward(
                qd, kd, vd, cu_q, cu_k, max_q, max_k, dropout_p, is_causal, False, scale=scale
            )
        )
    else:
        # `_efficient_attention_forward` over the unsqueezed (1, Nnz, H, D) views, no logsumexp
        # (the nested path takes no gradient), the causal mask type 1 (`UpperLeft`)
        results = list(
            aten._efficient_attention_forward(
                qd.unsqueeze(0),
                kd.unsqueeze(0),
                vd.unsqueeze(0),
                None,
                cu_q,
                cu_k,
                max_q,
                max_k,
                dropout_p,
                1 if is_causal else 0,
                False,
                scale=scale,
            )
        )
        results[0] = results[0].squeeze(0)
    del qd, kd, vd
    attention = results[0].view(-1)
    results[0] = None
    # the returned tuple's other results die in order (the logsumexp, the cumulative lengths,
    # then the rest), as `scaled_dot_product_attention` keeps only the output
    if which == "flash":
        results[1] = None
    del cu_q, cu_k
    results.clear()
    out = StridedNested(
        attention, out_sizes, [_contiguous_strides(s) for s in out_sizes], _contiguous_offsets(out_sizes)
    )
    del attention
    return _transpose(out, 1, 2)


def _checks(q, k, v, attn_mask, dropout_p, support) -> dict:
    """`can_use_flash_attention` and `can_use_mem_efficient_attention` (cuda/sdp_utils.cpp) for
    nested inputs: flash takes no mask (`check_for_attn_mask`), fp16/bf16, one head dim up to 256
    (`check_head_dim_size_flash`) and a multiple of 8 (`check_head_dim_size_flash_nested`),
    `check_batch_size_nested`, `check_for_seq_len_0_nested_tensor`; memory-efficient takes no input
    that requires grad (`check_requires_grad_and_nested`), head dims aligned to
    `minimum_gemm_alignment` (8 for fp16/bf16, 4 for fp32 on sm80 and up), fp16/fp32/bf16.
    `check_tensor_shapes`: 4-D inputs of one dtype. cuDNN takes nested inputs only with
    TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED (`check_for_nested_inputs`): no."""
    four = q.dim() == k.dim() == v.dim() == 4
    nested = all(isinstance(x, StridedNested) for x in (q, k, v))
    dq, dk, dv = (_opt_size(x, 3) if four and nested else None for x in (q, k, v))
    ok = four and nested and q.dtype == k.dtype == v.dtype
    ok = ok and len(q._vs_sizes) == len(k._vs_sizes) == len(v._vs_sizes)
    ok = ok and all(s[1] > 0 for x in (q, k, v) for s in x._vs_sizes)
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))

    def flash():
        if not (ok and support["flash"] and torch.backends.cuda.flash_sdp_enabled() and attn_mask is None):
            return False
        if dq is None or not (dq == dk == dv and dq <= 256 and dq % 8 == 0):
            return False
        if (
            support["flash_head_dim_192_limit"]
            and grad
            and (192 < dq <= 224 or (dq > 224 and dropout_p > 0.0))
        ):
            return False
        return q.dtype in (torch.float16, torch.bfloat16)

    def efficient():
        if not (ok and support["efficient"] and torch.backends.cuda.mem_efficient_sdp_enabled()):
            return False
        align = 8 if q.dtype in (torch.float16, torch.bfloat16) else 4
        if dq is None or dv is None or dq != dk or dq % align or dv % align:
            return False
        dtypes = (torch.float16, torch.float32) + ((torch.bfloat16,) if support["bf16"] else ())
        return not grad and q.dtype in dtypes

    return {"flash": flash, "efficient": efficient, "cudnn": lambda: False}


def _backend(q, k, v, dropout_p, support) -> str:
    """`select_sdp_backend` for nested inputs: flash, memory-efficient, then math (cuDNN first in
    the H200's order, but it takes no nested inputs)."""
    heads = {_opt_size(x, 1) for x in (q, k, v)} if q.dim() == k.dim() == v.dim() == 4 else {None}
    if len(heads) != 1 or None in heads:
        # the broadcast preprocessing (`sdpa_nested_preprocessing_with_broadcast`)
        raise _unmodelled("scaled_dot_product_attention with broadcast heads")
    checks = _checks(q, k, v, None, dropout_p, support)
    if checks["flash"]():
        return "flash"
    if checks["efficient"]():
        return "efficient"
    if torch.backends.cuda.math_sdp_enabled():
        return "math"
    return "error"


def can_use(name: str, params) -> bool:
    """`torch.backends.cuda.can_use_{flash,efficient,cudnn}_attention` of strided nested inputs."""
    p = params
    checks = _checks(p.query, p.key, p.value, p.attn_mask, p.dropout, _CAP[0].device.sdpa)
    return checks[name.removeprefix("can_use_").removesuffix("_attention")]()


def _cumulative(t):
    """`cumulative_and_max_seq_len_nnz` (nested/cuda/NestedTensorTransformerUtils.cpp): the (B + 1)
    int32 cumulative lengths built on the host and copied to the device, the longest, the total."""
    lengths = [s[0] for s in t._vs_sizes]
    cum = [0]
    for n in lengths:
        cum.append(cum[-1] + n)
    cu = _device_tensor((len(cum),), torch.int32, "aten::scaled_dot_product_attention", "temporary")
    return cu, max(lengths, default=-1), cum[-1]


def _safe_storage(t) -> bool:
    """`is_safe_to_get_storage_as_tensor` (NestedTensorTransformerUtils.cpp), of the (B, {L}, H, D)
    transposed view."""
    n = len(t._vs_sizes)
    if n <= 1:
        return True
    strides = t._vs_strides
    num_heads = _opt_size(t, 2)
    first = strides[0]
    if num_heads == 1:
        if first[0] <= first[2]:
            return False
    else:
        if not (first[0] > first[1] > first[2]):
            return False
        if any(s != first for s in strides[1:]):
            return False
    sizes, offsets = t._vs_sizes, t._vs_offsets
    numel0 = sizes[0][0] * strides[0][0]
    if numel0 <= 0:
        raise RuntimeError("numels must be positive!")
    constant = (offsets[1] - offsets[0]) // numel0
    for i in range(2, n):
        prev = sizes[i - 1][0] * strides[i - 1][0]
        if prev <= 0:
            raise RuntimeError("numels must be positive!")
        if (offsets[i] - offsets[i - 1]) // prev != constant:
            return False
    return True


def _view_as_dense(t, nnz, heads, head_dim):
    """`view_as_dense`: the storage as (Nnz, H, D) with the first component's seq and head strides,
    from its offset."""
    s = t._vs_strides[0]
    return t._vs_buffer.as_strided((nnz, heads, head_dim), (s[0], s[1], 1), t._vs_offsets[0])


def _preprocess(query, key, value):
    """`sdpa_nested_preprocessing` (same batch and heads): the transposed views, the cumulative
    lengths of q then k, each of q, k, v copied contiguous where it is neither contiguous nor safe
    to read as its storage, their dense views, and the output's sizes (q's, the last v's)."""
    heads, dqk, dv = _opt_size(query, 1), _opt_size(query, 3), _opt_size(value, 3)
    q_t, k_t, v_t = (_transpose(x, 1, 2) for x in (query, key, value))
    cu_q, max_q, nnz_q = _cumulative(q_t)
    cu_k, max_k, nnz_k = _cumulative(k_t)
    if not _is_contiguous(q_t) and not _safe_storage(q_t):
        q_t = _clone_contiguous(q_t)
    if not _is_contiguous(k_t) and not _safe_storage(k_t):
        k_t = _clone_contiguous(k_t)
    if not _is_contiguous(v_t) and not _safe_storage(v_t):
        v_t = _clone_contiguous(v_t)
    qd = _view_as_dense(q_t, nnz_q, heads, dqk)
    kd = _view_as_dense(k_t, nnz_k, heads, dqk)
    vd = _view_as_dense(v_t, nnz_k, heads, dv)
    out_sizes = [(*s[:-1], dv) for s in q_t._vs_sizes]
    return qd, kd, vd, cu_q, cu_k, max_q, max_k, out_sizes


_HANDLERS = {
    "size": _size,
    "transpose": _transpose,
    "chunk": _chunk,
    "view": _view_op,
    "reshape": _reshape,
    "contiguous": _contiguous,
    "is_contiguous": lambda t, memory_format=torch.contiguous_format: _is_contiguous(t),
    "unbind": _unbind,
    "linear": _linear,
    "dropout": _dropout,
    "to_padded_tensor": _to_padded,
    "nested_to_padded_tensor": _to_padded,
    "scaled_dot_product_attention": _sdpa,
    "numel": lambda t: sum(_numel(s) for s in t._vs_sizes),
}


def patch(cap, p) -> None:
    """Put the strided constructors in place (`torch.nested.nested_tensor`, `as_nested_tensor`)."""
    _CAP[0] = cap
    p.set(torch.nested, "nested_tensor", nested_tensor_fn(torch.nested.nested_tensor))
    p.set(torch.nested, "as_nested_tensor", as_nested_tensor_fn(torch.nested.as_nested_tensor))


for _func in (torch.Tensor.to, torch.Tensor.cuda):
    _kernels.FUNCTIONS[_func] = host_to_device
