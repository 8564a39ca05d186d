"""The connectionist temporal classification loss as PyTorch 2.11 runs it on CUDA.

`F.ctc_loss` is a composite (aten/src/ATen/native/LossCTC.cpp) whose CUDA path calls `_ctc_loss`,
and autograd `_ctc_loss_backward` (aten/src/ATen/native/cuda/LossCTC.cu). Neither has a meta kernel,
so the rules below give their outputs and allocate what LossCTC.cu allocates, in its order:

- `_ctc_loss`: the target and input lengths and the per-sample target offsets as three int64 device
  tensors of the batch's size, then `log_alpha` (batch, time, 2 * longest target + 1) and the
  negative log likelihood (batch); the three die at the return;
- `_ctc_loss_backward`: the same three, `log_beta` (as `log_alpha`), the gradient (as `log_probs`);
  on a "large" problem (`2*T + 24*B/10 + 2*C/10 > 450`) the blanks' term: the sum of two strided
  halves of `log_alpha` and `log_beta`, reduced by `logsumexp` (`amax`, `abs() == inf`, `(self -
  maxes).exp_()`, the sum), and with `zero_infinity` the gradient replaced by `at::where`'s.

The longest target is data: the lengths' values where the twin carries them (small tensors and
lists do), else the targets' width (2-D) or count (1-D), the largest it can be.
"""

from __future__ import annotations

import torch

from . import _kernels
from ._tensor import registered, value

aten = torch.ops.aten

_FORWARD = ("log_probs", "targets", "input_lengths", "target_lengths", "blank", "zero_infinity")
_BACKWARD = (
    "grad",
    "log_probs",
    "targets",
    "input_lengths",
    "target_lengths",
    "neg_log_likelihood",
    "log_alpha",
    "blank",
    "zero_infinity",
)


def _lengths(x) -> list | None:
    """A lengths argument's values: an int list, or a tensor's carried values (None: unknown)."""
    if isinstance(x, torch.Tensor):
        v = value(x) if registered(x) else (x if x.device.type == "cpu" else None)
        return None if v is None else [int(n) for n in v.reshape(-1).tolist()]
    return [int(n) for n in x]


def _longest_target(cap, targets, target_lengths, op: str) -> int:
    """`max_target_length` of LossCTC.cu: the largest target length."""
    lengths = _lengths(target_lengths)
    if lengths is not None:
        return max(lengths, default=0)
    cap.warn_once(
        "ctc-lengths",
        f"{op}: the target lengths carry no values; the longest target is taken as the targets' "
        "width, the largest it can be",
    )
    return targets.shape[1] if targets.dim() == 2 else targets.numel()


