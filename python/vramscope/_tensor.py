"""Simulated CUDA tensors: PyTorch's own meta tensors, whose storages the
twin allocates.

A simulated tensor is a plain meta tensor (shape, dtype, strides, a storage
without data) whose storage the capture registered: its allocation in the
twin is freed when PyTorch frees the storage (a weak reference on the
storage's Python object, which PyTorch keeps alive exactly as long as the
C++ storage). Plain tensors keep PyTorch's C++ code on the paths it takes
for CUDA tensors (a tensor subclass would not: `isTensorSubclassLike`
changes gradient accumulation and many formulas).

While a capture runs, `Tensor.device`, `is_cuda`, `is_meta`,
`get_device()` and `repr()` read the simulated tensors as `cuda:0`.
Small tensors also carry their values (`_vs_val`, a CPU tensor), so that
code that reads a value takes the branch the GPU would; a tensor without
values reads as zeros.
"""

from __future__ import annotations

import threading

import torch
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten, tree_map

CUDA0 = torch.device("cuda", 0)
_BASE = torch._C.TensorBase
_NO_TF = torch._C.DisableTorchFunction
_IS_META = _BASE.is_meta.__get__
_DEVICE = _BASE.device.__get__
_IS_CUDA = _BASE.is_cuda.__get__
_COO = torch.sparse_coo
_CSR = torch.sparse_csr
_CSC = torch.sparse_csc
_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
_NO_DISPATCH = torch._C._DisableTorchDispatch
#: the torch-function modes set on this thread
_TF_MODES = torch._C._len_torch_function_stack
#: the tensor classes with nothing of their own over `TensorBase`'s C getters and methods: a plain
#: tensor, a parameter (its `__torch_function__` is torch's disabled one); the wrapper subclasses
#: and fake tensors that `_reads_cuda` asks after are neither. With no torch-function mode set, a C
#: getter of theirs answers as under `_NO_TF` (`check_has_torch_function` is false for them)
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


_DENSE = torch.ops.aten.is_non_overlapping_and_dense.default


def non_overlapping_and_dense(t) -> bool:
    """`TensorImpl::is_non_overlapping_and_dense()`, the flag that the CUDA code reads: c10
    computes it from the sizes and strides (`_compute_non_overlapping_and_dense`,
    c10/core/Contiguity.h: some order of the dimensions of size 2 or more is contiguous), read
    here through its ATen op. False for a sparse COO or CSR tensor."""
    with _NO_TF():
        if t.layout is _COO or t.layout in _COMPRESSED:
            return False
        with _NO_DISPATCH():
            return _DENSE(t)


def BASE_IS_META(t) -> bool:
    """Whether a tensor is a meta tensor, whatever the patches say (the C
    getters route through torch-function modes, ours included)."""
    if type(t) in _PLAIN_TYPES and not _TF_MODES():
        return _IS_META(t)  # (as under `_NO_TF`, without entering it: `_PLAIN_TYPES`)
    with _NO_TF():
        return _IS_META(t)


_registry = None  # the active capture's storages: cdata -> allocation
#: inside the dispatch mode PyTorch's own meta kernels run, and must see
#: the meta device they compute on
_in_kernel = [0]
#: thread -> how deep it is in the kernels (`_in_kernel` is their sum): another thread reading a
#: simulated tensor meanwhile (a program's thread, `_threads`) sees it as CUDA
_kernel_depth: dict = {}


class kernels:
    """While entered, simulated tensors read as what they are on this thread: meta."""

    __slots__ = ()

    def __enter__(self):
        me = threading.get_ident()
        _kernel_depth[me] = _kernel_depth.get(me, 0) + 1
        _in_kernel[0] += 1

    def __exit__(self, *exc):
        me = threading.get_ident()
        depth = _kernel_depth.get(me, 0) - 1
        if depth > 0:
            _kernel_depth[me] = depth
        else:
            _kernel_depth.pop(me, None)
        _in_kernel[0] -= 1


def _kernel_here() -> bool:
    """Whether this thread is inside the kernels."""
    return threading.get_ident() in _kernel_depth


def set_registry(storages) -> None:
    """Point the tensor patches at a capture's storages (None: none)."""
    global _registry
    _registry = storages
    _stale.clear()


