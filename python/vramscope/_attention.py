"""`F.scaled_dot_product_attention` as PyTorch 2.11 runs it on an sm_90 GPU.

The backend filters of `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`
(as the eager twin keeps them, `crates/engine/src/ops/attention.rs`); the
fused kernel is then called by its ATen name, so autograd saves what the GPU
saves, and the dispatch rules below allocate what the CUDA kernels allocate,
in their order.
"""

from __future__ import annotations

import math
import sys
import threading

import torch

from . import _autocast, _kernels, _nested
from ._tensor import assumed, is_ours, registered, value

aten = torch.ops.aten
HALF = (torch.float16, torch.bfloat16)


def _heads_ok(q, k, v, gqa: bool, supports_gqa: bool) -> bool:
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    qh, kh, vh = q.shape[-3], k.shape[-3], v.shape[-3]
    if gqa and supports_gqa:
        return kh == vh and kh > 0 and qh % kh == 0
    return qh == kh == vh


def _last_stride_ok(q, k, v, mask, ignore_singleton: bool) -> bool:
    ok = q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    if ignore_singleton:
        ok = ok or q.shape[-1] == 1
    return ok and (mask is None or mask.stride(-1) == 1)


def _mask_dims_check(mask) -> None:
    """`attn_mask.sym_size(-2)` of `check_attn_mask_shape` (sdp_utils_cpp.h): the IndexError of
    `maybe_wrap_dim` on a mask of fewer than 2 dims."""
    if mask.dim() == 0:
        raise IndexError("Dimension specified as -2 but tensor has no dimensions")
    if mask.dim() == 1:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got -2)")


def _mask_shape_ok(q, k, mask) -> bool:
    if mask is None:
        return True
    if mask.requires_grad or mask.dim() < 2:
        return False
    b, h, sq, s = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    ml, ms = mask.shape[-2], mask.shape[-1]
    if ml not in (sq, 1) or ms not in (s, 1):
        return False
    if mask.dim() == 2:
        return True
    return mask.dim() == 4 and mask.shape[0] in (1, b) and mask.shape[1] in (1, h)


def _efficient_dtypes(support) -> tuple:
    """The dtypes the memory-efficient kernel takes (`check_tensor_dtype` in sdp_utils.cpp: bf16
    where the GPU has it)."""
    if support["bf16"]:
        return (torch.float16, torch.float32, torch.bfloat16)
    return (torch.float16, torch.float32)


def _physical(t):
    """The tensor whose storage the device holds: under torch.func's wrappers (`vmap`'s
    BatchedTensor, `grad`'s GradTrackingTensor) and a DTensor's local shard. A DTensor on the GPU
    is a CUDA tensor to `scaled_dot_product_attention`'s composite, which asks the CUDA backend
    choice over its global sizes (attention.cpp `_fused_sdp_choice_stub(query_.device().type(),
    ...)`) and calls the fused op DTensor shards (distributed/tensor/_ops/_matrix_ops.py)."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor._api"), "DTensor", None)
    while isinstance(t, torch.Tensor):
        if torch._C._functorch.is_functorch_wrapped_tensor(t):
            t = torch._C._functorch.get_unwrapped(t)
        elif dtensor is not None and isinstance(t, dtensor):
            t = t._local_tensor
        else:
            break
    return t


def backend(q, k, v, mask, dropout_p, is_causal, gqa, capability, support, traced=False, only=None):
    """`select_sdp_backend`: cudnn, flash, efficient or math; `support` is the GPU's
    hardware checks (`Device.sdpa`, the twin's `SdpaSupport`); `traced`: the tensors are a
    compiled graph's, traced for the simulated GPU (`_compile`). Under torch.func's transforms
    the choice is made on the logical tensors, as `scaled_dot_product_attention`'s composite
    makes it there, and the fused kernels' batch rules (functorch's BatchRulesLinearAlgebra.cpp)
    run them once over the vmapped batch. `only` names one backend: whether it is enabled and its
    checks pass (`can_use_flash_attention` and its siblings, sdp_utils.cpp)."""
    if not traced and not all(registered(_physical(t)) for t in (q, k, v)):
        return False if only else "math"
    four = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same = q.dtype == k.dtype == v.dtype
    nonzero = q.shape[-2] != 0 and k.shape[-2] != 0

    def cudnn():
        if not (support["cudnn"] and four and same and q.dtype in HALF and nonzero):
            return False
        if not (_mask_shape_ok(q, k, mask) and _last_stride_ok(q, k, v, mask, True)):
            return False
        if not _heads_ok(q, k, v, gqa, True):
            return False
        if q.shape[0] > 65535 or q.shape[1] > 65535:
            return False
        d_qk, d_v = q.shape[3], v.shape[3]
        if support["cudnn_hopper_head_dim"]:
            limit = 256
        elif capability[0] == 10 and d_qk == 192 and d_v == 128:
            limit = 192
        else:
            limit = 128
        if d_qk > limit or d_v > limit or d_qk % 8 or d_v % 8:
            return False
        if k.shape[2] == 1:
            return False
        return not (dropout_p != 0.0 and q.shape[2] == 1)

    def flash():
        d = q.shape[-1]
        if support["flash_head_dim_192_limit"] and any(t.requires_grad for t in (q, k, v)):
            # `check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120`
            if 192 < d <= 224 or (d > 224 and dropout_p > 0.0):
                return False
        return (
            support["flash"]
            and four
            and mask is None
            and d == k.shape[-1] == v.shape[-1]
            and d <= 256
            and (not is_causal or q.shape[-2] == k.shape[-2])
            and same
            and q.dtype in HALF
            and _heads_ok(q, k, v, gqa, True)
            and nonzero
            and _last_stride_ok(q, k, v, mask, True)
        )

    def efficient():
        align = 8 if q.dtype in HALF else 4
        dq, dk, dv = q.shape[-1], k.shape[-1], v.shape[-1]
        nbytes = align * q.element_size()
        dtypes = _efficient_dtypes(support)
        return (
            support["efficient"]
            and four
            and dq == dk
            and dq % align == 0
            and dq > 0
            and dv % align == 0
            and dv > 0
            and all(
                t.numel() == 0 or (t.storage_offset() * t.element_size()) % nbytes == 0 for t in (q, k, v)
            )
            and nonzero
            and _last_stride_ok(q, k, v, mask, False)
            and _heads_ok(q, k, v, gqa, False)
            and same
            and q.dtype in dtypes
        )

    checks = {"cudnn": cudnn, "flash": flash, "efficient": efficient}
    # `sdp::select_sdp_backend` skips the backends the context (`sdpa_kernel`, torch.backends.cuda's
    # `enable_*_sdp`) turned off
    enabled = {
        "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "math": torch.backends.cuda.math_sdp_enabled(),
    }
    # `can_use_cudnn_attention`'s constraints run in order (sdp_utils.cpp): past the 4-d shapes
    # and the fp16/bf16 dtypes, `check_attn_mask_shape` reads a mask's `sym_size(-2)` before the
    # hardware and the sequence lengths are checked: a mask of fewer than 2 dims (one that needs no
    # grad) raises there (blind310/ky05's 1-d mask on the H100). Raised from this frame, not a
    # check's closure, whose frame in the error's traceback would hold its cells' tensors
    reads_mask = four and same and q.dtype in HALF and mask is not None and not mask.requires_grad
    if only is not None:
        if only == "cudnn" and enabled["cudnn"] and reads_mask:
            _mask_dims_check(mask)
        return enabled[only] and checks[only]()
    # cuda/sdp_utils.cpp `select_sdp_backend`: every backend off is an error at once; else the first
    # of `priority_order` (the context's, flash, efficient, math, cuDNN unless sm90/sm100 prefer
    # cuDNN first) that is on and passes its checks; none is "No available kernel"
    if not any(enabled.values()):
        return "error"
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
    order = [names[i] for i in torch._C._get_sdp_priority_order() if i in names]
    if support["prefers_cudnn"] and order == ["flash", "efficient", "math", "cudnn"]:
        order = ["cudnn", "flash", "efficient", "math"]
    for name in order:
        if name == "cudnn" and enabled[name] and reads_mask:
            _mask_dims_check(mask)
        if enabled[name] and (name == "math" or checks[name]()):
            return name
    return "unavailable"


_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _bind_sdpa(args, kwargs) -> dict:
    """The arguments by name, or the TypeError PyTorch's argument parser raises
    (`FunctionSignature::parse`, torch/csrc/utils/python_arg_parser.cpp): too many positional ones
    (6 at most: `scale` and `enable_gqa` are keyword-only), one given twice, a required one missing
    (`missing_args` names every required parameter from the first missing one on, given or not, and
    says "argument" for several and "arguments" for one, as it does), then an unknown keyword. The
    stand-in took `F.scaled_dot_product_attention(q, k=keys, v=values)` and failed with KeyError."""
    name = "scaled_dot_product_attention()"
    if len(args) > 6:
        raise TypeError(f"{name} takes from 3 to 6 positional arguments but {len(args)} were given")
    for param in _SDPA_PARAMS[: len(args)]:
        if param in kwargs:
            raise TypeError(f"{name} got multiple values for argument '{param}'")
    for i, param in enumerate(_SDPA_PARAMS[:3]):
        if i >= len(args) and param not in kwargs:
            missing = _SDPA_PARAMS[i:3]
            plural = "s" if len(missing) == 1 else ""
            raise TypeError(
                f"{name} missing {len(missing)} required positional argument{plural}: "
                + ", ".join(f'"{m}"' for m in missing)
            )
    for key in kwargs:
        if key not in _SDPA_PARAMS:
            raise TypeError(f"{name} got an unexpected keyword argument '{key}'")
    a = dict(zip(_SDPA_PARAMS, args, strict=False))
    a.update(kwargs)
    return a


def sdpa(cap, args, kwargs, traced=False):
    """`F.scaled_dot_product_attention` on the simulated GPU, or
    NotImplemented where PyTorch's own composite runs (the math path); `traced`: in a graph
    that `torch.compile` traces for the simulated GPU (`_compile`), whose tensors are meta
    tensors, for which PyTorch's own composite would take the math path."""
    a = _bind_sdpa(args, kwargs)
    if torch.is_autocast_enabled("cuda"):
        # autocast_mode.cpp: `scaled_dot_product_attention` is lower_precision_fp; its tensors are
        # cast (right to left), then the op and everything inside it run with autocast excluded
        dtype = torch.get_autocast_dtype("cuda")
        for name in ("attn_mask", "value", "key", "query"):
            if isinstance(a.get(name), torch.Tensor):
                a[name] = _autocast._cast(a[name], dtype)
        with torch._C._ExcludeDispatchKeyGuard(_autocast._EXCLUDE):
            return _sdpa(cap, a, traced)
    return _sdpa(cap, a, traced)