def _meta(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _ctc_loss(cap, func, args, kwargs):
    a = dict(zip(_FORWARD, args, strict=False)) | kwargs
    lp, targets = a["log_probs"], a["targets"]
    if not registered(lp) or lp.dim() != 3:
        return NotImplemented
    cap.ops += 1
    op = "aten::_ctc_loss"
    steps, batch = lp.shape[0], lp.shape[1]
    longest = _longest_target(cap, targets, a["target_lengths"], op)
    target_lengths_t = cap.malloc(8 * batch, op, "temporary")
    input_lengths_t = cap.malloc(8 * batch, op, "temporary")
    batch_offsets = cap.malloc(8 * batch, op, "temporary")
    log_alpha = cap.track(_meta((batch, steps, 2 * longest + 1), lp.dtype), op)
    nll = cap.track(_meta((batch,), lp.dtype), op)
    del input_lengths_t, target_lengths_t, batch_offsets
    return nll, log_alpha


def _ctc_loss_backward(cap, func, args, kwargs):
    a = dict(zip(_BACKWARD, args, strict=False)) | kwargs
    lp, targets, log_alpha = a["log_probs"], a["targets"], a["log_alpha"]
    if not (registered(lp) and registered(log_alpha)) or lp.dim() != 3:
        return NotImplemented
    cap.ops += 1
    op = "aten::_ctc_loss_backward"
    steps, batch, labels = lp.shape
    if targets.dim() == 1:
        longest = _longest_target(cap, targets, a["target_lengths"], op)
    else:
        longest = log_alpha.shape[2] // 2
    elem = lp.element_size()
    target_lengths_t = cap.malloc(8 * batch, op, "temporary")
    input_lengths_t = cap.malloc(8 * batch, op, "temporary")
    batch_offsets = cap.malloc(8 * batch, op, "temporary")
    log_beta = cap.malloc(log_alpha.numel() * log_alpha.element_size(), op, "temporary")
    large = (2 * steps + (24 * batch) // 10 + (2 * labels) // 10) > 450
    replaced = large and bool(a.get("zero_infinity", False))
    if replaced:
        first = cap.malloc(lp.numel() * elem, op, "temporary")
    else:
        grad = cap.track(_meta(lp.shape, lp.dtype), op)
    if large:
        rows = batch * steps
        halves = cap.malloc(rows * (longest + 1) * elem, op, "temporary")
        sizes, reduced, acc = [batch, steps, longest + 1], [False, False, True], _kernels._acc_bytes(lp.dtype)
        maxes = cap.malloc(rows * elem, "aten::logsumexp", "temporary")
        _kernels.reduce_scratch(cap, sizes, None, reduced, elem, acc, "aten::logsumexp")
        magnitude = cap.malloc(rows * elem, "aten::logsumexp", "temporary")
        infinite = cap.malloc(rows, "aten::logsumexp", "temporary")
        del infinite, magnitude
        shifted = cap.malloc(rows * (longest + 1) * elem, "aten::logsumexp", "temporary")
        summed = cap.malloc(rows * elem, "aten::logsumexp", "temporary")
        _kernels.reduce_scratch(cap, sizes, None, reduced, elem, acc, "aten::logsumexp")
        del shifted, maxes
        del summed, halves
        if replaced:
            # at::where's arguments, evaluated right to left: `zeros({})`, then the comparison
            zero = cap.malloc(elem, "aten::where", "temporary")
            infinite = cap.malloc(batch, "aten::where", "temporary")
            grad = cap.track(_meta(lp.shape, lp.dtype), op)
            # the comparison and the zeros go first, then the replaced gradient (the H100's order:
            # mx64's probe, dev_long64's backward)
            del infinite, zero, first
    del log_beta, input_lengths_t, target_lengths_t, batch_offsets
    return grad


def _use_cudnn(lp, dtype, targets, blank, ilv, tlv) -> bool:
    """`_use_cudnn_ctc_loss` (native/cudnn/LossCTC.cpp), the IntArrayRef overload that
    `ctc_loss_impl` (native/LossCTC.cpp) asks for a CUDA `log_probs`: cuDNN enabled, blank 0,
    float32 3-D log-probabilities, 1-D contiguous int32 targets on the host, every input as long
    as `log_probs`, every target shorter than 256 and not longer than its input. The twin's
    tensors are meta ones to C++, which never passes that CUDA check, so it is asked here."""
    return (
        torch.backends.cudnn.enabled
        and blank == 0
        and lp.dim() == 3
        and dtype == torch.float32
        and isinstance(targets, torch.Tensor)
        and not registered(targets)
        and targets.device.type == "cpu"
        and targets.dim() == 1
        and targets.dtype == torch.int32
        and targets.is_contiguous()
        and all(n == lp.shape[0] for n in ilv)
        and all(t < 256 and t <= i for t, i in zip(tlv, ilv, strict=False))
    )


def _use_cudnn_tensor(dtype, targets, blank, il, tl, ilv, tlv) -> bool:
    """`_use_cudnn_ctc_loss_tensor` (native/cudnn/LossCTC.cpp), which LossCTC.cpp's `ctc_loss`
    overload for tensors asks first for a CUDA `log_probs` ("we don't want to convert to IntArrayRef
    if we can dispatch to cuDNN"): cuDNN enabled, blank 0, float32 3-D log-probabilities, 1-D
    contiguous int32 targets on either device, int32 lengths, every target shorter than 256 and not
    longer than its input -- neither host targets nor full-length inputs are asked for."""
    return (
        torch.backends.cudnn.enabled
        and blank == 0
        and dtype == torch.float32
        and isinstance(targets, torch.Tensor)
        and targets.dim() == 1
        and targets.dtype == torch.int32
        and targets.is_contiguous()
        and il.dtype == torch.int32
        and tl.dtype == torch.int32
        and all(t < 256 and t <= i for t, i in zip(tlv, ilv, strict=False))
    )


def _cudnn_ctc(lp, targets, ilv, tlv, blank, reduction, zero_infinity):
    """`ctc_loss_impl`'s cuDNN branch (native/LossCTC.cpp): `_cudnn_ctc_loss(..., deterministic=
    true, zero_infinity)`'s losses (no `where` for infinities there: `_cudnn_ctc_loss_backward`
    zeroes those gradients), then the mean over `at::tensor(target_lengths, res.options())`
    (a host tensor copied to the device, clamped to 1) or the sum."""
    res = torch._cudnn_ctc_loss(lp, targets, ilv, tlv, blank, True, zero_infinity)[0]
    if reduction == 1:
        lengths = torch.tensor(tlv, dtype=res.dtype).to(res.device).clamp_min(1)
        return (res / lengths).mean()
    if reduction == 2:
        return res.sum()
    return res


def _cudnn_ctc_over_tensors(lp, targets, il, tl, blank, reduction, zero_infinity):
    """`ctc_loss_impl` over the tensors (native/LossCTC.cpp) where `_use_cudnn_tensor` holds:
    `_cudnn_ctc_loss.Tensor`'s losses, then the mean over `target_lengths.clamp_min(1)` on the
    lengths' own device -- host lengths raise TensorIterator's "Expected all tensors to be on the
    same device" there (ap63's probe on the H100: host int32 targets and lengths, mean) -- or the sum.
    Not the dispatcher's device check: `_cudnn_ctc_loss.Tensor` is `device_check: NoCheck`
    (native_functions.yaml) and copies host targets and lengths to the device itself, and the H100's
    message has no "(when checking argument ...)" tail, so host tensors with a sum or no reduction run."""
    res = torch._cudnn_ctc_loss(lp, targets, il, tl, blank, True, zero_infinity)[0]
    if reduction == 1:
        return (res / tl.clamp_min(1)).mean()
    if reduction == 2:
        return res.sum()
    return res


def _ctc_loss_tensor_lengths(cap, func, args, kwargs):
    """`F.ctc_loss`. LossCTC.cpp's `ctc_loss` overload for tensors takes the
    composite path (`ctc_loss_impl` over the tensors: the mean divides by
    `target_lengths.clamp_min(1)`, int64 on the lengths' device) only for subclass-like tensors,
    which the twin's are; a plain tensor has its lengths copied to the host and the IntArrayRef
    overload called, whose mean divides by `at::tensor(target_lengths, res.options())`: a host tensor
    copied to the device in the losses' dtype, then clamped (blind180/fx01's H200 history:
    `_to_copy`, `clamp_min` and `div` of 4 * batch bytes each, where the twin made an int64 clamp).
    The lengths' values must be known (as `_lengths` reads them), else the composite path stays.
    Before either, the tensor overload asks `_use_cudnn_tensor` and, where it holds, runs
    `ctc_loss_impl` over the tensors (`_cudnn_ctc_over_tensors`); otherwise, where `_use_cudnn`
    holds (lengths as lists, or tensors that failed the first check), cuDNN's IntArrayRef loss runs
    (blind281 probing: a CRNN's host int32 targets and full-length inputs); both after autocast's
    float32 cast."""
    names = ("log_probs", "targets", "input_lengths", "target_lengths", "blank", "reduction", "zero_infinity")
    a = dict(zip(names, args, strict=False)) | kwargs
    lp, il, tl = a.get("log_probs"), a.get("input_lengths"), a.get("target_lengths")
    reduction = {"none": 0, "mean": 1, "sum": 2}.get(a.get("reduction", "mean"))
    if set(a) - set(names) or reduction is None or not registered(lp):
        return NotImplemented
    tensors = isinstance(il, torch.Tensor) and isinstance(tl, torch.Tensor)
    if tensors and (il.is_floating_point() or tl.is_floating_point()):
        return NotImplemented
    try:
        ilv, tlv = _lengths(il), _lengths(tl)
    except TypeError:
        return NotImplemented
    if ilv is None or tlv is None:
        return NotImplemented
    blank, zero_infinity = a.get("blank", 0), a.get("zero_infinity", False)
    # `ctc_loss` runs in float32 under autocast (autocast_mode.cpp's fp32 list)
    cast = torch.is_autocast_enabled("cuda") and lp.dtype in (torch.float16, torch.bfloat16)
    dtype = torch.float32 if cast else lp.dtype
    if (
        tensors
        and lp.is_cuda
        and lp.dim() == 3
        and _use_cudnn_tensor(dtype, a["targets"], blank, il, tl, ilv, tlv)
    ):
        x = lp.float() if cast else lp
        with torch.autocast("cuda", enabled=False):
            return _cudnn_ctc_over_tensors(x, a["targets"], il, tl, blank, reduction, zero_infinity)
    if lp.is_cuda and _use_cudnn(lp, dtype, a["targets"], blank, ilv, tlv):
        x = lp.float() if cast else lp
        with torch.autocast("cuda", enabled=False):
            return _cudnn_ctc(x, a["targets"], ilv, tlv, blank, reduction, zero_infinity)
    if not tensors:
        return NotImplemented
    return torch.ctc_loss(lp, a["targets"], ilv, tlv, blank, reduction, zero_infinity)


def _cudnn_ctc_loss(cap, func, args, kwargs):
    """`_cudnn_ctc_loss` (native/cudnn/LossCTC.cpp): the raw gradient `empty_like(log_probs,
    LEGACY_CONTIGUOUS_MEMORY_FORMAT)` (kept by autograd for `_cudnn_ctc_loss_backward`), cuDNN's
    workspace `at::empty(workspace_size)` from `cudnnGetCTCLossWorkspaceSize` (not measured: taken
    as empty, named unmeasured), then the per-sample losses; the workspace dies at the return."""
    lp = args[0]
    if not registered(lp) or lp.dim() != 3:
        return NotImplemented
    cap.ops += 1
    op = "aten::_cudnn_ctc_loss"
    moved = []
    if func is aten._cudnn_ctc_loss.Tensor:
        # `_cudnn_ctc_loss_tensor` first copies host operands to the device: the targets, the input
        # lengths, and the target lengths where the *input* lengths are on the host (its condition)
        targets, il, tl = args[1:4]
        host = [targets] + ([il, tl] if il.device.type == "cpu" else [])
        for t in host:
            if t.device.type == "cpu":
                moved.append(cap.malloc(t.numel() * t.element_size(), op, "temporary"))
    grad = cap.track(_meta(lp.shape, lp.dtype), op)
    if func is aten._cudnn_ctc_loss.Tensor:
        nbytes = _ctc_workspace_v8(*lp.shape)
    else:
        nbytes = _ctc_workspace_v7(*lp.shape, max(args[3], default=0))
        cap.note_unmeasured(
            "cuDNN's CTC loss workspace (cudnnGetCTCLossWorkspaceSize, integer-list lengths)",
            f"cuDNN's CTC loss workspace of log_probs {tuple(lp.shape)} with lengths given as lists "
            "(cudnnGetCTCLossWorkspaceSize) was fitted from two H100 problems of equal target lengths: "
            f"taken as {nbytes} bytes",
        )
    ws = cap.malloc(nbytes, op, "workspace") if nbytes else None
    costs = cap.track(_meta((lp.shape[1],), lp.dtype), op)
    del ws, moved
    return costs, grad


#: `ctc_loss_desc.set_v8_v9(..., 255)`: the maximum label length PyTorch gives cuDNN's v8 CTC loss
#: (native/cudnn/LossCTC.cpp, `_cudnn_ctc_loss_tensor`)
_CTC_V8_MAX_LABEL = 255


def _ctc_workspace_v8(t: int, b: int, c: int) -> int:
    """`cudnnGetCTCLossWorkspaceSize_v8(CUDNN_CTC_LOSS_ALGO_DETERMINISTIC)` for float log_probs (T, B,
    C): 4 * B * (T * C + 2 * T * (2 * 255 + 1) + 513) bytes, as the H100 measured it for four problems
    (cuDNN 91900; session 64, probes/mx64_ctc_tensor_lengths_and_no_meta_ops_probe.py, fixtures/run/
    probes/mx64_ctc_tensor_lengths_probe_s64_h100.txt: (200, 64, 80), (100, 256, 6000), (400, 32, 37),
    (64, 512, 96) took 56,553,728, 719,578,112, 54,286,464 and 147,589,120 bytes): a softmax-sized
    scratch and forward and backward variables over the 2 * 255 + 1 states of the descriptor's
    maximum label length, whatever the targets' lengths."""
    states = 2 * _CTC_V8_MAX_LABEL + 1
    return 4 * b * (t * c + 2 * t * states + states + 2)


def _ctc_workspace_v7(t: int, b: int, c: int, max_label: int) -> int:
    """`cudnnGetCTCLossWorkspaceSize` (the integer-list overload, its labels and lengths on the host)
    for float log_probs (T, B, C) and targets of at most `max_label`: 4 * B * (T * C + 2 * T * (2L + 1)
    + 3L + 5) bytes with L the longest target, fitted from the H100's two problems (the same probe:
    (200, 64, 80) with L 30 took 10,366,720 bytes, (100, 256, 6000) with L 40 631,116,800); which
    length cuDNN sizes by when they differ is not measured."""
    states = 2 * max_label + 1
    return 4 * b * (t * c + 2 * t * states + 3 * max_label + 5)


_kernels.FUNCTIONS[torch.nn.functional.ctc_loss] = _ctc_loss_tensor_lengths
for _f in (aten._ctc_loss.default, aten._ctc_loss.Tensor):
    _kernels.DISPATCH[_f] = _ctc_loss
for _f in (aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor):
    _kernels.DISPATCH[_f] = _ctc_loss_backward
_kernels.DISPATCH[aten._cudnn_ctc_loss.default] = _cudnn_ctc_loss
_kernels.DISPATCH[aten._cudnn_ctc_loss.Tensor] = _cudnn_ctc_loss