def registered(t) -> bool:
    """Whether `t` is a simulated CUDA tensor of the active capture."""
    if _registry is None or not isinstance(t, torch.Tensor):
        return False
    if type(t) in _PLAIN_TYPES and not _TF_MODES():
        return _registered(t)  # (as under `_NO_TF`, without entering it: `_PLAIN_TYPES`)
    with _NO_TF():
        return _registered(t)


def _registered(t) -> bool:
    """`registered` of a tensor whose C getters answer as under `_NO_TF`."""
    if not _IS_META(t):
        return False
    try:
        return t.untyped_storage()._cdata in _registry
    except NotImplementedError:
        if t.layout is _COO:
            # a sparse COO tensor (`_sparse`): simulated where its values are
            with _NO_DISPATCH():
                return t._values().untyped_storage()._cdata in _registry
        if t.layout in _COMPRESSED:
            # a sparse CSR tensor or its transpose, a CSC one, or their blocked kin, BSR and
            # BSC (`_sparse`): likewise
            with _NO_DISPATCH():
                return t.values().untyped_storage()._cdata in _registry
        # a functorch wrapper (`grad`, `vmap`): no storage of its own; the ops on the
        # tensor it wraps reach the capture unwrapped
        return False


def is_ours(t) -> bool:
    """Whether `t` reads as a CUDA tensor: a simulated one, outside the
    kernels (PyTorch's meta kernels see meta tensors)."""
    return not (_in_kernel[0] and _kernel_here()) and registered(t)


#: the most elements of a tensor whose values the twin computes although they are not small: a
#: pointwise result of inputs whose values are all known (a mask built from `meshgrid` of
#: `arange`) and a host tensor copied to the device (labels padded with -100); the twin's own
#: cost bound, not a PyTorch constant
DENSE_LIMIT = 1 << 24


def value(t):
    """The CPU values `t` carries, or None."""
    return getattr(t, "_vs_val", None)


def set_value(t, v, assumed: bool = False) -> None:
    """Attach CPU values to `t` (None: forget them); `assumed`: they were computed over zeros
    standing in for values the twin does not carry."""
    if v is None:
        if getattr(t, "_vs_val", None) is not None:
            t._vs_val = None
            t._vs_assumed = False
    else:
        t._vs_val = v
        if assumed or getattr(t, "_vs_assumed", False):
            t._vs_assumed = assumed


def standin(t):
    """The one value every element of `t` stands in as where the twin carries no values for it
    (`Capture.standins`: the op run over its operands' stand-ins), or None: zero."""
    return getattr(t, "_vs_standin", None)


def set_standin(t, s) -> None:
    """Set `t`'s stand-in (`standin`); None: zero."""
    if s is not None or getattr(t, "_vs_standin", None) is not None:
        t._vs_standin = s


def fast_setup_layout(out, operands):
    """The layout TensorIterator's fast setup gives a pointwise result (`compute_fast_setup_type`,
    TensorIterator.cpp): when every tensor operand has the result's sizes and all are contiguous,
    a contiguous result, else when all are channels-last, a channels-last one; this holds where
    size-1 dimensions make both layouts fit ("NC11 always treated as contiguous"), which the
    Python meta kernels order by stride instead (blind37/ak02's H200 per-op truth: the (8, 240, 1,
    1) gradients of MobileNetV3's squeeze-excitation blocks)."""
    if out.dim() < 2 or 1 not in out.shape:
        return out
    ins = [a for a in operands if isinstance(a, torch.Tensor)]
    if not ins or any(a.shape != out.shape for a in ins):
        return out
    if all(a.is_contiguous() for a in ins):
        fmt = torch.contiguous_format
    elif out.dim() == 4 and all(a.is_contiguous(memory_format=torch.channels_last) for a in ins):
        fmt = torch.channels_last
    elif out.dim() == 5 and all(a.is_contiguous(memory_format=torch.channels_last_3d) for a in ins):
        fmt = torch.channels_last_3d
    else:
        return out
    if out.stride() == _dense_strides(out.shape, fmt):
        return out
    return torch.empty(out.shape, dtype=out.dtype, device=out.device, memory_format=fmt)