def sdpa_op(cap, func, args, kwargs):
    """`aten.scaled_dot_product_attention.default` called as an op: the node an exported program's
    graph keeps (torch.export's training IR, which `ep.module()` runs) is the same
    CompositeImplicitAutograd kernel `F.scaled_dot_product_attention` binds (attention.cpp picks
    the fused backend for the CUDA tensors), not the math path the meta tensors' composite takes."""
    q = args[0] if args else kwargs.get("query")
    if not is_ours(_physical(q)):
        return NotImplemented
    return sdpa(cap, args, kwargs)


def _sdpa(cap, a, traced=False):
    q, k, v = a["query"], a["key"], a["value"]
    mask = a.get("attn_mask")
    dropout_p = float(a.get("dropout_p", 0.0) or 0.0)
    is_causal = bool(a.get("is_causal", False))
    scale = a.get("scale")
    gqa = bool(a.get("enable_gqa", False))
    which = backend(q, k, v, mask, dropout_p, is_causal, gqa, cap.device.capability, cap.device.sdpa, traced)
    if registered(_physical(q)):
        # the choice asks cuDNN: its graph library loads (the driver's address-space rule 9)
        cap.device.sdpa_backend_choice()
    if which == "error":
        # attention.cu `_fused_sdp_choice_cuda`
        raise RuntimeError(
            "No viable backend for scaled_dot_product_attention was found. "
            "This is likely due to turning off both the math kernel and the fused kernels."
        )
    if which == "unavailable":
        raise RuntimeError("No available kernel. Aborting execution.")
    cap.sdpa_backends[which] = cap.sdpa_backends.get(which, 0) + 1
    if which == "math" and not traced and not all(registered(t) for t in (q, k, v)):
        return NotImplemented
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    mask = _bool_mask_to_float(mask, q.dtype)
    if which == "math":
        # `scaled_dot_product_attention` keeps the output of `_scaled_dot_product_attention_math`'s
        # (output, weights) tuple: the weights die after the math function's own temporaries, as it
        # returns (attention.cpp; blind168/fl04's H200 history: the bf16 weights of a dropout
        # attention freed after the fp32 upcasts, then the additive mask)
        out, weights = math_attention(q, k, v, mask, dropout_p, is_causal, scale, gqa)
        del weights
        return out
    if which == "cudnn":
        out = _first(
            aten._scaled_dot_product_cudnn_attention(
                q, k, v, mask, needs_grad, dropout_p, is_causal, False, scale=scale
            )
        )
        # the op's other results die with its tuple, before the converted mask (a local of sdpa)
        return out
    if which == "flash":
        # attention.cpp: head dims padded to a multiple of 8 (`pad_last_dim<8, false>`), the scale
        # taken from the unpadded size, the output sliced back (`post_process_flash_output`)
        d = q.shape[-1]
        if d % 8:
            scale = scale if scale is not None else 1.0 / math.sqrt(d)
            q, k, v = (torch.nn.functional.pad(t, (0, 8 - d % 8)) for t in (q, k, v))
        out = _first(
            aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)
        )
        return out[..., :d] if d % 8 else out
    if mask is not None:
        mask = _preprocess_mask(mask, q, k)
    return _first(
        aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, needs_grad, dropout_p, is_causal, scale=scale
        )
    )


def _first(results):
    """The op's first result; the others die first to last, as the `std::tuple` local of
    `scaled_dot_product_attention` (attention.cpp) does: libstdc++ destroys a tuple's elements in
    order, CPython a tuple's items last to first (blind16/p07's H200 history: the logsumexp is
    freed before the philox seed and offset)."""
    results = list(results)
    for i in range(1, len(results)):
        results[i] = None
    return results[0]


