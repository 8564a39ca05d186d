"""cuDNN RNNs (LSTM, GRU, RNN_TANH, RNN_RELU) as PyTorch 2.11 runs them on CUDA.

On a CUDA input `at::lstm`/`at::gru`/`at::rnn_*` (aten/src/ATen/native/RNN.cpp) take the cuDNN path
when `cudnn_is_acceptable` holds: `_cudnn_impl` (aten/src/ATen/native/cudnn/RNN.cpp) finds the flat
weight buffer the module's parameters live in (`try_get_weight_buf`), makes the dropout state once
(`get_dropout_state`) and calls `_cudnn_rnn`, whose backward is `_cudnn_rnn_backward`. On meta tensors
those composites would run per time step instead, so the function-mode rule below takes the cuDNN
path, and the dispatch rules allocate what RNN.cpp's kernels allocate, in its order:

- `_cudnn_rnn_flatten_weight` (`nn.RNNBase.flatten_parameters`, at `.cuda()`/`.to()`): the zeroed
  flat buffer, then every parameter `set_` into it (their own storages freed);
- `_cudnn_rnn`: `input.contiguous()` (time-major), output, hy, cy, a weight buffer only where the
  parameters are not flat, the workspace, the training reserve; the copy and workspace die;
- `_cudnn_rnn_backward`: zeros for undefined gradients, then `_cudnn_rnn_backward_input` (x and dy
  copies, dx, dhx, dcx, workspace) and `_cudnn_rnn_backward_weight` (x copy, the zeroed dw whose views
  are the weights' gradients, workspace);
- `_pack_padded_sequence` (aten/src/ATen/native/PackedSequence.cpp): each block of steps of one
  batch size copied contiguous, then their `cat`.

cuDNN's workspace and reserve sizes (`cudnnGetRNNTempSpaceSizes`, closed source) come from GPU
measurements: first a table measured per whole problem (`cudnn_rnn_h200.json`, made by
validation/run/rnn_table.py), then the formula `_fitted` fitted to three sweeps (validation/run/rnn_sweep.py,
fixtures/run/rnn_sweep_h200.jsonl.xz for bidirectional problems, rnn_sweep_uni_h200.jsonl.xz for
unidirectional ones, rnn_sweep_proj_h200.jsonl.xz for LSTMs with projections; docs/cudnn-rnn.md); any
other problem is named unmeasured and gets neither.
"""

from __future__ import annotations

import json
import os
import weakref

import torch

from . import _autocast, _cudagraph_trees, _kernels
from ._tensor import contiguous_strides, is_ours, registered

aten = torch.ops.aten

#: cudnnRNNMode_t
MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
_MODE_NAMES = {v: k for k, v in MODES.items()}
#: cuDNN's gates per mode (`_num_linear_layers` / 2)
_GATES = {0: 1, 1: 1, 2: 4, 3: 3}

_TABLE_PATH = os.path.join(os.path.dirname(__file__), "cudnn_rnn_h200.json")
_table: dict | None = None
_dropout_bytes: dict = {}
#: the process's dropout state (`dropout_state_cache` in RNN.cpp), per capture
_dropout_state: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _problems() -> dict:
    global _table
    if _table is None:
        with open(_TABLE_PATH) as f:
            doc = json.load(f)
        _dropout_bytes.update({int(k): v for k, v in doc["dropout_state_bytes"].items()})
        _table = {_key_of(p): p for p in doc["problems"]}
    return _table