def contiguous_strides(shape) -> tuple:
    """The strides of a contiguous tensor of `shape` (a size-0 dimension counted as 1, as
    `computeStride` in c10's TensorImpl does)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _dense_strides(shape, fmt) -> tuple:
    """The strides `torch.empty(shape, memory_format=fmt)` gives."""
    return torch.empty(shape, device="meta", memory_format=fmt).stride()


#: the simulated storages (`untyped_storage()._cdata`) some of whose elements an op overwrote with
#: values the twin does not compute, through one tensor over them: the values the others over that
#: storage still carry (a base, its other views) are partly stale, so read as assumed (`assumed`)
_stale: set = set()


def set_stale(t) -> None:
    """Mark `t`'s simulated storage as holding values the twin does not know (`_stale`)."""
    if registered(t):
        with _NO_TF():
            _stale.add(t.untyped_storage()._cdata)


def forget_stale(key) -> None:
    """A simulated storage freed: its key may name another one later."""
    _stale.discard(key)


def assumed(t) -> bool:
    """Whether `t`'s values were computed over zeros standing in for unknown values, or are the
    values it carried before an op wrote unknown ones into part of its storage (`_stale`)."""
    if getattr(t, "_vs_assumed", False):
        return True
    if not _stale or getattr(t, "_vs_val", None) is None:
        return False
    with _NO_TF():
        try:
            return t.untyped_storage()._cdata in _stale
        except NotImplementedError:
            return False


#: the simulated storages that hold a normal draw the twin carries no values of, by
#: `untyped_storage()._cdata`: the draw's dtype and the interval its every value lies in
#: (`set_range`); dropped at any write to the storage and when it is freed
_ranges: dict = {}


def set_range(t, lo: float, hi: float) -> None:
    """Note that every element of `t`'s simulated storage, read as `t`'s dtype, lies in [lo, hi]."""
    if registered(t):
        with _NO_TF():
            _ranges[t.untyped_storage()._cdata] = (t.dtype, lo, hi)


def range_of(t):
    """The interval (lo, hi) every value of `t` lies in, where `t` views a storage of a normal draw
    in the draw's dtype (any view: a slice of a draw is within its range); None otherwise."""
    if not _ranges or not registered(t):
        return None
    with _NO_TF():
        held = _ranges.get(t.untyped_storage()._cdata)
    if held is None or held[0] != t.dtype:
        return None
    return held[1], held[2]


def forget_range(t) -> None:
    """`t`'s storage written (or `t` a storage key, freed): its draw's interval and its index facts
    (`set_fact`) no longer hold."""
    if not (_ranges or _facts):
        return
    if isinstance(t, int):
        key = t
    elif registered(t):
        with _NO_TF():
            key = t.untyped_storage()._cdata
    else:
        return
    _ranges.pop(key, None)
    _facts.pop(key, None)


#: facts the twin knows of index tensors whose values it does not carry, by simulated storage
#: (`untyped_storage()._cdata`): (sizes, strides, offset, fact), fact ("perm", d): along dimension
#: d every row is a permutation of 0..n-1 (a sort's indices, whatever the values sorted), or
#: ("count", n): n elements are nonzero (those ranks compared with a known bound); dropped at any
#: write to the storage and when it is freed (`forget_range`)
_facts: dict = {}


def set_fact(t, fact) -> None:
    """Note `fact` (`_facts`) of the tensor `t` (that view of its storage alone)."""
    if registered(t):
        with _NO_TF():
            _facts[t.untyped_storage()._cdata] = (
                tuple(t.shape),
                tuple(t.stride()),
                t.storage_offset(),
                fact,
            )


def fact_of(t):
    """The fact noted of `t` by `set_fact` (the same view of the storage), or None."""
    if not _facts or not registered(t):
        return None
    with _NO_TF():
        held = _facts.get(t.untyped_storage()._cdata)
        if held is None or held[:3] != (tuple(t.shape), tuple(t.stride()), t.storage_offset()):
            return None
    return held[3]


class Storage:
    """An allocation held by Python code (a kernel's scratch): freed when
    this object dies."""

    __slots__ = ("handle", "nbytes", "owner")

    def __init__(self, owner, nbytes: int, handle):
        self.owner = owner
        self.nbytes = nbytes
        self.handle = handle

    def __del__(self):
        h = self.handle
        if h is not None:
            self.handle = None
            owner = self.owner
            if owner is not None and owner.active:
                owner.free(h)