def _preprocess_mask(mask, q, k):
    """`preprocess_mask` (attention.cpp, before the memory-efficient kernel): a mask whose strides
    are not multiples of 8 elements (or whose last stride is not 1) is padded on its last dim to
    the next multiple of 8 past it (`pad_bias`: a new tensor, then sliced back), and the mask is
    expanded to (B, H, L, S), so the bias gradient has that size."""
    if not (all(mask.stride(i) % 8 == 0 for i in range(mask.dim() - 1)) and mask.stride(-1) == 1):
        last = mask.shape[-1]
        mask = torch.nn.functional.pad(mask, (0, 8 - last % 8)).narrow(-1, 0, last)
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def _bool_mask_to_float(mask, dtype):
    """`convert_boolean_attn_mask` (attention.cpp): `where(mask, 0.0, scalar_tensor(-inf))`, whose
    Scalar overload makes the 0.0 a device scalar of the other's options: two 0-dim device tensors,
    -inf first, then the additive mask; the scalars die as it returns (the H200's allocations in
    fixtures/run/sweeps/cudnn_decode_h200.jsonl)."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    neg_inf = torch.full((), -math.inf, dtype=dtype, device=mask.device)
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg_inf)


def math_attention(q, k, v, mask, dropout_p, is_causal, scale, gqa):
    """`_scaled_dot_product_attention_math` (attention.cpp, torch 2.11) as a plain CUDA run executes
    it: half and bf16 inputs upcast to float (unless `allow_fp16_bf16_reduction_math_sdp`), q and k^T
    each scaled by sqrt(scale), the mask added in place (`add_`: a real run has no tensor subclass or
    dispatch mode), `_safe_softmax`, and `at::dropout`, which on a CUDA tensor is the fused
    `native_dropout` with its bool mask."""
    origin = q.dtype
    upcast = not torch._C._get_math_sdp_allow_fp16_bf16_reduction()

    def acc(t):
        return t.to(torch.float32) if upcast and t.dtype in HALF else t

    q, k, v = acc(q), acc(k), acc(v)
    negative = scale is not None and scale < 0
    base = (abs(scale) if negative else scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    factor = math.sqrt(base)
    query = q * (0.0 - factor if negative else factor)
    if is_causal:
        # `attn_mask = convert_boolean_attn_mask(attn_mask, ...)` replaces the bool mask: it dies
        # as the additive one is made (blind88/cj05's peaks: its (L, S) bytes were held before)
        causal = torch.ones(query.shape[-2], k.shape[-2], dtype=torch.bool, device=query.device).tril()
        mask = _bool_mask_to_float(causal, query.dtype)
        del causal
    if gqa and not (q.shape[-3] == k.shape[-3] == v.shape[-3]):
        # pre_process_group_query_attention_input
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    attn = torch.matmul(query, k.transpose(-2, -1) * factor)
    if mask is not None:
        attn.add_(mask)
    attn = aten._safe_softmax(attn, -1)
    if dropout_p > 0.0:
        attn = torch.native_dropout(attn, dropout_p, True)[0]
    # `make_tuple(matmul(attn, v).to(origin), attn.to(origin))`: its arguments evaluated right to
    # left, so the weights' cast back comes first; the caller keeps only the output
    weights = attn.to(origin)
    out = torch.matmul(attn, v).to(origin)
    return out, weights


# ---- what the fused kernels allocate ----------------------------------------------------


def _alloc_in_order(cap, outs, order, op, category="output"):
    """Allocate the fresh outputs `outs[i]` for i in `order` (the GPU's order)."""
    for i in order:
        o = outs[i]
        if isinstance(o, torch.Tensor):
            cap.track(o, op, category)
    return list(outs)


def cudnn_forward(cap, func, args, kwargs):
    """`_cudnn_attention_forward`: philox seed and offset, the output, the
    logsumexp (when a gradient is needed), the plan's workspace (the eager
    twin's, measured on the H100)."""
    cap.ops += 1
    out = func(*args, **kwargs)
    op = "aten::_scaled_dot_product_cudnn_attention"
    # (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask);
    # the logsumexp only with compute_log_sumexp (an sm_90 GPU allocates 272 bytes beyond the output
    # without it: seed, offset and the workspace)
    compute_lse = args[4] if len(args) > 4 else kwargs.get("compute_log_sumexp", False)
    w = _alloc_in_order(cap, out, (6, 7, 0, 1, 8) if compute_lse else (6, 7, 0, 8), op)
    q, k = args[0], args[1]
    fwd, _ = cap.device.cudnn_attention_workspaces(
        q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    )
    # `run_cudnn_SDP_fprop`'s handle after the outputs (a recomputed forward on the autograd thread:
    # its first cuDNN call); the plan is built before its workspace is known: cuDNN's engines load
    # (rule 9)
    cap.cudnn_thread_handle()
    cap.cudnn_plan()
    ws = cap.malloc(fwd, op, "workspace")
    del ws
    return tuple(w)


def cudnn_backward(cap, func, args, kwargs):
    """`_cudnn_attention_backward`: dq, dk, dv, then the plan's workspace."""
    cap.ops += 1
    grad_out, q, k = args[0], args[1], args[2]
    out = func(*args, **kwargs)
    op = "aten::_scaled_dot_product_cudnn_attention_backward"
    w = _alloc_in_order(cap, out, (0, 1, 2), op)
    # `run_cudnn_SDP_bprop` (MHA.cpp) gets its handle after dq, dk and dv: the autograd thread's first
    # cuDNN call takes the driver's piece
    cap.cudnn_thread_handle()
    d_o = None
    if grad_out.stride(-1) != 1:
        d_o = cap.malloc(grad_out.numel() * grad_out.element_size(), op, "temporary")
    ws = cap.malloc(
        cap.device.cudnn_attention_workspaces(
            q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
        )[1],
        op,
        "workspace",
    )
    del ws, d_o
    return tuple(w)


def _flash_head_rounded(d: int) -> int:
    """`head_size_rounded` of flash_api.cpp: the head dim rounded to 32 up to 128, else to 64."""
    step = 32 if d <= 128 else 64
    return -(-d // step) * step


def _flash_splits(b: int, h: int, s_q: int, s_k: int, d: int, sms: int) -> int:
    """`num_splits_heuristic` as `set_params_splitkv` (flash_api.cpp) calls it: the split-KV
    count that keeps the most of two waves of blocks busy, for the forward's blocks of keys
    (256 up to a head dim of 64, 128 up to 128, else 64) and 64-row blocks of queries."""
    block_n = 256 if d <= 64 else (128 if d <= 128 else 64)
    n_blocks = -(-s_k // block_n)
    work = b * h * -(-s_q // 64)
    slots = 2 * sms
    if work >= 0.8 * slots:
        return 1
    most = min(128, slots, n_blocks)

    def eligible(n):
        return n == 1 or -(-n_blocks // n) != -(-n_blocks // (n - 1))

    eff = []
    for n in range(1, most + 1):
        waves = work * n / slots
        eff.append(waves / math.ceil(waves) if eligible(n) else 0.0)
    best = max(eff)
    for n in range(1, most + 1):
        if eligible(n) and eff[n - 1] >= 0.85 * best:
            return n
    return 1


def flash_forward(cap, func, args, kwargs):
    """`_flash_attention_forward`: the output, the logsumexp, the split-KV accumulators where
    `set_params_splitkv` splits (fp32 `(splits, B, H, S_q)` and `(splits, B, H, S_q, D rounded)`,
    freed as the forward returns, the first first; none with dropout), `rng_state` and the 8-byte
    `_unused` philox offset (flash_api.cpp `mha_fwd`; the H200's flash_backward_probe.py)."""
    cap.ops += 1
    q, k = args[0], args[1]
    dropout = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
    out = func(*args, **kwargs)
    op = "aten::_scaled_dot_product_flash_attention"
    w = _alloc_in_order(cap, out, (0, 1), op)
    accums = []
    b, h, s_q, d = q.shape
    if not dropout:
        h_k = k.shape[1]
        if s_q == 1 and h > h_k:
            # `seqlenq_ngroups_swapped` (mha_fwd): q viewed as (b, h / h_k, h_k, d), so the
            # heuristic and the accumulators see h_k heads of h / h_k query rows
            h, s_q = h_k, h // h_k
        splits = _flash_splits(b, h, s_q, k.shape[2], d, cap.device.multi_processor_count)
        if splits > 1:
            accums.append(cap.malloc(splits * b * h * s_q * 4, op, "temporary"))
            accums.append(cap.malloc(splits * b * h * s_q * _flash_head_rounded(d) * 4, op, "temporary"))
    w = _rng_state(cap, w, dropout, op)
    while accums:
        accums.pop(0)
    return tuple(w)


def _rng_state(cap, w, dropout, op, at=6):
    """`rng_state` (uint64 `[2]`) and the 8-byte `_unused` offset of `mha_fwd` / `mha_varlen_fwd`
    (flash_api.cpp), then the debug mask. With dropout the `p_dropout > 0.0` branch makes `rng_state`
    again (`rng_state = at::empty({2}, ...)`): a second 16 bytes after `_unused`, the first freed as
    it is reassigned (gj01's H200 history: 16, 8, 16, the first 16 freed inside `mha_fwd`)."""
    if not dropout:
        return _alloc_in_order(cap, w, (at, at + 1, at + 2), op)
    first = cap.malloc(16, op, "temporary")
    w = _alloc_in_order(cap, w, (at + 1, at, at + 2), op)
    del first
    return w


def efficient_forward(cap, func, args, kwargs):
    """`_efficient_attention_forward` (attention.cu): the output `(b, m, h,
    kv)`, the fp32 logsumexp `(b, h, ceil32(m))` (empty without a gradient),
    an fp32 accumulator for 16-bit inputs with head dims over 128; the
    philox seed and offset are host tensors."""
    cap.ops += 1
    q, v = args[0], args[2]
    out = list(func(*args, **kwargs))
    op = "aten::_scaled_dot_product_efficient_attention"
    w = _alloc_in_order(cap, out, (0, 1), op)
    if q.dtype in HALF and max(q.shape[3], v.shape[3]) > 128:
        acc = cap.malloc(out[0].numel() * 4, op, "temporary")
        del acc
    for i in (2, 3):
        w[i] = torch.empty((), dtype=torch.int64)
    return tuple(w)


def efficient_backward(cap, func, args, kwargs):
    """`_efficient_attention_backward` on `(B, M, H, K)` views, as the eager
    twin has it (`efficient_backward` in `ops/attention.rs`): the contiguous
    grad_out copy, grad q/k/v, the bias gradient (last dim padded to 16),
    `delta`, the cutlass workspace; freed delta, workspace, copy."""
    grad, q, k, v, bias = args[0], args[1], args[2], args[3], args[4]
    grad_input_mask = args[10] if len(args) > 10 else kwargs.get("grad_input_mask", (True,) * 4)
    lse = args[6] if len(args) > 6 else kwargs["logsumexp"]
    return _efficient_backward(cap, func, args, kwargs, (grad, q, k, v, bias, lse), grad_input_mask)


def efficient_attention_backward(cap, func, args, kwargs):
    """`_efficient_attention_backward` called directly on `(B, M, H, K)` tensors (the backward of
    `_efficient_attention_forward`, which `torch.nn.attention.bias.CausalBias` calls for a
    lower-right causal mask): the same kernel as `efficient_backward`, whose sdpa op calls it on
    `(B, H, M, K)` tensors transposed (attention_backward.cu)."""
    grad, q, k, v, bias = (a.transpose(1, 2) if isinstance(a, torch.Tensor) else a for a in args[:5])
    lse = args[10] if len(args) > 10 else kwargs["logsumexp"]
    bias_grad = args[15] if len(args) > 15 else kwargs.get("bias_requires_grad", False)
    return _efficient_backward(
        cap, func, args, kwargs, (grad, q, k, v, bias, lse), (True, True, True, bias_grad)
    )


def _efficient_backward(cap, func, args, kwargs, tensors, grad_input_mask):
    cap.ops += 1
    grad, q, k, v, bias, lse = tensors
    out = list(func(*args, **kwargs))
    op = "aten::_scaled_dot_product_efficient_attention_backward"
    go = None
    if not grad.transpose(1, 2).is_contiguous():
        go = cap.malloc(grad.numel() * grad.element_size(), op, "temporary")
    w = _alloc_in_order(cap, out, (0, 1, 2), op)
    if bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3] and out[3] is not None:
        last = bias.shape[-1]
        padded = bias.numel() // max(last, 1) * ((last + 15) // 16 * 16)
        cap.track(out[3], op, "gradient", nbytes=padded * bias.element_size())
    b, h, m, kd = q.shape
    n, kv = k.shape[2], v.shape[3]
    if q.dtype in HALF:
        delta = cap.malloc(b * h * m * 4, op, "temporary")
    else:
        prod = cap.malloc(b * m * h * kv * 4, "aten::mul", "temporary")
        summed = cap.malloc(b * m * h * 4, "aten::sum", "temporary")
        _kernels.reduce_scratch(cap, [b, m, h, kv], None, [False, False, False, True], 4, 4, "aten::sum")
        delta = cap.malloc(b * h * m * 4, "aten::contiguous", "temporary")
        del summed, prod
    name = str(q.dtype).removeprefix("torch.")
    nbytes = cap.device.efficient_attention_backward_workspace(name, b, h, m, n, kd, kv)
    ws = cap.malloc(nbytes, op, "workspace") if nbytes else None
    problem = _lse_misaligned(lse, b, h)
    if problem:
        # the kernel's locals die as the error unwinds: delta, the workspace, then the gradients
        # (declared grad_q, grad_k, grad_v, grad_bias) last to first, then the grad_out copy
        del delta, ws
        for i in (3, 2, 1, 0):
            out[i] = w[i] = None
        del go
        raise RuntimeError(f"LSE is not correctly aligned ({problem})")
    del delta, ws, go
    return tuple(w)


def _lse_misaligned(lse, b: int, h: int) -> str | None:
    """`AttentionBackwardKernel::check_supported` (mem_eff_attention/kernel_backward.h), called by
    `_efficient_attention_backward` (attention_backward.cu) after it allocated the gradients, delta and
    the workspace: `num_heads <= 1 || lse_strideH % 8 == 0`, then `num_batches <= 1 || lse_strideB % 8
    == 0`, with the strides of the logsumexp the forward saved. A forward that did not compute it
    (`should_compute_logsumexp` false: under torch.func's vmap a BatchedTensor's `requires_grad()` is
    false even where the physical tensors require a gradient) saved an empty `(B, H, 0)` one, whose
    contiguous strides are `(H, 1, 1)`: blind218/hj02's H200 run raised "LSE is not correctly aligned
    (strideH)" at its first backward through a vmapped ensemble's SDPA."""
    if h > 1 and lse.stride(1) % 8:
        return "strideH"
    if b > 1 and lse.stride(0) % 8:
        return "strideB"
    return None


def flash_backward(cap, func, args, kwargs):
    """`_flash_attention_backward` (attention_backward.cu) on `(B, S, H, D)` views, then `mha_bwd`
    (flash_api.cpp): `grad_out.contiguous()` and `out.contiguous()` (copies where the views are not
    contiguous), dq, dk, dv, `softmax_d` (B, H, S_q rounded to 128) and `dq_accum` (B, S_q rounded,
    H, D rounded as `_flash_head_rounded`) in fp32 (deterministic: `nsplits` of them, nsplits =
    ceil(SMs / (B * H))), with GQA heads dK and dV expanded to (B, S_k, H, D) and summed into dk and
    dv; freed in reverse. As blind15/o03's memory history, the H200's flash_backward_probe.py and
    blind146/ep06's per-op records (GQA) list them."""
    grad, q, k, out_ = args[0], args[1], args[2], args[4]
    cap.ops += 1
    out = func(*args, **kwargs)
    op = "aten::_scaled_dot_product_flash_attention_backward"
    copies = [
        cap.malloc(t.numel() * t.element_size(), op, "temporary")
        for t in (grad, out_)
        if not t.transpose(1, 2).is_contiguous()
    ]
    w = _alloc_in_order(cap, out, (0, 1, 2), op)
    b, h, s_q, d = q.shape
    s_q_rounded = -(-s_q // 128) * 128
    d_rounded = _flash_head_rounded(d)
    softmax_d = cap.malloc(b * h * s_q_rounded * 4, op, "temporary")
    # `_flash_attention_backward`: deterministic only when use_deterministic_algorithms(True) is not
    # warn_only
    nsplits = 1
    if (
        torch.are_deterministic_algorithms_enabled()
        and not torch.is_deterministic_algorithms_warn_only_enabled()
    ):
        nsplits = -(-cap.device.multi_processor_count // (b * h))
    dq_accum = cap.malloc(nsplits * b * s_q_rounded * h * d_rounded * 4, op, "temporary")
    expanded = []
    h_k, s_k = k.shape[1], k.shape[2]
    if h_k != h:
        nbytes = b * s_k * h * d * q.element_size()
        expanded = [cap.malloc(nbytes, op, "temporary"), cap.malloc(nbytes, op, "temporary")]
        # at::sum_out(dk, reshape(dk_expanded, {b, s_k, h_k, h / h_k, d}), {3}), then dv's
        for _ in range(2):
            esize = q.element_size()
            _kernels.reduce_scratch(
                cap,
                [b, s_k, h_k, h // h_k, d],
                None,
                [False, False, False, True, False],
                esize,
                4,
                "aten::sum",
            )
    while expanded:
        expanded.pop()
    del dq_accum, softmax_d
    while copies:
        copies.pop()
    return tuple(w)


# ---- nn.MultiheadAttention's fast path ---------------------------------------------------------
# In eval without a gradient, `MultiheadAttention.forward` calls `torch._native_multi_head_attention`
# unless `torch.overrides.has_torch_function(tensor_args)`, which the capture's torch-function mode
# would make true. `native_multi_head_attention_cuda` (transformers/cuda/attention.cu, torch 2.11):
# for self-attention without weights or mask, when SDPA would pick flash, efficient or cuDNN attention
# for the heads' views, it runs `linear` (qkv), `scaled_dot_product_attention` and `linear` (out);
# otherwise its own kernels (`_mha_explicit`).

_FAST = threading.local()


def _sdp_branch(query, heads, dph) -> bool:
    """attention.cu's test for the SDPA branch on the heads' views of a self-attention query."""
    if dph % 8 != 0:
        return False
    b = query.shape[0]
    with torch._C.DisableTorchFunction():
        view = query.view(b, -1, heads, dph).transpose(1, 2)
        which = backend(view, view, view, None, 0.0, False, False, _FAST.capability, _FAST.sdpa)
    if which == "unavailable":
        # attention.cpp `_native_multi_head_attention` calls `select_sdp_backend` itself, whose
        # TORCH_CHECK raises when math is off and no fused kernel passes (all off: the explicit path)
        raise RuntimeError("No available kernel. Aborting execution.")
    return which in ("flash", "efficient", "cudnn")


def _mha_native(mha, query, key, value) -> bool:
    """Whether the GPU runs `_native_multi_head_attention` for a call that reached it (PyTorch's own
    fast-path checks passed) and the twin models it: dense self-attention, batch first."""
    return query is key and key is value and registered(query) and query.dim() == 3 and mha.batch_first


def _fast_path_forward(original, cap, modelled):
    """`original` (a module's `forward`) run with the fast-path flag set where `modelled(self, args)`
    says the twin models the fused path the GPU takes (the flag lets `has_torch_function` pass)."""
    import inspect

    sig = inspect.signature(original)
    _FAST.capability = cap.device.capability
    _FAST.sdpa = cap.device.sdpa

    def forward(self, *args, **kwargs):
        if torch.compiler.is_dynamo_compiling():
            # dynamo traces a compiled region (`_compile`): PyTorch's own
            return original(self, *args, **kwargs)
        a = sig.bind(self, *args, **kwargs)
        a.apply_defaults()
        prev = getattr(_FAST, "on", False)
        _FAST.on = modelled(self, a.arguments)
        try:
            return original(self, *args, **kwargs)
        finally:
            _FAST.on = prev

    return forward


def mha_forward(original, cap):
    """`MultiheadAttention.forward` that lets the fast-path check pass where the twin models it."""
    return _fast_path_forward(
        original,
        cap,
        lambda self, p: _mha_native(self, p["query"], p["key"], p["value"]),
    )


def has_torch_function(original):
    """`torch.overrides.has_torch_function`, false inside a modelled MHA fast path when only the
    capture's own mode is active."""

    def check(args):
        if torch.compiler.is_dynamo_compiling():
            # What dynamo answers on the GPU, from the traced arguments alone (torch/_dynamo/variables/
            # torch.py `handle_has_torch_function`: a tensor subclass has one). Calling `original`
            # here would graph-break: dynamo keys that handler by this wrapper once it is installed.
            return any(
                isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, torch.nn.Parameter)
                for t in args
            )
        if (
            getattr(_FAST, "on", False)
            and torch._C._len_torch_function_stack() == 1
            and all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in args)
        ):
            return False
        return original(args)

    return check


def encoder_layer_forward(original, cap):
    """`TransformerEncoderLayer.forward` that lets its fast-path check pass where the twin models
    `_transformer_encoder_layer_fwd`: a nested input without masks, or a dense one (not with a
    padding mask inside an encoder whose nested path the twin does not model)."""
    return _fast_path_forward(
        original,
        cap,
        lambda self, p: (
            (p.get("src_mask") is None and p.get("src_key_padding_mask") is None)
            if getattr(p["src"], "_vs_nested", None) is not None
            else not (
                getattr(_FAST, "nested_unmodelled", False) and p.get("src_key_padding_mask") is not None
            )
            and _mha_native(self.self_attn, p["src"], p["src"], p["src"])
        ),
    )


def encoder_layer_fwd(cap, func, args, kwargs):
    """`transformer_encoder_layer_forward` (transformers/transformer.cpp) on a dense input (with or
    without the merged mask) or a nested one without: layer norms, `_native_multi_head_attention`,
    the residuals added in place, and `ffn` (`linear_for_ffn` on the (B*T, E) view:
    `_addmm_activation` with relu or gelu, then `addmm`)."""
    names = ("src", "embed_dim", "num_heads", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias")
    names += ("use_gelu", "norm_first", "eps", "norm_weight_1", "norm_bias_1", "norm_weight_2")
    names += ("norm_bias_2", "ffn_weight_1", "ffn_bias_1", "ffn_weight_2", "ffn_bias_2", "mask", "mask_type")
    a = dict(zip(names, args, strict=False)) | kwargs
    lengths = getattr(a["src"], "_vs_nested", None)
    if not getattr(_FAST, "on", False) or (lengths is not None and a.get("mask") is not None):
        return NotImplemented
    import torch.nn.functional as F

    src, e, eps = a["src"], a["embed_dim"], a["eps"]
    if src.numel() == 0:
        return src.clone()

    def norm(x, i):
        return F.layer_norm(x, (e,), a[f"norm_weight_{i}"], a[f"norm_bias_{i}"], eps)

    def linear_for_ffn(x, w, b, use_gelu):
        x2 = x.view(x.size(0) * x.size(1), x.size(2))
        if use_gelu is None:
            r = torch.addmm(b, x2, w.t())
        else:
            r = torch._addmm_activation(b, x2, w.t(), beta=1, alpha=1, use_gelu=use_gelu)
        return r.view(x.size(0), x.size(1), -1)

    x = norm(src, 1) if a["norm_first"] else src
    if lengths is not None:
        x = _nested_mha(cap, x, lengths, e, a["num_heads"], a)
    else:
        mha_args = (x, x, x, e, a["num_heads"], a["qkv_weight"], a["qkv_bias"], a["proj_weight"])
        mask_args = (a.get("mask"), False, True, a.get("mask_type"))
        x = native_mha(cap, None, (*mha_args, a["proj_bias"], *mask_args), {})[0]
        del mha_args
    x.add_(src)
    if not a["norm_first"]:
        x = norm(x, 1)
    pre_ffn_res = x
    if a["norm_first"]:
        x = norm(x, 2)

    def ffn(x):
        # transformer.cpp's `ffn`: its input (with norm_first, the second norm's output) is the
        # caller's `x` until it returns, so it lives through both linears (blind84/cf02's history)
        res = linear_for_ffn(x, a["ffn_weight_1"], a["ffn_bias_1"], bool(a["use_gelu"]))
        return linear_for_ffn(res, a["ffn_weight_2"], a["ffn_bias_2"], None)

    x = ffn(x)
    x.add_(pre_ffn_res)
    if not a["norm_first"]:
        x = norm(x, 2)
    if lengths is not None:
        x._vs_nested = lengths
    return x  # pre_ffn_res dies here, after the last norm (a C++ local)


def native_mha(cap, func, args, kwargs):
    """`native_multi_head_attention_cuda` on a dense self-attention query: its SDPA branch (qkv
    `linear`, SDPA on the heads' views, out `linear`; no weights) or its own kernels."""
    names = ("query", "key", "value", "embed_dim", "num_head", "qkv_weight", "qkv_bias", "proj_weight")
    names += ("proj_bias", "mask", "need_weights", "average_attn_weights", "mask_type")
    a = dict(zip(names, args, strict=False)) | kwargs
    if not getattr(_FAST, "on", False):
        return NotImplemented
    import torch.nn.functional as F

    e, h = a["embed_dim"], a["num_head"]
    mask, need_weights = a.get("mask"), a.get("need_weights", True)
    if mask is not None or need_weights or not _sdp_branch(a["query"], h, e // h):
        return _mha_explicit(a, mask, need_weights)
    x = F.linear(a["query"], a["qkv_weight"], a["qkv_bias"])
    b = x.size(0)
    q, k, v = (c.view(b, -1, h, e // h).transpose(1, 2) for c in x.chunk(3, -1))
    y = F.scaled_dot_product_attention(q, k, v, None, 0.0, False)
    past = y.transpose(1, 2).reshape(b, -1, e)
    # the branch's locals (x, its chunks, y) live until it returns: freed after the out projection
    out = F.linear(past, a["proj_weight"], a["proj_bias"])
    del x, q, k, v, y, past
    return out, None


def _mha_explicit(a, mask, need_weights):
    """attention.cu's own kernels: `gemm_nt` (qkv, `matmul` without bias), `_transform_bias_rescale_qkv`
    into one (3, B, H, T, Dh) buffer (the projection dies), `bmm_nt` scores, `masked_softmax`
    (attention.cpp; in place without a mask), `bmm_nn` into q's storage, the scores dropped unless
    returned, `transform0213_gemm_nt_bias` (a contiguous (B, T, D) copy, 2-D `linear`); averaged
    weights are the heads' `sum` divided in place. The buffer dies on return."""
    import torch.nn.functional as F

    query, e, h = a["query"], a["embed_dim"], a["num_head"]
    b, t, dh = query.shape[0], query.shape[1], e // h
    qkv = torch.matmul(query, a["qkv_weight"].t())
    if qkv.numel() == 0:
        return torch.empty_like(query), None
    buf = torch.empty((3, b, h, t, dh), dtype=a["qkv_bias"].dtype, device=query.device)
    del qkv
    q, k, v = buf.view(3 * b, h, t, dh).split(b, 0)
    qkt = torch.bmm(q.view(b * h, t, dh), k.view(b * h, t, dh).transpose(2, 1)).view(b, h, t, t)
    if mask is not None:
        # masked_softmax's mask is a by-value parameter: its bool copy dies after `qkt` is rebound
        m = mask if mask.dtype == torch.bool else mask.to(torch.bool)
        qkt = _masked_softmax(qkt, m, a.get("mask_type"))
        del m
    if not need_weights:
        qkt = None
    ctx = q.permute(0, 2, 1, 3).contiguous().view(b, t, e)
    proj = F.linear(ctx.view(b * t, e), a["proj_weight"], a["proj_bias"]).view(b, t, e)
    del ctx
    if qkt is not None and a.get("average_attn_weights", True):
        qkt = qkt.sum(1)
        qkt /= h
    del q, k, v, buf
    return proj, qkt


def _masked_softmax(x, mask, mask_type):
    """`masked_softmax_cuda` (native/cuda/SoftMax.cu): the output, then the persistent kernel when the
    row has at most 1,024 elements and 4,096 bytes and the mask is contiguous; else
    `softmax(masked_fill(x, mask, -inf))` (the fill dies after the softmax's output replaced it)."""
    out = torch.empty_like(x)
    n = x.shape[-1]
    bxt = mask_type == 1 and x.dim() == 4 and mask.dim() == 2 and tuple(mask.shape) == (x.shape[0], n)
    bxt = bxt and x.shape[2] == n
    txt = mask_type == 0 and x.dim() == 4 and mask.dim() == 2 and tuple(mask.shape) == (n, n)
    m = mask.expand(x.shape) if txt else mask
    if n > 1024 or n * x.element_size() > 4096 or not m.is_contiguous():
        if bxt:
            m = mask.view(mask.shape[0], 1, 1, n).expand(x.shape)
        filled = x.masked_fill(m, -math.inf)
        out = torch.softmax(filled, -1)
        del filled
    return out


# ---- nn.TransformerEncoder's nested fast path -------------------------------------------------
# In eval without a gradient, with a left-aligned `src_key_padding_mask`, `TransformerEncoder.forward`
# packs the padded batch into a strided nested tensor (`_nested_tensor_from_mask`), runs each layer's
# `_transformer_encoder_layer_fwd` on it (nested linears and layer norms over the T valid tokens, the
# varlen flash kernel) and pads the result back (`to_padded_tensor`). The twin keeps the nested tensor
# as a dense (1, T, D) tensor holding the tokens' lengths (`_vs_nested`); modelled for fp16 (the CUDA
# kernels of `nested_from_padded` and `to_padded_tensor`) with heads the flash kernel takes, and for
# fp32 (the memory-efficient kernel).


def _valid_lengths(mask):
    """The valid tokens of each row of a padding mask whose values the twin carries (True or
    non-zero: padding), when every row is left-aligned and not empty; else None."""
    v = value(mask)
    if v is None or assumed(mask) or v.dim() != 2:
        return None
    valid = ~v if v.dtype == torch.bool else v == 0
    nums = torch.cat([valid, torch.zeros(v.shape[0], 1, dtype=torch.bool)], 1).int().argmin(1)
    sizes = valid.long().cumsum(1)[:, -1]
    if not torch.equal(sizes, nums) or not bool((sizes > 0).all()):
        return None
    return [int(n) for n in sizes]


def _not_left_aligned(mask) -> bool:
    """Whether the twin carries a padding mask's values and some row's valid tokens are not all on
    the left (`_nested_tensor_from_mask_left_aligned` false: the GPU's encoder stays dense)."""
    v = value(mask)
    if v is None or assumed(mask) or v.dim() != 2:
        return False
    valid = ~v if v.dtype == torch.bool else v == 0
    nums = torch.cat([valid, torch.zeros(v.shape[0], 1, dtype=torch.bool)], 1).int().argmin(1)
    return not torch.equal(valid.long().sum(1), nums)


def _nested_modelled(enc, p) -> bool:
    """Whether `TransformerEncoder.forward` (torch/nn/modules/transformer.py) converts to a nested
    tensor on the GPU and the twin models that path; the tokens' lengths go to `_FAST.nested`."""
    _FAST.nested = None
    src, kpm = p["src"], p.get("src_key_padding_mask")
    layer = enc.layers[0]
    # where the GPU may pack a nested tensor that the twin does not, the layers keep the module path
    gpu_nests = kpm is not None and p.get("mask") is None and getattr(enc, "use_nested_tensor", False)
    gpu_nests = gpu_nests and not layer.training and not _not_left_aligned(kpm)
    _FAST.nested_unmodelled = gpu_nests
    # the GPU runs the left-aligned check, then a later condition rules the nested path out whatever
    # it answers (torch/nn/modules/transformer.py: the check comes before the mask, autocast and
    # requires_grad conditions)
    _FAST.check_only = (
        kpm is not None
        and getattr(enc, "use_nested_tensor", False)
        and not layer.training
        and src.dim() == 3
        and getattr(enc, "mask_check", True)
        and torch.backends.mha.get_fastpath_enabled()
        and (
            p.get("mask") is not None
            or torch.is_autocast_enabled()
            or (torch.is_grad_enabled() and any(w.requires_grad for w in layer.parameters()))
        )
    )
    if kpm is None or p.get("mask") is not None or not registered(src) or src.dim() != 3:
        return False
    mha = layer.self_attn
    if layer.training or not getattr(enc, "use_nested_tensor", False):
        return False
    if src.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return False
    if not torch.backends.mha.get_fastpath_enabled() or not mha.batch_first or torch.is_autocast_enabled():
        return False
    dph = mha.embed_dim // mha.num_heads
    # sdp_utils.cpp's nested checks: fp16 and bf16 take flash (head dim a multiple of 8 up to 256,
    # sm_80 and up), fp32 the memory-efficient kernel (flash takes no fp32; head dim a multiple of 16 /
    # 4 bytes)
    if src.dtype in HALF and (dph % 8 or dph > 256 or tuple(_FAST.capability) < (8, 0)):
        return False
    if src.dtype == torch.float32 and dph % 4:
        return False
    if torch.is_grad_enabled() and any(w.requires_grad for w in layer.parameters()):
        return False
    _FAST.nested = _valid_lengths(kpm)
    _FAST.nested_unmodelled = gpu_nests and _FAST.nested is None
    return _FAST.nested is not None


def encoder_forward(original, cap):
    """`TransformerEncoder.forward` that lets its nested fast path run where the twin models it (the
    rows' lengths are forgotten when it returns)."""
    forward = _fast_path_forward(original, cap, _nested_modelled)

    def run(self, *args, **kwargs):
        try:
            return forward(self, *args, **kwargs)
        finally:
            _FAST.nested = None
            _FAST.nested_unmodelled = False
            _FAST.check_only = False

    return run


def _mask_scratch(cap, n: int, seq: int, op: str):
    """The scratch `NestedTensor_nested_tensor_from_mask{,_left_aligned}` (nested/cuda) make before
    they differ: `zeros({N, 1})`, the bool `cat` with it, its `to(kInt)`, `argmin(1)` (both
    temporaries freed, the int copy first), then `cumsum(1)` with its int64 copy of the input;
    returns (argmin, zeros, cumsum)."""
    pad = cap.malloc(n, op, "temporary")
    cat = cap.malloc(n * (seq + 1), op, "temporary")
    ints = cap.malloc(n * (seq + 1) * 4, op, "temporary")
    nums = cap.malloc(n * 8, op, "temporary")
    del ints, cat
    sizes = cap.malloc(n * seq * 8, op, "temporary")
    copy = cap.malloc(n * seq * 8, op, "temporary")
    del copy
    return nums, pad, sizes


def left_aligned(fallback):
    """`_nested_tensor_from_mask_left_aligned` inside a modelled nested encoder, or where a later
    condition rules the nested path out: the scratch above, then `sizes.equal(nums)` (`cuda_equal`:
    `eq`, then `all`; blind77/by06's H200 history, blind143/em06's per-op truth under autocast);
    True (where the path is ruled out, the answer changes nothing)."""

    def rule(cap, func, args, kwargs):
        modelled = getattr(_FAST, "on", False) and getattr(_FAST, "nested", None) is not None
        if not modelled and not getattr(_FAST, "check_only", False):
            return fallback(cap, func, args, kwargs)
        cap.ops += 1
        op = "aten::_nested_tensor_from_mask_left_aligned"
        nums, pad, sizes = _mask_scratch(cap, args[0].shape[0], args[0].shape[1], op)
        eq = cap.malloc(args[0].shape[0], op, "temporary")
        every = cap.malloc(1, op, "temporary")
        del every, eq, nums, pad, sizes
        return True

    return rule


def nested_from_mask(cap, func, args, kwargs):
    """`_nested_tensor_from_mask` (mask_check off) inside a modelled nested encoder: the mask scratch,
    `full_like(sizes, D)` and the `cat` copied to the host (the cumsum freed as `sizes` becomes the
    host copy), then `nested_from_padded_cuda`: for fp32 and fp16 the (T, D) buffer, its int metadata
    copied in non-blocking through an int64 device copy; other dtypes `_from_padded_generic`. The
    (1, T, D) view stands for the nested tensor."""
    lengths = getattr(_FAST, "nested", None) if getattr(_FAST, "on", False) else None
    src = args[0]
    if lengths is None or not registered(src):
        return NotImplemented
    cap.ops += 1
    n, seq, d = src.shape
    op = "aten::_nested_tensor_from_mask"
    nums, pad, sizes = _mask_scratch(cap, n, seq, op)
    dims = cap.malloc(n * 8, op, "temporary")
    host = cap.malloc(n * 16, op, "temporary")
    del host, sizes
    if src.dtype in (torch.float32, torch.float16):
        out = cap.track(torch.empty((1, sum(lengths), d), dtype=src.dtype, device=src.device), op)
        meta = cap.malloc((3 * n + 4) * 4, op, "temporary")
        wide = cap.malloc((3 * n + 4) * 8, op, "temporary")
        del wide, meta
    else:
        out = _from_padded_generic(cap, src, lengths)
    del dims, nums, pad
    out._vs_nested = lengths
    return out


def _from_padded_generic(cap, src, lengths):
    """`nested_from_padded_generic` (nested/NestedTensorTransformerFunctions.cpp), where
    `nested_from_padded_cuda` falls back for dtypes other than fp32 and fp16: per row a bool
    `new_full` of its (length, D) and `pad_tensor_to_shape`'s `constant_pad_nd` of it to the padded
    (seq, D) (the row's mask freed), the masks stacked, `masked_select` of the input (`nonzero` of the
    stack, then the (T * D) buffer); then the positions, the stack and the rows' masks die
    (nested_bf16_probe_s40's H200 history)."""
    n, seq, d = src.shape
    op = "aten::_nested_from_padded"
    masks = []
    for length in lengths:
        row = cap.malloc(length * d, op, "temporary")
        masks.append(cap.malloc(seq * d, "aten::constant_pad_nd", "temporary"))
        del row
    stack = cap.malloc(n * seq * d, "aten::stack", "temporary")
    t = sum(lengths)
    dense = torch.empty((n, seq, d), dtype=torch.bool, device="meta")
    positions = _kernels._nonzero_scratch(
        cap, dense, lambda: cap.malloc(t * d * 3 * 8, "aten::nonzero", "temporary")
    )
    out = cap.track(torch.empty((1, t, d), dtype=src.dtype, device=src.device), "aten::masked_select")
    del positions, stack
    masks.clear()
    return out


def _nested_mha(cap, x, lengths, e: int, h: int, a: dict):
    """`native_multi_head_attention_cuda` on a nested input: the qkv `nested_linear`, the varlen flash
    kernel (`sdpa_nested_preprocessing`'s cumulative lengths of q and k copied in, the (T, H, D)
    output, the fp32 `(H, T)` logsumexp, `rng_state` and the 8-byte offset; the logsumexp freed first,
    then the lengths, then the rest), the out `nested_linear`, then the attention's output and the
    qkv freed (blind77/by06's H200 history)."""
    import torch.nn.functional as F

    t, n = x.shape[1], len(lengths)
    qkv = F.linear(x, a["qkv_weight"], a["qkv_bias"])
    if x.dtype == torch.float32:
        # `_scaled_dot_product_efficient_attention_nestedtensor_cuda` (nested/cuda/
        # NestedTensorTransformerFunctions.cpp): the two cumulative lengths copied in, the (T, H, D)
        # output; no logsumexp without grad, no seed or offset on the device without dropout; the
        # lengths freed before the out projection (blind179/fw05's H200 history, fp32 in eval)
        op = "aten::_scaled_dot_product_efficient_attention"
        cu_q = cap.malloc((n + 1) * 4, op, "temporary")
        cu_k = cap.malloc((n + 1) * 4, op, "temporary")
        y = cap.track(torch.empty((1, t, e), dtype=x.dtype, device=x.device), op)
        del cu_q, cu_k
        out = F.linear(y, a["proj_weight"], a["proj_bias"])
        del y, qkv
        return out
    op = "aten::_scaled_dot_product_flash_attention_for_nested"
    cu_q = cap.malloc((n + 1) * 4, op, "temporary")
    cu_k = cap.malloc((n + 1) * 4, op, "temporary")
    y = cap.track(torch.empty((1, t, e), dtype=x.dtype, device=x.device), op)
    lse = cap.malloc(h * t * 4, op, "temporary")
    rng = cap.malloc(16, op, "temporary")
    unused = cap.malloc(8, op, "temporary")
    del lse, cu_q, cu_k, rng, unused
    out = F.linear(y, a["proj_weight"], a["proj_bias"])
    del y, qkv
    return out


def to_padded(cap, func, args, kwargs):
    """`NestedTensor_to_padded_tensor_cuda` of a modelled nested tensor: the padded result (`output_size`
    or the longest row), then the int metadata (offsets and sizes) copied in and freed; a 3-D tensor
    without `output_size` goes through its 2-D view (one size per row)."""
    names = ("self", "padding", "output_size")
    p = dict(zip(names, args, strict=False)) | kwargs
    t = p["self"]
    lengths = getattr(t, "_vs_nested", None)
    if lengths is None:
        return NotImplemented
    cap.ops += 1
    op = "aten::to_padded_tensor"
    n, d = len(lengths), t.shape[2]
    size = p.get("output_size")
    shape = tuple(size) if size is not None else (n, max(lengths), d)
    if t.dtype not in (torch.float32, torch.float64, torch.float16):
        return _to_padded_generic(cap, t, lengths, shape, size is not None)
    out = cap.track(torch.empty(shape, dtype=t.dtype, device=t.device), op)
    meta = cap.malloc((n + 1 + (2 if size is not None else 1) * n) * 4, op, "temporary")
    del meta
    return out


def _to_padded_generic(cap, t, lengths, shape, sized: bool):
    """`NestedTensor_to_padded_tensor_generic` (nested/NestedTensorMath.cpp), where the CUDA kernel
    takes no other dtypes: each row padded to the longest (`constant_pad_nd`), the rows stacked, and
    with `output_size` the stack padded to it; the stack dies, then the rows."""
    n, longest, d = len(lengths), max(lengths), t.shape[2]
    rows = [cap.malloc(longest * d * t.element_size(), "aten::constant_pad_nd", "temporary") for _ in lengths]
    out = cap.track(torch.empty((n, longest, d), dtype=t.dtype, device=t.device), "aten::stack")
    if sized:
        stacked = out
        out = cap.track(torch.empty(shape, dtype=t.dtype, device=t.device), "aten::constant_pad_nd")
        del stacked
    rows.clear()
    return out


def _jagged_parts(t):
    """The dense values of a jagged nested tensor the capture simulates, or None."""
    values = getattr(t, "_values", None)
    return values if isinstance(values, torch.Tensor) and registered(values) else None


_DENSE = {
    "can_use_flash_attention": "flash",
    "can_use_efficient_attention": "efficient",
    "can_use_cudnn_attention": "cudnn",
}


def nested_backend_checks(cap, originals: dict) -> dict:
    """`torch.backends.cuda.can_use_{flash,efficient,cudnn}_attention` for the jagged nested
    tensors the capture simulates, as the GPU's `sdp_utils.cpp` answers them (the nested
    constraints: `check_batch_size_nested`, `check_head_dim_size_flash_nested`, and for the
    efficient kernel `check_requires_grad_and_nested_tensor`); anything else goes to PyTorch's.
    torch/nested/_internal/sdpa.py asks flash, efficient, math, then cuDNN, in that order."""
    support = cap.device.sdpa

    def common(p):
        q, k, v = p.query, p.key, p.value
        return (
            all(_jagged_parts(t) is not None for t in (q, k, v))
            and q.dim() == k.dim() == v.dim() == 4
            and p.attn_mask is None
            and q.dtype == k.dtype == v.dtype
            and q.size(0) == k.size(0) == v.size(0)
            and q.size(1) == k.size(1) == v.size(1)
        )

    def flash(p):
        q, k, v = p.query, p.key, p.value
        d = q.size(-1)
        grad = any(t.requires_grad for t in (q, k, v))
        if support["flash_head_dim_192_limit"] and grad and (192 < d <= 224 or (d > 224 and p.dropout > 0.0)):
            return False
        return (
            support["flash"]
            and torch.backends.cuda.flash_sdp_enabled()
            and q.dtype in HALF
            and d == k.size(-1) == v.size(-1)
            and d <= 256
            and d % 8 == 0
        )

    def efficient(p):
        q, k, v = p.query, p.key, p.value
        align = 8 if q.dtype in HALF else 4
        dtypes = _efficient_dtypes(support)
        return (
            support["efficient"]
            and torch.backends.cuda.mem_efficient_sdp_enabled()
            and not any(t.requires_grad for t in (q, k, v))
            and q.size(-1) == k.size(-1)
            and q.size(-1) % align == 0
            and v.size(-1) % align == 0
            and q.dtype in dtypes
        )

    rules = {"can_use_flash_attention": flash, "can_use_efficient_attention": efficient}

    def wrap(name):
        original, rule = originals[name], rules.get(name)

        def check(params, debug=False):
            if _nested.is_strided_nested(params.query):
                return _nested.can_use(name, params)
            if _jagged_parts(params.query) is None:
                if registered(_physical(params.query)):
                    # a dense tensor of the simulated device: `backend`'s check of that kernel
                    # (PyTorch's own would find a meta tensor and say no)
                    p = params
                    args = (p.query, p.key, p.value, p.attn_mask, p.dropout, p.is_causal, p.enable_gqa)
                    return backend(*args, cap.device.capability, support, only=_DENSE[name])
                return original(params, debug)
            # cuDNN comes after the math path for jagged tensors: not modelled, not reached
            return rule is not None and common(params) and rule(params)

        return check

    return {name: wrap(name) for name in originals}


def varlen_flash_forward(cap, func, args, kwargs):
    """`_flash_attention_forward` with cumulative sequence lengths (the jagged path's
    `mha_varlen_fwd`, flash_api.cpp): the output `(total_q, H, D)`, the fp32 logsumexp
    `(H, total_q)`, then `rng_state` and the `_unused` offset; no split-KV accumulators (those
    are for a paged KV cache)."""
    cap.ops += 1
    out = func(*args, **kwargs)
    op = "aten::_flash_attention_forward"
    w = _alloc_in_order(cap, out, (0, 1), op)
    dropout = args[7] if len(args) > 7 else kwargs.get("dropout_p", 0.0)
    return tuple(_rng_state(cap, w, dropout, op, at=2))


def install() -> None:
    """Register the dispatch rules (`_cuda.patch` puts `sdpa` in place of
    `F.scaled_dot_product_attention`)."""
    _kernels.DISPATCH[aten._scaled_dot_product_cudnn_attention.default] = cudnn_forward
    _kernels.DISPATCH[aten._scaled_dot_product_cudnn_attention_backward.default] = cudnn_backward
    _kernels.DISPATCH[aten._scaled_dot_product_flash_attention.default] = flash_forward
    _kernels.DISPATCH[aten._scaled_dot_product_efficient_attention.default] = efficient_forward
    _kernels.DISPATCH[aten._scaled_dot_product_efficient_attention_backward.default] = efficient_backward
    _kernels.DISPATCH[aten._scaled_dot_product_flash_attention_backward.default] = flash_backward
    _kernels.DISPATCH[aten._flash_attention_forward.default] = varlen_flash_forward
    _kernels.DISPATCH[aten._efficient_attention_forward.default] = efficient_forward
    _kernels.DISPATCH[aten._efficient_attention_backward.default] = efficient_attention_backward
    _kernels.FUNCTIONS[torch._native_multi_head_attention] = native_mha
    _kernels.FUNCTIONS[aten.scaled_dot_product_attention.default] = sdpa_op
    _kernels.FUNCTIONS[torch._transformer_encoder_layer_fwd] = encoder_layer_fwd
    check = aten._nested_tensor_from_mask_left_aligned.default
    _kernels.DISPATCH[check] = left_aligned(_kernels.DISPATCH[check])
    _kernels.DISPATCH[aten._nested_tensor_from_mask.default] = nested_from_mask
    _kernels.DISPATCH[aten.to_padded_tensor.default] = to_padded


install()