def _key_of(p: dict) -> tuple:
    bs = p["batch_sizes"]
    return (
        p["mode"],
        p["dtype"],
        p["input_size"],
        p["hidden_size"],
        p["proj_size"],
        p["num_layers"],
        bool(p["bidirectional"]),
        p["batch"],
        p["seq_length"],
        tuple(bs) if bs is not None else None,
        bool(p["train"]),
    )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---- the flat weight buffer (cuDNN's layout) ------------------------------------------


def weight_layout(mode: int, input_size: int, hidden: int, proj: int, layers: int, bidirectional: bool):
    """cuDNN's flat weight buffer (`cudnnGetRNNWeightSpaceSize`, `get_parameters`): its element count
    and, per pseudo-layer (layer, direction), the (offset, shape) of w_ih, w_hh, b_ih, b_hh and w_hr
    where projected. Matrices of every pseudo-layer first, then the biases (double bias, always
    there), as the GPU's records place them."""
    gh = _GATES[mode] * hidden
    out = proj or hidden
    dirs = 2 if bidirectional else 1
    mats, offset = [], 0
    for layer in range(layers):
        in_l = input_size if layer == 0 else out * dirs
        for _ in range(dirs):
            entry = [(offset, (gh, in_l))]
            offset += gh * in_l
            entry.append((offset, (gh, out)))
            offset += gh * out
            if proj:
                entry.append((offset, (proj, hidden)))
                offset += proj * hidden
            mats.append(entry)
    layout = []
    for entry in mats:
        biases = [(offset, (gh,)), (offset + gh, (gh,))]
        offset += 2 * gh
        layout.append([entry[0], entry[1], *biases, *entry[2:]])
    return offset, layout


def _param_slots(layout, weight_stride0: int, n_params: int):
    """The layout's (offset, shape) for each of PyTorch's parameters (`_viewOrCopyParams`: weights
    before biases; w_ih, w_hh, w_hr without biases)."""
    slots = []
    for entry in layout:
        if weight_stride0 == len(entry):
            slots.extend(entry)
        elif weight_stride0 == 3 and len(entry) == 5:
            slots.extend([entry[0], entry[1], entry[4]])
        else:
            slots.extend(entry[:weight_stride0])
    return slots[:n_params]


# ---- the module's flatten_parameters ---------------------------------------------------


def _jit_cache_cold() -> bool:
    """`VRAMSCOPE_JIT_CACHE_COLD=1`, a validation setting: the GPU machine's driver JIT cache does not
    hold the kernels cuDNN's RNN handle loads yet (the machine's first process to use them), so the
    driver maps its PTX compiler at the first RNN call (rule 18: km67's probe, `plain`). Unset: the
    cache holds them, as in km03's and dq01's runs of session 68 (docs/driver-placement.md)."""
    return os.environ.get("VRAMSCOPE_JIT_CACHE_COLD", "") not in ("", "0")


def _data_ptr(cap, func, args, kwargs):
    """`Tensor.data_ptr()` of a simulated tensor: distinct for distinct storages and offsets, as on
    the GPU (RNNBase.flatten_parameters flattens only parameters of distinct pointers). The storage's
    own address stands in for its allocation; 512-aligned as the caching allocator's blocks."""
    t = args[0] if args else None
    if not is_ours(t) or kwargs:
        return NotImplemented
    return _cudagraph_trees.storage_ptr(t.untyped_storage()._cdata) + t.storage_offset() * t.element_size()


def _flatten_weight(cap, func, args, kwargs):
    """`_cudnn_rnn_flatten_weight` (`copy_weights_to_flat_buf_views`): `at::zeros(num_weights)`, the
    parameters copied in, each then `set_` to its view of the buffer."""
    weights = list(args[0])
    if kwargs or not weights or not all(registered(w) for w in weights):
        return NotImplemented
    weight_stride0, input_size, mode, hidden, proj, layers, _batch_first, bidir = args[1:9]
    cap.ops += 1
    # the handle and the RNN descriptor before the buffer (`getCudnnHandle`, `rnn.descriptor`): at
    # the process's first, cuDNN's libraries and the driver's mappings (driver address-space rule 18)
    cap.device.cudnn_rnn(_jit_cache_cold())
    n, layout = weight_layout(mode, input_size, hidden, proj, layers, bidir)
    buf = torch.zeros(n, dtype=weights[0].dtype, device="meta")
    cap.track(buf, "aten::_cudnn_rnn_flatten_weight", "parameter")
    storage = buf.untyped_storage()
    for w, (offset, _shape) in zip(weights, _param_slots(layout, weight_stride0, len(weights)), strict=True):
        w.set_(storage, offset, w.shape, w.stride())
    return buf


# ---- at::lstm / at::gru / at::rnn_* on the cuDNN path ---------------------------------------


def _cudnn_acceptable(t) -> bool:
    """`cudnn_is_acceptable` (aten/src/ATen/native/TensorProperties.cpp)."""
    return torch.backends.cudnn.enabled and is_ours(t) and t.numel() > 0


def _try_get_weight_buf(x, params, has_biases, mode, hidden, proj, layers, bidir):
    """`try_get_weight_buf`: the parameters' storage as the flat buffer when they lie in it where
    cuDNN expects them; else None (`_cudnn_rnn` then builds one)."""
    n, layout = weight_layout(mode, x.shape[-1], hidden, proj, layers, bidir)
    first = params[0]
    storage = first.untyped_storage()
    if storage.nbytes() // first.element_size() < n:
        return None
    per_layer = (4 if has_biases else 2) + (1 if proj else 0)
    slots = _param_slots(layout, per_layer, len(params))
    if len(slots) != len(params):
        return None
    key = storage._cdata
    for p, (offset, _shape) in zip(params, slots, strict=True):
        if p.untyped_storage()._cdata != key or p.storage_offset() != offset:
            return None
    if not params[-1].is_contiguous():
        return None
    # at::empty({0}).set_(param_storage), narrowed to num_params
    buf = torch.empty(0, dtype=first.dtype, device=x.device).set_(storage)
    if buf.shape[0] > n:
        buf = buf.narrow(0, 0, n)
    return buf


def _get_dropout_state(cap, dropout_p: float, train: bool, x):
    """`get_dropout_state`: made on first use with dropout in training (a seed drawn through a
    one-element CUDA tensor, then `_cudnn_init_dropout_state`), kept for the process."""
    state = _dropout_state.get(cap)
    if train and dropout_p > 0 and state is None:
        # at::empty({}, kLong).random_(gen).item(): the draw itself is left out (the twin's values of
        # random ops come from the host's generator, which the program's own draws use)
        seed = torch.empty((), dtype=torch.int64, device=x.device)
        del seed
        state = aten._cudnn_init_dropout_state(dropout_p, train, 0, dtype=torch.uint8, device=x.device)
        _dropout_state[cap] = state
    return state


def _init_dropout_state(cap, func, args, kwargs):
    """`_cudnn_init_dropout_state`: `cudnnDropoutGetStatesSize` bytes (measured per SM count)."""
    cap.ops += 1
    _problems()
    sms = cap.device.multi_processor_count
    nbytes = _dropout_bytes.get(sms)
    if nbytes is None:
        cap.note_unmeasured(f"cuDNN's dropout state size on a GPU of {sms} SMs")
        nbytes = 0
    state = torch.empty(nbytes, dtype=torch.uint8, device="meta")
    cap.track(state, "aten::_cudnn_init_dropout_state", "buffer")
    return state


def _needs_cast(params) -> bool:
    """`_cudnn_rnn_cast_reflatten`'s `is_eligible(weight[0])` and not already fp16 (AutocastRNN.cpp)."""
    w = params[0] if params else None
    return (
        isinstance(w, torch.Tensor)
        and w.is_floating_point()
        and w.dtype not in (torch.float64, torch.float16)
    )


def _cast_reflatten(x, hx, cx, params, mode, hidden, proj, layers, bidir):
    """AutocastRNN.cpp's `_cudnn_rnn_cast_reflatten` under CUDA autocast (whatever its dtype: the
    flat buffer is fp16): `copy_weights_to_flat_buf_views` zeroes a new fp16 flat buffer and copies
    each weight into a tensor over its storage (`get_parameters`' `set_`, no view of the buffer for
    autograd: each copy is its own `CopyBackwards`), then `_cudnn_rnn` runs on `cached_cast(kHalf, ...)`
    of the input and hidden states (new fp16 tensors: not leaves), made in the order the compiler
    evaluates the call's arguments. `get_parameters` gives each parameter the shape (numel, 1) and
    `_viewOrCopyOneParam` copies `param_from.view_as(param_to)` (cudnn/RNN.cpp), so each call's
    weight gradient reaches the parameter through a view of CopyBackwards' fp32 cast: the engine's
    input buffer cannot add the next call's gradient into it in place (`can_accumulate_inplace`: the
    view's storage has two holders) and adds out of place once a step (blind208/gz05's history: a
    fp32 `add` of each LSTM weight's size after the first unroll step's cast)."""
    half = torch.float16
    with torch.autocast("cuda", enabled=False):
        n, _ = weight_layout(mode, x.shape[-1], hidden, proj, layers, bidir)
        n = max(n, sum(p.numel() for p in params))
        flat = torch.zeros(n, dtype=half, device=x.device)
        storage = flat.untyped_storage()
        views, offset = [], 0
        for p in params:
            # a tensor over the buffer's storage (`set_`), not an autograd view of it: the copy's
            # backward is its own CopyBackwards, no CopySlices over the buffer (blind123/ds02's history)
            v = torch.empty(0, dtype=half, device=x.device).set_(storage, offset, (p.numel(), 1), (1, 1))
            v.copy_(p.view_as(v))
            views.append(v)
            offset += p.numel()
        # the call's arguments are evaluated right to left (GCC): cx's cast, hx's, then the input's
        # (blind150/et03's and et04's memory histories)
        cast = [t.to(half) if isinstance(t, torch.Tensor) and t.dtype != half else t for t in (cx, hx, x)]
    return cast[2], cast[1], cast[0], views, flat


def _rnn(mode_name: str):
    mode = MODES[mode_name]

    def run(cap, func, args, kwargs):
        if kwargs or len(args) < 9:
            return NotImplemented
        x = args[0]
        if mode_name == "lstm":
            packed = isinstance(args[1], torch.Tensor)
        else:
            packed = isinstance(args[2], torch.Tensor)
        if packed:
            x, batch_sizes_t, hidden, params, has_biases, layers, dropout_p, train, bidir = args
            batch_first = False
            if not isinstance(batch_sizes_t, torch.Tensor) or is_ours(batch_sizes_t):
                return NotImplemented
            batch_sizes = [int(b) for b in batch_sizes_t.tolist()]
        else:
            x, hidden, params, has_biases, layers, dropout_p, train, bidir, batch_first = args
            batch_sizes = []
        if not _cudnn_acceptable(x):
            return NotImplemented
        if mode_name == "lstm":
            hx, cx = hidden
        else:
            hx, cx = hidden, None
        hidden_size, proj = hx.shape[2], 0
        if cx is not None and cx.shape[2] != hx.shape[2]:
            hidden_size, proj = cx.shape[2], hx.shape[2]
        params = list(params)
        weight_buf = _try_get_weight_buf(x, params, has_biases, mode, hidden_size, proj, layers, bidir)
        # RNN.cpp's `_cudnn_impl` gets the dropout state before calling `at::_cudnn_rnn`, which
        # autocast's `_cudnn_rnn_cast_reflatten` takes (blind150/et04's memory history)
        state = _get_dropout_state(cap, dropout_p, train, x)
        if torch.is_autocast_enabled("cuda") and _needs_cast(params):
            x, hx, cx, params, weight_buf = _cast_reflatten(
                x, hx, cx, params, mode, hidden_size, proj, layers, bidir
            )
        n_params = (4 if has_biases else 2) + (1 if proj else 0)
        out = aten._cudnn_rnn(
            x,
            params,
            n_params,
            weight_buf,
            hx,
            cx,
            mode,
            hidden_size,
            proj,
            layers,
            batch_first,
            dropout_p,
            train,
            bidir,
            batch_sizes,
            state,
        )
        if mode_name == "lstm":
            return out[0], out[1], out[2]
        return out[0], out[1]

    return run


# ---- the kernels ------------------------------------------------------------------------


def _empty(shape, dtype, transpose: bool = False):
    """A fresh tensor of `shape`; `transpose`: made time-major and transposed back (`transpose_(0, 1)`)."""
    shape = list(shape)
    if not transpose:
        return torch.empty(shape, dtype=dtype, device="meta")
    tm = [shape[1], shape[0], *shape[2:]]
    st = list(contiguous_strides(tm))
    st[0], st[1] = st[1], st[0]
    return torch.empty_strided(shape, st, dtype=dtype, device="meta")


def _copy_unless_contiguous(cap, t, op: str):
    """`t.contiguous()`: a temporary copy when `t` is not."""
    if t is None or t.is_contiguous():
        return None
    return cap.malloc(t.numel() * t.element_size(), op, "temporary")


_ELEMENT_BYTES = {torch.float32: 4, torch.float16: 2}
_MIB = 1 << 20


def _fitted(
    mode, dtype, input_size, hidden, proj, layers, bidir, dropout, train, batch, seq, tokens, packed=True
):
    """cuDNN 9.19's workspace and reserve on sm_90 for CUDNN_RNN_ALGO_STANDARD (RNN.cpp `get_algo`:
    always for packed inputs), fitted to GPU measurements (validation/run/rnn_sweep.py,
    fixtures/run/rnn_sweep_h200.jsonl.xz; docs/cudnn-rnn.md). With E the element size, G the gates, W the
    weight matrices' elements (biases excluded), B the batch, T the steps of all sequences, S the
    longest, c0 = 256 + E*W + 8 MiB * layers * dirs:

    - packed workspace = c0 + E * (B * layers * 2 * (G*h + 2h [LSTM: + 2h]) + T * ct),
      ct = 4h + 2 * max(max(G, 2) * h, 2 * input);
    - unpacked workspace = c0 + roundup(8B, 32) + E * B * (S * ut + layers * ub), ut = 14h + input,
      ub = 24h (LSTM); ut = 12h + 2 * input (inference: + input), ub = 14h (GRU, RNN);
    - the backward's two workspaces are the training forward's; for LSTM and GRU inference takes
      the same forms;
    - reserve = 256 + E * T * (layers * dirs * k*h + (layers - 1) * dirs * h), k = 1 (RNN), 5 (LSTM),
      6 (GRU), plus with dropout in training B * S * (layers - 1) * dirs * dirs * h / 8.

    Domain (None outside it): float32 or float16 (bfloat16 fails on the GPU with
    CUDNN_STATUS_BAD_PARAM), 1 to 4 layers; projected LSTMs take `_fitted_proj`, other
    unidirectional problems `_fitted_uni`, unpacked bidirectional LSTMs of hidden <= 192
    `_fitted_small_h_bidir`; other bidirectional ones: packed: LSTM and GRU with
    hidden >= 256 and 2 * input <= G * hidden, RNN_TANH/RELU with 2 or more layers; unpacked: at
    least 2 steps, input <= hidden, LSTM with hidden >= 256, GRU with hidden >= 256 and 2 or more
    layers, RNN_TANH/RELU with hidden > 384 (the standard algorithm) and 2 or more layers. RNN
    inference is outside. On the sweep's held-out problems in it the sizes are exact or under by at
    most 180 bytes (an alignment padding this leaves out)."""
    es = _ELEMENT_BYTES.get(dtype)
    if es is None or layers < 1 or layers > 4:
        return None
    if proj:
        return _fitted_proj(
            mode, dtype, input_size, hidden, proj, layers, bidir, dropout, train, batch, seq, tokens, packed
        )
    if not bidir:
        return _fitted_uni(
            mode, dtype, input_size, hidden, proj, layers, dropout, train, batch, seq, tokens, packed
        )
    gates = _GATES[mode]
    lstm = mode == MODES["lstm"]
    rnn = mode in (MODES["rnn_relu"], MODES["rnn_tanh"])
    h, dirs = hidden, 2
    if not packed and lstm and hidden <= 192:
        small = _fitted_small_h_bidir(input_size, hidden, layers, train, batch, seq, tokens, es)
        if small is not None:
            return small
    if packed:
        outside = not rnn and (hidden < 256 or 2 * input_size > gates * hidden)
    else:
        outside = (
            seq < 2 or input_size > hidden or hidden < (385 if rnn else 256) or (layers < 2 and not lstm)
        )
    if outside or (rnn and (layers < 2 or not train)):
        return _bi_reserve_only(mode, es, hidden, layers, dropout, train, batch, seq, tokens)
    n, layout = weight_layout(mode, input_size, hidden, proj, layers, bidir)
    matrices = n - len(layout) * 2 * gates * hidden
    c0 = 256 + es * matrices + 8 * _MIB * layers * dirs
    if packed:
        cb = layers * dirs * (gates * h + 2 * h + (2 * h if lstm else 0))
        ct = 4 * h + dirs * max(max(gates, 2) * h, 2 * input_size)
        workspace = c0 + es * (batch * cb + tokens * ct)
    else:
        if lstm:
            ut, ub = 14 * h + input_size, 24 * h
        else:
            ut, ub = 12 * h + (2 if train else 1) * input_size, 14 * h
        workspace = c0 + -(-8 * batch // 32) * 32 + es * batch * (seq * ut + layers * ub)
    if not train:
        return {"workspace": workspace}
    k = {MODES["rnn_relu"]: 1, MODES["rnn_tanh"]: 1, MODES["lstm"]: 5, MODES["gru"]: 6}[mode]
    reserve = 256 + es * tokens * (layers * dirs * k * h + (layers - 1) * dirs * h)
    if dropout > 0:
        reserve += batch * seq * (layers - 1) * dirs * dirs * h // 8
    return {"workspace": workspace, "reserve": reserve, "backward_workspace": workspace}


def _bi_reserve_only(mode, es, hidden, layers, dropout, train, batch, seq, tokens):
    """A bidirectional problem in training whose workspace `_fitted` does not give (a persistent
    algorithm: RNN.cpp's `use_rnn_persist_small_h` does not look at the directions; or a workspace
    outside its forms): the reserve alone, the workspace None (named unmeasured). The reserve is
    `_fitted`'s whatever the algorithm: on all 2,441 bidirectional problems without projection of
    fixtures/run/rnn_sweep_h200.jsonl.xz (the 253 unpacked ones of CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H
    among them, every mode, 1 to 4 layers, packed and unpacked) it is exact or under by at most 180
    bytes (alignment padding), and it is exact on blind223's BiGRU of 128 and 2-layer BiLSTM of 32
    (cudnn_rnn_h200.json). timm's Sequencer2D (blind270/jk01: BiLSTMs of 48 and 96 over rows and
    columns) held about 1 GB of these reserves, counted as 0 before."""
    if not train:
        return None
    k = {MODES["rnn_relu"]: 1, MODES["rnn_tanh"]: 1, MODES["lstm"]: 5, MODES["gru"]: 6}[mode]
    reserve = 256 + es * tokens * (layers * 2 * k * hidden + (layers - 1) * 2 * hidden)
    if dropout > 0:
        reserve += batch * seq * (layers - 1) * 4 * hidden // 8
    return {"workspace": None, "reserve": reserve, "backward_workspace": None}


def _fitted_small_h(input_size, hidden, layers, dropout, train, batch, seq, tokens, es, dtype):
    """An unpacked unidirectional LSTM of hidden <= 192: RNN.cpp `get_algo` picks
    CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H forward (`use_rnn_persist_small_h`: LSTM and GRU hidden <= 192
    forward, <= 128 backward; before the float16 persistent heuristics), whose sizes the GPU's per-op
    records give (cudnn_rnn_h200.json: blind174/fr04's TFT LSTMs of 160 and fr05's DeepAR LSTM of 128 in
    float32, 2 and 3 layers; blind121's float16 LSTM of 160 and blind141's of 64, one layer). With E, W,
    B, T, S, h, i, L and c0 as in `_fitted_uni`:

    - inference workspace = c0 + roundup(8B, 32) + E * (B * L * 8h + T * (21h + i));
    - training workspace = the inference's + E * T * h with dropout; reserve as the standard algorithm's;
    - the backward's two workspaces: hidden <= 128 the training forward's (persistent backward too),
      otherwise the standard algorithm's training workspace.

    All 15 such problems of the table agree exactly; of the sweeps' 117 unpacked unidirectional LSTMs
    that ran this algorithm (`algo_fwd` 3 in fixtures/run/rnn_sweep_uni_h200.jsonl.xz and
    rnn_sweep_h200.jsonl.xz) the inference workspace is exact in 107 and under by at most 220 bytes
    (alignment padding, held-out sizes) in 10, and the 4 trained with inputs no wider than the hidden
    size are under by at most 220 bytes in each figure. Domain (None outside it): float32 and float16,
    at most 282 steps (the longest measured), and in training inputs no wider than the hidden size
    (wider ones, 109 of the sweeps' problems and blind141's float16 LSTM of 64 over 128 inputs, train
    with a larger workspace this does not give)."""
    h, i, b, t = hidden, input_size, batch, tokens
    if seq > 282 or (train and i > h):
        return None
    lstm = MODES["lstm"]
    infer = _persist_infer(es, i, h, layers, b, t)
    if not train:
        return {"workspace": infer}
    workspace = infer + (es * t * h if dropout > 0 else 0)
    reserve = 256 + es * t * (layers * 5 * h + (layers - 1) * h)
    if dropout > 0:
        reserve += b * seq * (layers - 1) * h // 8
    if h <= 128:
        backward = workspace
    else:
        std = _fitted_uni(lstm, dtype, i, h, 0, layers, dropout, True, b, seq, t, False, standard=True)
        if std is None:
            return None
        backward = std["workspace"]
    return {"workspace": workspace, "reserve": reserve, "backward_workspace": backward}


def _persist_infer(es, input_size, hidden, layers, batch, tokens) -> int:
    """The inference workspace of an unpacked unidirectional LSTM on either persistent algorithm
    (CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H, `_fitted_small_h`; CUDNN_RNN_ALGO_PERSIST_STATIC,
    `_fitted_persist_static`): c0 + roundup(8B, 32) + E * (B * L * 8h + T * (21h + i)), c0 as in
    `_fitted_uni`."""
    h, i = hidden, input_size
    n, layout = weight_layout(MODES["lstm"], i, h, 0, layers, False)
    c0 = 256 + es * (n - len(layout) * 2 * 4 * h) + 8 * _MIB * layers
    return c0 + -(-8 * batch // 32) * 32 + es * (batch * layers * 8 * h + tokens * (21 * h + i))


#: the most steps of an unpacked unidirectional LSTM or GRU `_fitted_uni` answers: the H100 probes measured
#: every figure exact to 4,096 (fixtures/run/probes/lead70_rnn_long_seq_sweep_probe_h100.jsonl to 2,048;
#: fixtures/run/probes/rn71_rnn_wavefront_chunk_probe_h100_v2.jsonl's 9 "longer" problems: a float32 GRU of
#: 512 over 1,024 inputs at 4 x 3,000, LSTMs and GRUs of 512 over 256 at 16 x 4,096, 1 and 2 layers)
_UNPACKED_LONGEST = 4096

#: the most steps (the longest sequence) of a packed unidirectional LSTM or GRU `_fitted_uni` answers
#: (training with dropout: 400): validation/run/probes/rn72_rnn_packed_long_training_probe_h100.jsonl
#: measured 336 problems to 2,048 steps (1 to 3 layers, batch 1 to 64, equal and spread lengths,
#: float32 and float16), every training, backward and inference workspace and reserve exact
_PACKED_LONGEST = 2048


def _fitted_persist_static(input_size, hidden, layers, train, batch, seq, tokens, es):
    """A float16 one-layer unpacked LSTM that RNN.cpp's `use_persist_common_heuristics` and
    `use_persist_device_heuristics` send to CUDNN_RNN_ALGO_PERSIST_STATIC (`_persistent`), forward and
    backward: the small-hidden persistent algorithm's inference form (`_persist_infer`), which the
    training forward and the backward take too. GPU measurements: the uni sweep's 21 such problems
    (fixtures/run/rnn_sweep_uni_h200.jsonl.xz, `algo_fwd` 1: 256 inputs, hidden 512, batch 8 to 128,
    1 to 200 steps; inference exact in all) and the H100 probe's 9
    (fixtures/run/probes/lead70_rnn_long_seq_sweep_probe_h100.jsonl: 512 inputs, hidden 256, 512 and
    1,024, batch 64, 512 to 2,048 steps; fixtures/run/probes/rn71_rnn_wavefront_chunk_probe_h100_v2.jsonl:
    256 inputs, hidden 512, batch 16 over 4,096 steps; every figure exact). Domain (None outside it):
    at most `_UNPACKED_LONGEST` steps; in training at least 224 tokens (B * S: at 128 tokens or fewer,
    batch 8 of 2 and 7 steps, 32 of 1 and 2, 64 of 2, the sweep's training workspace exceeds the form by
    1.2 to 2.3 MB, which this leaves out)."""
    if seq > _UNPACKED_LONGEST or (train and tokens < 224):
        return None
    infer = _persist_infer(es, input_size, hidden, layers, batch, tokens)
    if not train:
        return {"workspace": infer}
    reserve = _uni_reserve(MODES["lstm"], es, hidden, layers, 0.0, batch, seq, tokens)
    return {"workspace": infer, "reserve": reserve, "backward_workspace": infer}


def _fitted_small_h_bidir(input_size, hidden, layers, train, batch, seq, tokens, es):
    """An unpacked bidirectional LSTM of hidden <= 192: CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H forward
    (`use_rnn_persist_small_h` does not consult the directions), persistent backward too for hidden
    <= 128. Fitted to session 61's H100 measurements (cuDNN 9.19, sm_90, 132 SMs as the H200;
    validation/run/probes/rnn_bidir_small_h_probe_s61.py, fixtures/run/rnn_bidir_small_h_h100.jsonl.xz:
    blind270/jk01's four problems and a grid of 420, hidden 32-192, input 64-384, batch 64-8192, 16
    and 32 steps, float16 and float32, one layer) and to the bidirectional sweep's 33 such problems
    of 2 and 3 layers (rnn_sweep_h200.jsonl.xz).
    With E, W, B, T, S, h, i, L as in `_fitted_uni`, c0 = 256 + E*W + 8 MiB * L * 2:

    - inference workspace = c0 + roundup(8B, 32) + E * (B * L * 18h + T * (30h + i));
    - training workspace, one layer: max(inference, c0 + roundup(8B, 32) + E * (B * 26h + T * (6i + 18h)))
      (the second wins where 5i > 12h);
    - reserve as the standard algorithm's: 256 + E * T * 10h (one layer);
    - the backward's two workspaces: hidden <= 128 the training forward's; otherwise (the standard
      algorithm backward) max(`_fitted`'s unpacked standard form c0 + roundup(8B, 32) + E * B * (S * (14h + i)
      + 24h), c0 + roundup(8B, 32) + E * (B * 26h + T * (6h + 6i))) -- the second measured only where
      input 384 meets hidden 160 and 192 (40 problems).

    Exact on all 424 problems of the session-61 grid; inference exact on 32 of the sweep's 33 and 176
    bytes under (alignment padding) on its 3-layer one; exact on the table's nine such problems
    (cudnn_rnn_h200.json: blind150/et05's char BiLSTM of 50, fp32, training at 30,720 x 16 and
    inference at 163,840 x 16; blind190/gh02's float16 BiLSTMs of 128 training at 664 x 100 and
    800 x 83, inference at 1,328 x 100, 1,600 x 83, 603 x 100 and 100 x 603; blind223/ho05's 2-layer
    BiLSTM of 32 over 512 inputs in inference at 128 x 384). Domain (None outside it): float32 and
    float16, hidden >= 32; inference 1 to 3 layers and at most 603 steps; training one layer and 16
    to 100 steps (more layers train with a workspace these forms do not give: the sweep's 2-layer
    problems of hidden 64 and 128 and ho05's trained BiLSTM exceed them); outside it `_fitted` goes
    on to `_bi_reserve_only`."""
    h, i, b, t = hidden, input_size, batch, tokens
    if hidden < 32:
        return None
    if train and (layers != 1 or not 16 <= seq <= 100):
        return None
    if not train and (layers > 3 or seq > 603):
        return None
    lstm = MODES["lstm"]
    n, layout = weight_layout(lstm, i, h, 0, layers, True)
    matrices = n - len(layout) * 2 * 4 * h
    base = 256 + es * matrices + 8 * _MIB * layers * 2 + -(-8 * b // 32) * 32
    infer = base + es * (b * layers * 18 * h + t * (30 * h + i))
    if not train:
        return {"workspace": infer}
    workspace = max(infer, base + es * (b * 26 * h + t * (6 * i + 18 * h)))
    reserve = 256 + es * t * 10 * h
    if h <= 128:
        backward = workspace
    else:
        standard = base + es * b * (seq * (14 * h + i) + 24 * h)
        backward = max(standard, base + es * (b * 26 * h + t * (6 * h + 6 * i)))
    return {"workspace": workspace, "reserve": reserve, "backward_workspace": backward}


#: cuDNN's per-sequence workspace elements per layer and hidden unit of unidirectional problems, by
#: gates (RNN 1, GRU 3, LSTM 4): packed, unpacked (GPU measurements, fixtures/run/rnn_sweep_uni_h200.jsonl.xz)
_UNI_PACKED_B = {1: 1, 3: 3, 4: 6}
_UNI_UNPACKED_B = {1: 3, 3: 5, 4: 10}


def _persistent(mode, dtype, input_size, hidden, layers, batch) -> bool:
    """RNN.cpp `get_algo` on sm_90 (132 SMs) for an unpacked unidirectional problem without
    projection: a persistent algorithm, forward or backward (`use_rnn_persist_small_h`: hidden <= 384
    for RNN_TANH/RELU, <= 192 for LSTM/GRU in the forward, less in the backward), or for float16
    `use_persist_common_heuristics` and `use_persist_device_heuristics` (one layer, hidden <= 1024,
    hidden and input multiples of 128, batch a multiple of 8 up to 128; not GRU; RNN_TANH/RELU
    only with batch < 96 or hidden < 896)."""
    rnn = mode in (MODES["rnn_relu"], MODES["rnn_tanh"])
    if hidden <= (384 if rnn else 192):
        return True
    if dtype != torch.float16 or mode == MODES["gru"]:
        return False
    common = layers == 1 and hidden <= 1024 and hidden % 128 == 0 and input_size % 128 == 0
    device = batch % 8 == 0 and batch <= 128 and (mode == MODES["lstm"] or batch < 96 or hidden < 896)
    return common and device


def _fitted_uni(
    mode, dtype, input_size, hidden, proj, layers, dropout, train, batch, seq, tokens, packed, standard=False
):
    """`_fitted` for unidirectional problems: cuDNN 9.19's workspace and reserve on sm_90 for
    CUDNN_RNN_ALGO_STANDARD, fitted to GPU measurements (validation/run/rnn_sweep.py `uni`,
    fixtures/run/rnn_sweep_uni_h200.jsonl.xz; docs/cudnn-rnn.md). With E, G, W, B, T, S as in
    `_fitted`, h hidden, i input, L layers, c0 = 256 + E*W + 8 MiB * L and Tc = min(T, 256 * B)
    (the gates' buffer holds at most 256 steps):

    - packed inference workspace = c0 + E * (B * L * pb*h + Tc * G*h), pb = 1, 3, 6 (RNN, GRU, LSTM);
    - unpacked inference workspace = c0 + roundup(8B, 32) + E * (B * L * ub*h + Tc * G*h + T * (h + i)),
      ub = 3, 5, 10;
    - training: a = inference + E * T * h with dropout (and always for packed RNNs), then
      packed LSTM/GRU: max(a, c0 + E * (B * L * pf*h + min(T, B * k)*h + T * max(h, i))), pf = 1
      (LSTM 3), k = `_wavefront_steps` (S for one layer: min(T, B * S) = T);
      unpacked, max(a, f), f = c0 + roundup(8B, 32) + E * (B * L * fb*h + B * k*h +
      T * (2h + 2i + max(h, i))), fb = 5 (LSTM 11); where k is unknown (either), a if f with k = S
      is at most a;
    - the backward's two workspaces are the training forward's;
    - reserve = 256 + E * T * (L * k*h + (L - 1) * h), k = 1, 6, 5 (RNN, GRU, LSTM), plus with
      dropout B * S * (L - 1) * h / 8.

    Domain (None outside it): RNN_TANH/RELU at most 400 steps in training, 800 in inference
    (fixtures/run/run_flash_rnn_probe_s36_h200.jsonl); LSTM and GRU packed at most `_PACKED_LONGEST`
    (training with dropout 400), unpacked at most `_UNPACKED_LONGEST` (fixtures/run/probes/
    lead70_rnn_long_seq_sweep_probe_h100.jsonl and rn71_rnn_wavefront_chunk_probe_h100_v2.jsonl);
    dropout only with 2 or more layers; unpacked: the standard algorithm (`_persistent`; float16 one-layer
    LSTMs it sends to CUDNN_RNN_ALGO_PERSIST_STATIC take `_fitted_persist_static`);
    training: packed RNN_TANH/RELU with i <= h and one layer or dropout; packed LSTM/GRU and unpacked
    with more layers where `_wavefront_steps` knows k, or f with k = S is at most a. Elsewhere the
    training workspace depends on a cuDNN heuristic the sweeps do not resolve.
    In the domain the sizes are exact or under by an alignment padding this leaves out (docs/cudnn-rnn.md).

    Unpacked LSTMs of hidden <= 192 run CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H forward: `_fitted_small_h`;
    `standard` asks for the standard algorithm's sizes whatever the heuristics pick (that backward)."""
    es = _ELEMENT_BYTES[dtype]
    lstm_gru = mode in (MODES["lstm"], MODES["gru"])
    if lstm_gru:
        # packed training with dropout: measured to 400 steps only (the sweeps)
        longest = (400 if train and dropout > 0 else _PACKED_LONGEST) if packed else _UNPACKED_LONGEST
    else:
        longest = 400 if train else 800
    if seq > longest or (dropout > 0 and layers < 2):
        return None
    if not packed and mode == MODES["lstm"] and hidden <= 192 and not standard:
        return _fitted_small_h(input_size, hidden, layers, dropout, train, batch, seq, tokens, es, dtype)
    if not packed and not standard and _persistent(mode, dtype, input_size, hidden, layers, batch):
        if mode == MODES["lstm"]:
            return _fitted_persist_static(input_size, hidden, layers, train, batch, seq, tokens, es)
        return _reserve_only(mode, es, hidden, layers, dropout, train, batch, seq, tokens)
    gates = _GATES[mode]
    lstm = mode == MODES["lstm"]
    rnn = mode in (MODES["rnn_relu"], MODES["rnn_tanh"])
    h, i, b, t = hidden, input_size, batch, tokens
    capped = min(t, 256 * b)
    n, layout = weight_layout(mode, i, h, proj, layers, False)
    matrices = n - len(layout) * 2 * gates * h
    c0 = 256 + es * matrices + 8 * _MIB * layers
    rows = 0 if packed else -(-8 * b // 32) * 32
    if packed:
        infer = c0 + es * (b * layers * _UNI_PACKED_B[gates] * h + capped * gates * h)
    else:
        infer = c0 + rows + es * (b * layers * _UNI_UNPACKED_B[gates] * h + capped * gates * h + t * (h + i))
    if not train:
        return {"workspace": infer}
    a = infer + (es * t * h if dropout > 0 or (rnn and packed) else 0)
    if packed and rnn:
        workspace = a if i <= h and (layers == 1 or dropout > 0) else None
    elif packed:
        # f's per-sequence buffer of h holds the wavefront's k steps, at most the tokens (one layer: T),
        # and its per-token term is max(h, i): probes/rn72_rnn_packed_long_training_probe_h100.jsonl (336
        # problems to 2,048 steps) and the sweeps' 1,267 packed LSTM/GRU training problems (docs/cudnn-rnn.md)
        f = c0 + es * (b * layers * (3 if lstm else 1) * h + t * max(h, i))
        k = _wavefront_steps(b, seq, layers)
        if k is not None:
            workspace = max(a, f + es * min(t, b * k) * h)
        else:
            workspace = a if f + es * t * h <= a else None
    else:
        # f's per-sequence buffer of h holds k steps: the whole sequence for one layer, else the
        # wavefront's (`_wavefront_steps`); unknown there, f is at most its k = S value
        f = c0 + rows + es * (b * layers * (11 if lstm else 5) * h + t * (2 * h + 2 * i + max(h, i)))
        k = _wavefront_steps(b, seq, layers)
        if k is not None:
            workspace = max(a, f + es * b * h * k)
        else:
            workspace = a if f + es * t * h <= a else None
    if workspace is None:
        return _reserve_only(mode, es, hidden, layers, dropout, train, batch, seq, tokens)
    return {
        "workspace": workspace,
        "reserve": _uni_reserve(mode, es, hidden, layers, dropout, batch, seq, tokens),
        "backward_workspace": workspace,
    }


#: cuDNN's wavefront chunk c (steps) of unpacked multi-layer training by batch, below 128 steps:
#: (first batch, last batch, c), from 128 steps max(c, 8); batches past the last row are unmeasured.
#: GPU measurements: validation/run/probes/rn71_rnn_wavefront_chunk_probe.py, a float16 GRU, c the same
#: for every layer count (fixtures/run/probes/rn71_rnn_wavefront_chunk_probe_h100.jsonl: batch 1 to
#: 1,024 x 8 to 2,048 steps x 2 to 4 layers; rn71_rnn_wavefront_chunk_probe_gaps_h100.jsonl: batch 9,
#: 17-19, 97-104 and 1,536-4,096 x 48 to 128 steps, 121 to 127 among them, x 2 and 3 layers)
_WAVEFRONT_CHUNKS = ((1, 1, 32), (2, 8, 16), (9, 16, 8), (17, 96, 4), (97, 4096, 2))


def _wavefront_steps(batch, seq, layers):
    """The steps k of the unpacked training form f's per-sequence buffer of h elements (`_fitted_uni`):
    the whole sequence for one layer; with more, cuDNN runs the layers as a wavefront over chunks of
    c steps (`_WAVEFRONT_CHUNKS`) and k = min(S, c * L + max(c, 8)). Every unpacked multi-layer LSTM,
    GRU and RNN training workspace measured (the H200 sweeps, fixtures/run/rnn_sweep_uni_h200.jsonl.xz
    and rnn_sweep_h200.jsonl.xz: 2 to 4 layers, any h, i, dtype, with and without dropout; the H100
    probes past 400 steps, probes/lead70_rnn_long_seq_sweep_probe_h100.jsonl and
    validation/run/probes/lj70_lj03_lstm3_fp16_long_workspace_probe_h100.out; the chunk probes' 1,455)
    is max(a, f) with this k. None past the last row's batch (except at most 7 steps: k = S whatever c).
    Packed LSTM/GRU training takes the same k (its buffer min(T, B * k), B the first batch size, S the
    longest sequence): probes/rn72_rnn_packed_long_training_probe_h100.jsonl and the sweeps' packed
    problems."""
    if layers == 1 or seq <= 7:
        return seq
    for lo, hi, c in _WAVEFRONT_CHUNKS:
        if lo <= batch <= hi:
            c = c if seq < 128 else max(c, 8)
            return min(seq, c * layers + max(c, 8))
    return None


def _uni_reserve(mode, es, hidden, layers, dropout, batch, seq, tokens) -> int:
    """`_fitted_uni`'s training reserve: 256 + E * T * (L * k*h + (L - 1) * h), k = 1, 6, 5 (RNN, GRU,
    LSTM), plus with dropout B * S * (L - 1) * h / 8."""
    k = {MODES["rnn_relu"]: 1, MODES["rnn_tanh"]: 1, MODES["lstm"]: 5, MODES["gru"]: 6}[mode]
    reserve = 256 + es * tokens * (layers * k * hidden + (layers - 1) * hidden)
    if dropout > 0:
        reserve += batch * seq * (layers - 1) * hidden // 8
    return reserve


def _reserve_only(mode, es, hidden, layers, dropout, train, batch, seq, tokens):
    """A unidirectional RNN_TANH/RELU or GRU in training whose workspace `_fitted_uni` does not give
    (a persistent algorithm, or a workspace not linear in B and T): the reserve alone, the workspace
    None (named unmeasured). The reserve does not depend on the algorithm or the workspace: on all
    2,316 unidirectional RNN_TANH/RELU and GRU training problems of fixtures/run/rnn_sweep_uni_h200.jsonl.xz,
    the 965 whose workspace `_fitted_uni` leaves out included, `_uni_reserve` is exact or under by at
    most 115 bytes (alignment padding), and it is exact on the table's 16 such problems (blind58/bf04's
    3-layer RNN_TANH of 1,024 with its dropout among them). Session 57's H200 records of
    pytorch/examples word_language_model RNN_TANH and RNN_RELU (wild/examples) peaked 1,697,792 bytes
    above a twin that left this reserve out with the workspace. LSTMs get None: some of the sweep's
    differ by megabytes."""
    if not train or mode == MODES["lstm"]:
        return None
    return {
        "workspace": None,
        "reserve": _uni_reserve(mode, es, hidden, layers, dropout, batch, seq, tokens),
        "backward_workspace": None,
    }


def _fitted_proj(
    mode, dtype, input_size, hidden, proj, layers, bidir, dropout, train, batch, seq, tokens, packed
):
    """`_fitted` for LSTMs with projections (RNN.cpp `get_algo`: always CUDNN_RNN_ALGO_STANDARD):
    cuDNN 9.19's workspace and reserve on sm_90, fitted to GPU measurements (validation/run/rnn_sweep.py
    `proj`, fixtures/run/rnn_sweep_proj_h200.jsonl.xz; docs/cudnn-rnn.md). With E, B, T, S, h, i, L as in
    `_fitted_uni`, p the projection, W the weight matrices' elements (w_hr included), D the
    directions, c0 = 256 + E*W + 8 MiB * L * D and Tc = min(T, 256 * B):

    - inference workspace, unidirectional: packed c0 + E * (B * L * 6h + Tc * 4h + T * h), unpacked
      c0 + roundup(8B, 32) + E * (B * L * (8h + 2p) + Tc * 4h + T * (h + i + p));
      bidirectional: packed c0 + E * (B * L * 16h + T * 14h), unpacked
      c0 + roundup(8B, 32) + E * (B * L * (20h + 4p) + T * (14h + 2p + i));
    - training workspace: one unidirectional layer max(inference, f), f = c0 + E * (B * 3h +
      T * (i + 2h)) packed, c0 + roundup(8B, 32) + E * (B * (7h + 4p) + T * (3i + 2h + 2p))
      unpacked; otherwise inference (unidirectional with dropout: + E * T * h); the backward's two
      workspaces are the training forward's;
    - reserve = 256 + E * T * (L * D * (6h + p) + (L - 1) * D * h), plus with dropout
      B * S * (L - 1) * D * D * p / 8.

    Domain (None outside it): LSTM, at most 400 steps, dropout only with 2 or more layers; training
    with more layers or directions only where i <= h, and unpacked where 2p > h only for 3 to 256
    steps (elsewhere the training workspace exceeds these forms by one the sweep does not resolve).
    On held-out problems in the domain (all three sweeps) the sizes are exact or under by at most
    316 bytes (alignment padding left out)."""
    if mode != MODES["lstm"] or seq > 400 or (dropout > 0 and layers < 2):
        return None
    es = _ELEMENT_BYTES[dtype]
    h, i, p, b, t = hidden, input_size, proj, batch, tokens
    dirs = 2 if bidir else 1
    n, layout = weight_layout(mode, i, h, p, layers, bidir)
    matrices = n - len(layout) * 8 * h
    c0 = 256 + es * matrices + 8 * _MIB * layers * dirs
    rows = 0 if packed else -(-8 * b // 32) * 32
    capped = min(t, 256 * b)
    if bidir and packed:
        infer = c0 + es * (b * layers * 16 * h + t * 14 * h)
    elif bidir:
        infer = c0 + rows + es * (b * layers * (20 * h + 4 * p) + t * (14 * h + 2 * p + i))
    elif packed:
        infer = c0 + es * (b * layers * 6 * h + capped * 4 * h + t * h)
    else:
        infer = c0 + rows + es * (b * layers * (8 * h + 2 * p) + capped * 4 * h + t * (h + i + p))
    if not train:
        return {"workspace": infer}
    if not packed and 2 * p > h and not 3 <= seq <= 256:
        return None
    if not bidir and layers == 1:
        if packed:
            f = c0 + es * (b * 3 * h + t * (i + 2 * h))
        else:
            f = c0 + rows + es * (b * (7 * h + 4 * p) + t * (3 * i + 2 * h + 2 * p))
        workspace = max(infer, f)
    elif i > h:
        return None
    else:
        workspace = infer + (es * t * h if dropout > 0 and not bidir else 0)
    reserve = 256 + es * t * (layers * dirs * (6 * h + p) + (layers - 1) * dirs * h)
    if dropout > 0:
        reserve += b * seq * (layers - 1) * dirs * dirs * p // 8
    return {"workspace": workspace, "reserve": reserve, "backward_workspace": workspace}


class _Problem:
    """`RNNParams` of one call: the descriptors' sizes and the measured workspace and reserve."""

    def __init__(self, x, mode, hidden, proj, layers, batch_first, train, bidir, batch_sizes, dropout=0.0):
        self.mode, self.hidden, self.proj, self.layers = mode, hidden, proj, layers
        self.train, self.bidir = bool(train), bool(bidir)
        # RNN.cpp's DropoutDescriptorParams: dropout only in training
        self.dropout = float(dropout) if self.train else 0.0
        self.packed = len(batch_sizes) > 0
        self.batch_first = bool(batch_first) and not self.packed
        self.dirs = 2 if bidir else 1
        if self.packed:
            self.seq, self.batch = len(batch_sizes), int(batch_sizes[0])
        elif batch_first:
            self.batch, self.seq = x.shape[0], x.shape[1]
        else:
            self.seq, self.batch = x.shape[0], x.shape[1]
        self.input_size = x.shape[-1]
        self.batch_sizes = tuple(int(b) for b in batch_sizes) if self.packed else None
        self.dtype = x.dtype
        out = proj or hidden
        self.hidden_shape = [layers * self.dirs, self.batch, out]
        self.cell_shape = [layers * self.dirs, self.batch, hidden]
        if self.packed:
            self.output_shape = [x.shape[0], out * self.dirs]
        elif self.batch_first:
            self.output_shape = [self.batch, self.seq, out * self.dirs]
        else:
            self.output_shape = [self.seq, self.batch, out * self.dirs]

    def time_major(self, t):
        return t.transpose(0, 1) if self.batch_first else t

    def measured(self, cap):
        """The table's entry, else the fitted formula's sizes where it holds, or None (named
        unmeasured)."""
        key = (
            _MODE_NAMES[self.mode],
            _dtype_name(self.dtype),
            self.input_size,
            self.hidden,
            self.proj,
            self.layers,
            self.bidir,
            self.batch,
            self.seq,
            self.batch_sizes,
            self.train,
        )
        # the table holds sm_90's picks: on another GPU every problem is unmeasured
        entry = _problems().get(key) if cap.device.cudnn_tables else None
        if entry is None and cap.device.cudnn_tables:
            entry = _fitted(
                self.mode,
                self.dtype,
                self.input_size,
                self.hidden,
                self.proj,
                self.layers,
                self.bidir,
                self.dropout,
                self.train,
                self.batch,
                self.seq,
                sum(self.batch_sizes) if self.packed else self.batch * self.seq,
                self.packed,
            )
        if entry is None or entry.get("workspace") is None:
            lengths = f"packed batch sizes {list(self.batch_sizes)}" if self.packed else f"length {self.seq}"
            what = "training workspace" if entry else "training workspace and reserve"
            cap.note_unmeasured(
                f"cuDNN's {what if self.train else 'inference workspace'} of "
                f"{_MODE_NAMES[self.mode]} (input {self.input_size}, hidden {self.hidden}, "
                f"proj {self.proj}, {self.layers} layers, {'bi' if self.bidir else 'uni'}directional, "
                f"{_dtype_name(self.dtype)}) on batch {self.batch}, {lengths}"
            )
        return entry


def _cudnn_rnn(cap, func, args, kwargs):
    """`_cudnn_rnn` (cudnn/RNN.cpp), training or inference."""
    x, _weight, _stride0, weight_buf, hx, cx = args[:6]
    mode, hidden, proj, layers, batch_first, dropout, train, bidir, batch_sizes, _state = args[6:16]
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    op = "aten::_cudnn_rnn"
    p = _Problem(x, mode, hidden, proj, layers, batch_first, train, bidir, batch_sizes, dropout)
    x_c = _copy_unless_contiguous(cap, p.time_major(x), op)
    output = cap.track(_empty(p.output_shape, x.dtype, p.batch_first), op)
    hy = cap.track(_empty(p.hidden_shape, hx.dtype), op)
    cy = cap.track(_empty(p.cell_shape if cx is not None else [0], hx.dtype), op)
    # `getCudnnHandle()` after output, hy and cy (cudnn/RNN.cpp): driver address-space rule 18
    cap.device.cudnn_rnn(_jit_cache_cold())
    if weight_buf is None:
        # the parameters are not flat: a buffer of them for this call
        n, _ = weight_layout(mode, p.input_size, hidden, proj, layers, bidir)
        weight_buf = cap.track(_empty([n], x.dtype), op)
    entry = p.measured(cap)
    ws_bytes = (entry["workspace"] if entry else 0) or 0
    workspace = cap.malloc(ws_bytes, op, "workspace")
    reserve_bytes = entry["reserve"] if entry and p.train else 0
    reserve = cap.track(_empty([reserve_bytes], torch.uint8), op, "saved_for_backward")
    del workspace, x_c
    return output, hy, cy, reserve, weight_buf


def _cudnn_rnn_backward(cap, func, args, kwargs):
    """`_cudnn_rnn_backward`: `_cudnn_rnn_backward_input`, then `_cudnn_rnn_backward_weight`."""
    x, weight, weight_stride0, weight_buf, hx, cx, output = args[:7]
    grad_output, grad_hy, grad_cy = args[7:10]
    mode, hidden, proj, layers, batch_first, dropout, train, bidir, batch_sizes = args[10:19]
    output_mask = list(args[21])
    if kwargs or not registered(x):
        return NotImplemented
    cap.ops += 1
    weight = list(weight)
    if grad_output is None and grad_hy is None and grad_cy is None:
        return None, None, None, [None] * len(weight)
    op = "aten::_cudnn_rnn_backward"
    p = _Problem(x, mode, hidden, proj, layers, batch_first, train, bidir, batch_sizes, dropout)
    # undefined gradients: at::zeros_like(..., LEGACY_CONTIGUOUS_MEMORY_FORMAT)
    zeros = []
    if grad_output is None:
        grad_output = _empty(output.shape, output.dtype)
        zeros.append(cap.malloc(output.numel() * output.element_size(), "aten::zeros_like", "temporary"))
    if grad_hy is None:
        grad_hy = _empty(hx.shape, hx.dtype)
        zeros.append(cap.malloc(hx.numel() * hx.element_size(), "aten::zeros_like", "temporary"))
    if cx is not None and grad_cy is None:
        grad_cy = _empty(cx.shape, cx.dtype)
        zeros.append(cap.malloc(cx.numel() * cx.element_size(), "aten::zeros_like", "temporary"))
    entry = p.measured(cap)
    ws_bytes = (entry.get("backward_workspace", 0) if entry else 0) or 0

    # _cudnn_rnn_backward_input: `getCudnnHandle()` first (cudnn/RNN.cpp), the autograd thread's
    # first cuDNN call takes the driver's pieces
    from ._capture import CUDNN_THREAD_PIECES_RNN_BACKWARD

    cap.cudnn_thread_handle(CUDNN_THREAD_PIECES_RNN_BACKWARD)
    x_c = _copy_unless_contiguous(cap, p.time_major(x), op)
    dy_c = _copy_unless_contiguous(cap, p.time_major(grad_output), op)
    dx = cap.track(_empty(x.shape, x.dtype, p.batch_first), op)
    dhy_c = _copy_unless_contiguous(cap, grad_hy, op)
    dcy_c = _copy_unless_contiguous(cap, grad_cy, op) if cx is not None else None
    dhx = cap.track(_empty(p.hidden_shape, hx.dtype), op)
    dcx = cap.track(_empty(p.cell_shape, cx.dtype), op) if cx is not None else None
    if not train:
        # `TORCH_CHECK(fn_train, ...)` after dcx (cudnn/RNN.cpp `_cudnn_rnn_backward_input`)
        del dcx, dhx, dcy_c, dhy_c, dx, dy_c, x_c
        zeros.clear()
        raise RuntimeError("cudnn RNN backward can only be called in training mode")
    workspace = cap.malloc(ws_bytes, op, "workspace")
    del workspace, dcy_c, dhy_c, dy_c, x_c

    # _cudnn_rnn_backward_weight
    dw = []
    if output_mask[3]:
        x_c = _copy_unless_contiguous(cap, p.time_major(x), op)
        n, layout = weight_layout(mode, p.input_size, hidden, proj, layers, bidir)
        flat = cap.track(_empty([n], weight_buf.dtype), op)
        workspace = cap.malloc(ws_bytes, op, "workspace")
        del workspace, x_c
        cudnn_stride0 = (4 + (1 if proj else 0)) if weight else 0
        storage = flat.untyped_storage()
        if weight_stride0 == cudnn_stride0:
            # views of dw (`_viewParams`)
            for w, (offset, _shape) in zip(
                weight, _param_slots(layout, weight_stride0, len(weight)), strict=True
            ):
                dw.append(
                    torch.empty(0, dtype=flat.dtype, device="meta").set_(storage, offset, w.shape, w.stride())
                )
        else:
            # copies out of dw (`_copyParams`)
            for w in weight:
                dw.append(cap.track(_empty(w.shape, w.dtype), op))
        del flat
    zeros.clear()
    return dx, dhx, dcx, dw


def _pack_padded_sequence(cap, func, args, kwargs):
    """`_pack_padded_sequence` (PackedSequence.cpp): for each run of steps of one batch size, the
    block `input.slice(0, prev_l, l).slice(1, 0, batch)` made contiguous, then `at::cat` of them."""
    x, lengths = args[0], args[1]
    batch_first = args[2] if len(args) > 2 else kwargs.get("batch_first", False)
    if not registered(x) or registered(lengths) or not isinstance(lengths, torch.Tensor):
        return NotImplemented
    cap.ops += 1
    t = x.transpose(0, 1) if batch_first else x
    ls = [int(v) for v in lengths.tolist()]
    batch = t.shape[1]
    steps, prev = [], 0
    for i in range(batch):
        length = ls[batch - 1 - i]
        if length > prev:
            block = t[prev:length, : batch - i]
            steps.append(_copy_unless_contiguous(cap, block, "aten::contiguous"))
            prev = length
    data, batch_sizes = func(*args, **kwargs)
    cap.track(data, "aten::cat")
    # the std::vector of steps is destroyed first to last (blind150/et04's memory history)
    for i in range(len(steps)):
        steps[i] = None
    return data, batch_sizes


def _cell(name: str):
    """`lstm_cell` / `gru_cell` (RNN.cpp `LSTMCell`/`GRUCell`) on a CUDA input: the gates as
    `matmul(input, w_ih.t())` and `matmul(hx, w_hh.t())`, then the fused kernel with the biases
    (`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell`), whose workspace autograd keeps. On meta
    tensors the composite would take the CPU's unfused path. Under autocast the cell is
    lower_precision_fp (autocast_mode.cpp): its tensors are cast first, right to left (the
    biases, then the weights, cached), and the parts run with autocast excluded (blind141/ek04's
    H200 history: a GRUCell's four casts once per autocast region, none at later calls)."""
    fused = aten._thnn_fused_lstm_cell.default if name == "lstm_cell" else aten._thnn_fused_gru_cell.default

    def run(cap, func, args, kwargs):
        names = ("input", "hx", "w_ih", "w_hh", "b_ih", "b_hh")
        a = dict(zip(names, args, strict=False)) | kwargs
        x = a["input"]
        if not registered(x) or set(a) - set(names):
            return NotImplemented
        if torch.is_autocast_enabled("cuda"):
            dtype = torch.get_autocast_dtype("cuda")
            for n in reversed(names):
                v = a.get(n)
                if isinstance(v, torch.Tensor):
                    a[n] = _autocast._cast(v, dtype)
                elif isinstance(v, (list, tuple)):
                    a[n] = [_autocast._cast(t, dtype) if isinstance(t, torch.Tensor) else t for t in v]
            with torch._C._ExcludeDispatchKeyGuard(_autocast._EXCLUDE):
                return parts(a)
        return parts(a)

    def parts(a):
        x, hx = a["input"], a["hx"]
        h = hx[0] if name == "lstm_cell" else hx
        igates = torch.matmul(x, a["w_ih"].t())
        hgates = torch.matmul(h, a["w_hh"].t())
        if name == "lstm_cell":
            hy, cy, _workspace = fused(igates, hgates, hx[1], a.get("b_ih"), a.get("b_hh"))
            return hy, cy
        hy, _workspace = fused(igates, hgates, hx, a.get("b_ih"), a.get("b_hh"))
        return hy

    return run


def _fused_lstm_cell(cap, func, args, kwargs):
    """`_thnn_fused_lstm_cell_cuda` (cuda/RNN.cu): the workspace (as the input gates), then hy and
    cy (as cx); recalled from RNN.cu, the sizes are its meta kernel's."""
    if not registered(args[0]):
        return NotImplemented
    cap.ops += 1
    op = "aten::_thnn_fused_lstm_cell"
    hy, cy, workspace = func(*args, **kwargs)
    for t in (workspace, hy, cy):
        cap.track(t, op)
    return hy, cy, workspace


def _fused_lstm_cell_backward(cap, func, args, kwargs):
    """`_thnn_fused_lstm_cell_backward_impl_cuda` (cuda/RNN.cu): grad_gates (as the workspace) and
    grad_cx (as cx), then with biases `grad_gates.sum(0)` with `gpu_reduce_kernel`'s global buffer
    and semaphores (blind340/mc03's H100 per-op truth: 5 allocations at batch 269,322, hidden 20,
    the sum's 21,626,888 bytes beyond the outputs)."""
    names = ("grad_hy", "grad_cy", "cx", "cy", "workspace", "has_bias")
    a = dict(zip(names, args, strict=False)) | kwargs
    workspace, cx = a["workspace"], a["cx"]
    if not registered(workspace):
        return NotImplemented
    if a["grad_hy"] is None and a["grad_cy"] is None:
        return None, None, None
    cap.ops += 1
    op = "aten::_thnn_fused_lstm_cell_backward_impl"
    grad_gates = cap.track(_empty(list(workspace.shape), workspace.dtype), op)
    grad_cx = cap.track(_empty(list(cx.shape), cx.dtype), op)
    grad_bias = None
    if a.get("has_bias", False):
        batch, gates = workspace.shape
        elem = workspace.element_size()
        acc = _kernels._acc_bytes(workspace.dtype)
        grad_bias = cap.track(_empty([gates], workspace.dtype), "aten::sum")
        _kernels.reduce_scratch(cap, [batch, gates], None, [True, False], elem, acc, "aten::sum")
    return grad_gates, grad_cx, grad_bias


def _fused_gru_cell(cap, func, args, kwargs):
    """`_thnn_fused_gru_cell_cuda` (cuda/RNN.cu; no meta kernel): the workspace (batch, 5 *
    hidden), then hy (as hx); recalled from RNN.cu."""
    igates, hx = args[0], args[2]
    if not registered(igates):
        return NotImplemented
    cap.ops += 1
    op = "aten::_thnn_fused_gru_cell"
    workspace = cap.track(_empty([hx.shape[0], hx.shape[1] * 5], hx.dtype), op)
    hy = cap.track(_empty(list(hx.shape), hx.dtype), op)
    return hy, workspace


def _fused_gru_cell_backward(cap, func, args, kwargs):
    """`_thnn_fused_gru_cell_backward_cuda` (cuda/RNN.cu; no meta kernel): the input and hidden
    gates' gradients (batch, 3 * hidden) and hx's, then with biases each gate gradient's `sum(0)`,
    each with `gpu_reduce_kernel`'s global buffer and semaphores where the reduction splits
    (blind113/di01's H200 per-op truth: 4 allocations beyond the outputs at batch 16,421)."""
    grad_hy, workspace = args[0], args[1]
    has_bias = args[2] if len(args) > 2 else kwargs.get("has_bias", False)
    if not registered(workspace):
        return NotImplemented
    cap.ops += 1
    op = "aten::_thnn_fused_gru_cell_backward"
    batch, hidden = workspace.shape[0], workspace.shape[1] // 5
    gig = cap.track(_empty([batch, 3 * hidden], workspace.dtype), op)
    ghg = cap.track(_empty([batch, 3 * hidden], workspace.dtype), op)
    ghx = cap.track(_empty(list(grad_hy.shape), grad_hy.dtype), op)
    gib = ghb = None
    if has_bias:
        elem = workspace.element_size()
        acc = _kernels._acc_bytes(workspace.dtype)
        gib = cap.track(_empty([3 * hidden], workspace.dtype), "aten::sum")
        _kernels.reduce_scratch(cap, [batch, 3 * hidden], None, [True, False], elem, acc, "aten::sum")
        ghb = cap.track(_empty([3 * hidden], workspace.dtype), "aten::sum")
        _kernels.reduce_scratch(cap, [batch, 3 * hidden], None, [True, False], elem, acc, "aten::sum")
    return gig, ghg, ghx, gib, ghb


def install() -> None:
    """Register the rules."""
    for name in MODES:
        _kernels.FUNCTIONS[getattr(torch, name)] = _rnn(name)
        # the same ops called as ops (an exported program's `aten.lstm.input` node, which
        # `ep.module()` runs): CompositeImplicitAutograd, so RNN.cpp's `lstm` takes cuDNN as
        # `torch.lstm` does (blind265/jf04's memory history: `lstm_cudnn` under `ep.module()`)
        op = getattr(aten, name)
        _kernels.FUNCTIONS[op.input] = _rnn(name)
        _kernels.FUNCTIONS[op.data] = _rnn(name)
    _kernels.FUNCTIONS[torch._C.TensorBase.data_ptr] = _data_ptr
    for name in ("lstm_cell", "gru_cell"):
        _kernels.FUNCTIONS[getattr(torch, name)] = _cell(name)
    _kernels.DISPATCH[aten._thnn_fused_lstm_cell.default] = _fused_lstm_cell
    _kernels.DISPATCH[aten._thnn_fused_lstm_cell_backward_impl.default] = _fused_lstm_cell_backward
    _kernels.DISPATCH[aten._thnn_fused_gru_cell.default] = _fused_gru_cell
    _kernels.DISPATCH[aten._thnn_fused_gru_cell_backward.default] = _fused_gru_cell_backward
    _kernels.DISPATCH[aten._cudnn_rnn_flatten_weight.default] = _flatten_weight
    _kernels.DISPATCH[aten._cudnn_init_dropout_state.default] = _init_dropout_state
    _kernels.DISPATCH[aten._cudnn_rnn.default] = _cudnn_rnn
    _kernels.DISPATCH[aten._cudnn_rnn_backward.default] = _cudnn_rnn_backward
    _kernels.DISPATCH[aten._pack_padded_sequence.default] = _pack_padded_sequence
    _kernels.SCRATCH_UNMODELLED.discard("aten::_cudnn_rnn")
    _kernels.SCRATCH_UNMODELLED.discard("aten::_cudnn_rnn_backward")


install()