_WRAPPED = torch._C._functorch.is_functorch_wrapped_tensor
_UNWRAP = torch._C._functorch.get_unwrapped


def wraps_registered(t) -> bool:
    """Whether `t` is a functorch wrapper (`grad`'s TensorWrapper, `vmap`'s BatchedTensor, any
    depth) of a simulated tensor: on the GPU it is a CUDA tensor (its device is the wrapped
    tensor's, and `getKeysToPropagateToWrapper` gives it the CUDA backend bit), so C++ code that
    checks `is_cuda()` or the device type (Dropout.cpp's fused kernel, autocast's
    `is_eligible`) takes the CUDA path for it."""
    if not isinstance(t, torch.Tensor) or not _WRAPPED(t):
        return False
    while _WRAPPED(t):
        t = _UNWRAP(t)
    return registered(t)


def wraps_ours(t) -> bool:
    """`wraps_registered`, outside the kernels (as `is_ours` is `registered` there)."""
    return not (_in_kernel[0] and _kernel_here()) and wraps_registered(t)


#: the mark of a fake tensor of the program's own FakeTensorMode made for `cuda` and kept on the host
#: (`_compile._fake_new`)
PROGRAM_CUDA = "_vramscope_cuda"


def moved_to_meta(t) -> bool:
    """Whether `t` is a wrapper subclass asked for on the CUDA device and made on the meta device
    (`_make_wrapper_subclass` below: a DTensor, an AsyncCollectiveTensor, a jagged nested tensor)."""
    return isinstance(t, torch.Tensor) and getattr(t, _MOVED, False)


def cuda_wrapper(t) -> bool:
    """Whether `t` is a wrapper subclass made on the meta device for CUDA (`moved_to_meta`) that
    leaves torch functions to C++ (its `__torch_function__` disabled: a DTensor, an
    AsyncCollectiveTensor). On the GPU its device is CUDA: its autograd key is AutogradCUDA and the
    C++ composites that read `is_cuda()` take their CUDA paths on it; here its key set is meta's."""
    return moved_to_meta(t) and type(t).__torch_function__ is torch._C._disabled_torch_function_impl


def _reads_cuda(t) -> bool:
    """`is_ours(t)`, or `t` a wrapper subclass asked for on the CUDA device and made on the meta
    device (`_make_wrapper_subclass` below: a DTensor, an AsyncCollectiveTensor, a jagged nested
    tensor) or a jagged nested tensor whose values are ours: they read as CUDA like them; or a
    functorch wrapper (`grad`'s TensorWrapper, `vmap`'s BatchedTensor) of one: the wrapper takes the
    device of the tensor it wraps (functorch/TensorWrapper.cpp's and BatchedTensorImpl.cpp's
    constructors pass `value.device()`), so `x.device` under a transform reads `cuda:0` on the GPU."""
    if is_ours(t) or wraps_ours(t):
        return True
    if getattr(t, _MOVED, False):
        return True
    if getattr(t, PROGRAM_CUDA, False) is True and not t.fake_mode.in_kernel_invocation:
        # a fake tensor of the program's own FakeTensorMode made for `cuda`, kept on the host
        # (`_compile._program_fake_mode`)
        return True
    values = getattr(t, "_values", None)
    return values is not None and _NESTED[0] is not None and type(t) is _NESTED[0] and is_ours(values)


def _device(self):
    if _reads_cuda(self):
        return CUDA0
    with _NO_TF():
        return _DEVICE(self)


def device_type(t) -> str:
    """`t.device.type`; inside the kernels on this thread a plain tensor's read by the C getter
    alone, as `_device` reads it there (`_reads_cuda` is false for it: `is_ours` and `wraps_ours`
    are false inside the kernels), without its Python."""
    if type(t) in _PLAIN_TYPES and _in_kernel[0] and _kernel_here():
        with _NO_TF():
            return _DEVICE(t).type
    return t.device.type


def _is_cuda(self):
    if _reads_cuda(self):
        return True
    with _NO_TF():
        return _IS_CUDA(self)


def _is_meta(self):
    if _reads_cuda(self):
        return False
    with _NO_TF():
        return _IS_META(self)


def _get_device(self):
    if torch.compiler.is_dynamo_compiling():
        # dynamo inlines this method for `t.get_device()` and cannot trace its C calls (a graph
        # break a plain run has not): the constant a plain run's trace makes of it, from the traced
        # tensor's device (torch/_dynamo/variables/tensor.py `method_get_device`)
        device = self.device
        return device.index if device.type != "cpu" else -1
    if _reads_cuda(self):
        return 0
    with _NO_TF():
        return _BASE.get_device(self)


def _repr(self, *, tensor_contents=None):
    if not is_ours(self):
        return _ORIGINAL_REPR(self, tensor_contents=tensor_contents)
    if self.layout is torch.strided:
        # torch's own formatter over the simulated tensor, as `Tensor.__repr__` runs it
        # (torch/_tensor_str.py `_str`: no_grad, functorch off), but under the twin's modes, which
        # `_str`'s `_disable_current_modes()` would take off: on a CUDA tensor `_Formatter`
        # computes on the device (isfinite, ne, masked_select, abs, min, max, ceil, div and the
        # comparisons; a summarized tensor's cat and stack) before `.tolist()` copies to the host.
        # H100 (oe81_api_corners_probe_h100.out): a 4x4 and a 0-d fp32 randn, 21 allocations and
        # a 3,072-byte peak each; 2,000 int64, 1 and 512 (the summary's cat)
        v = value(self)
        lent = v is None and standin(self) is None and (self.is_floating_point() or self.is_complex())
        if lent:
            # no values: the formatter's branches (masked_select's count, the integer check's early
            # break, the scientific-notation tests) take the elements as nonzero, finite, not
            # integers and of one magnitude, as float data (a randn draw, activations, weights)
            # is; one value lent for the print, any such one taking the same branches. H100: a
            # 4096x4096 randn, fp32 and bf16, 28 allocations and a 3,584-byte peak each (the
            # summary's 6 cats and its stack, then the formatter's 21 over its 36 elements);
            # over zeros, masked_select's result was empty and the formatter stopped at 16
            try:
                one = torch.full((), 0.5 + 0.5j if self.is_complex() else 0.5, dtype=self.dtype)
            except (RuntimeError, TypeError):  # a dtype the host cannot fill (the formatter's zeros then)
                lent = False
            else:
                set_value(self, one.expand(self.shape))
        try:
            with torch.no_grad():
                guard = torch._C._DisableFuncTorch()  # noqa: F841 (as `_str` holds it)
                text = torch._tensor_str._str_intern(self, tensor_contents=tensor_contents)
        finally:
            if lent:
                set_value(self, None)
        if v is not None:
            return text
        # no values: the text says so (the formatter's would show the lent value)
    extra = ""
    if self.grad_fn is not None:
        extra = f", grad_fn=<{type(self.grad_fn).__name__}>"
    elif self.requires_grad:
        extra = ", requires_grad=True"
    v = value(self)
    if v is not None:
        body = repr(v).removeprefix("tensor(").rsplit(")", 1)[0]
        return f"tensor({body}, device='cuda:0'{extra})"
    return f"tensor(..., device='cuda:0', size={tuple(self.shape)}, dtype={self.dtype}{extra})"


_ORIGINAL_REPR = torch.Tensor.__repr__


def patch_tensor(p) -> None:
    """Install the `Tensor` properties that read simulated tensors as CUDA."""
    p.set(torch.Tensor, "device", property(_device))
    p.set(torch.Tensor, "is_cuda", property(_is_cuda))
    p.set(torch.Tensor, "is_meta", property(_is_meta))
    p.set(torch.Tensor, "get_device", _get_device)
    p.set(torch.Tensor, "__repr__", _repr)
    p.set(torch.Tensor, "_make_wrapper_subclass", _make_wrapper_subclass)


#: `torch.nested._internal.nested_tensor.NestedTensor` once a jagged nested tensor was made
_NESTED = [None]
_MAKE_WRAPPER = torch.Tensor._make_wrapper_subclass


#: the attribute that marks a wrapper subclass asked for on CUDA and made on the meta device (an
#: attribute, not a weak reference: `torch.utils.swap_tensors`, which `nn.Module._apply` uses for
#: FSDP2's parameters, refuses tensors with weak references)
_MOVED = "_vramscope_reads_cuda"
#: the wrapper subclasses that wrap simulated tensors and are made on the meta device for CUDA
_MOVED_CLASSES = {
    ("torch.nested._internal.nested_tensor", "NestedTensor"),
    ("torch.distributed.tensor", "DTensor"),
    ("torch.distributed.tensor._api", "DTensor"),
    ("torch.distributed._functional_collectives", "AsyncCollectiveTensor"),
}


@staticmethod
def _make_wrapper_subclass(cls, *args, **kwargs):
    """`Tensor._make_wrapper_subclass` that makes a wrapper asked for on the CUDA device (a DTensor
    or an AsyncCollectiveTensor over simulated local tensors, a jagged nested tensor over simulated
    values: their `__new__` passes the inner tensor's `device`, which reads cuda:0) on the meta
    device, as the tensors it wraps are: a wrapper on a real CUDA device makes autograd take that
    device's stream for it (`InputMetadata`, a driver call that aborts the process)."""
    if cls.__name__ == "NestedTensor" and cls.__module__ == "torch.nested._internal.nested_tensor":
        _NESTED[0] = cls
    if (cls.__module__, cls.__name__) not in _MOVED_CLASSES:
        # other wrappers (a compile's FunctionalTensor over fake CUDA tensors) keep their device
        return _MAKE_WRAPPER(cls, *args, **kwargs)
    args = list(args)
    moved = False
    if len(args) > 6:
        if args[6] is not None and torch.device(args[6]).type == "cuda":
            args[6], moved = torch.device("meta"), True
    elif kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cuda":
        kwargs["device"], moved = torch.device("meta"), True
    out = _MAKE_WRAPPER(cls, *args, **kwargs)
    if moved:
        setattr(out, _MOVED, True)
    return out


def registered_in(tree) -> list:
    """`[t for t in tensors_in(tree) if registered(t)]`: the simulated tensors among an op's
    arguments, in order, found in one walk with torch functions off once for all of them."""
    registry = _registry
    if registry is None:
        return []
    found = []
    with _NO_TF():
        # (a tuple's items walked at once: an op's `(args, kwargs)`)
        _registered_among(tree if type(tree) is tuple else (tree,), registry, found)
    return found


def _registered_among(items, registry, found) -> None:
    """`registered_in`'s walk: the simulated tensors among `items` (and the lists, tuples and dicts
    among them, depth first) appended to `found`, torch functions off."""
    tensor = torch.Tensor
    for x in items:
        if isinstance(x, tensor):
            if _IS_META(x):
                try:
                    if x.untyped_storage()._cdata in registry:
                        found.append(x)
                except NotImplementedError:
                    if registered(x):  # sparse COO or CSR, a functorch wrapper: as `registered` decides
                        found.append(x)
        elif isinstance(x, (list, tuple)):
            _registered_among(x, registry, found)
        elif isinstance(x, dict):
            _registered_among(x.values(), registry, found)


def tensors_in(tree) -> list:
    """The tensors among an op's arguments (lists, tuples and dicts of them), in order."""
    found = []
    stack = [tree]
    tensor = torch.Tensor
    while stack:
        x = stack.pop()
        if isinstance(x, tensor):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(x.values()))
    return found


def leaves(tree) -> list:
    """`torch.utils._pytree.tree_flatten(tree)[0]`: depth first, a dict's values in its order;
    walked here for the plain lists, tuples and dicts that an op's arguments and results come
    in, by pytree itself where the tree holds another of its node types (`torch.Size`, a named
    tuple, an `OrderedDict`)."""
    found = []
    stack = [tree]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is list or t is tuple:
            stack.extend(reversed(x))
        elif t is dict:
            stack.extend(reversed(list(x.values())))
        elif t in SUPPORTED_NODES or isinstance(x, tuple):
            return tree_flatten(tree)[0]
        else:
            found.append(x)
    return found


def map_leaves(fn, tree):
    """`torch.utils._pytree.tree_map(fn, tree)`, walked here for plain lists, tuples and dicts
    (as `leaves`)."""
    t = type(tree)
    if t is list:
        return [map_leaves(fn, x) for x in tree]
    if t is tuple:
        return tuple([map_leaves(fn, x) for x in tree])
    if t is dict:
        return {k: map_leaves(fn, v) for k, v in tree.items()}
    if t in SUPPORTED_NODES or isinstance(tree, tuple):
        return tree_map(fn, tree)
    return fn(tree)
