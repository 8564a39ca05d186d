"""Convolutions as PyTorch runs them on CUDA (`Convolution.cpp`, `cudnn/ConvShared.cpp`,
`cudnn/Conv_v8.cpp`): operand layouts, cuDNN workspaces, benchmark mode and double backwards."""

from __future__ import annotations

import json
import lzma
import os
import threading
import weakref

import torch
from torch._prims_common import suggest_memory_format

from .._tensor import registered
from .matmul import cublaslt_preferred
from .reduce import _acc_bytes, reduce_scratch
from .registry import DISPATCH, FUNCTIONS, SCRATCH_UNMODELLED, TRACED_AS_OWN
from .typenames import tensor_type_string

aten = torch.ops.aten


# ---- convolutions (cuDNN) -------------------------------------------------------------
# As PyTorch 2.11 runs them on CUDA (`Convolution.cpp`, `cudnn/ConvShared.cpp`,
# `cudnn/Conv_v8.cpp`): the operands made contiguous in the layout
# `cudnn_conv_suggest_memory_format` picks, the outputs, and the plan's workspace
# from the eager twin's measured tables (`crates/engine/src/ops/conv.rs`).


def _cl_format(t):
    """The channels-last format of `t`'s rank: `channels_last` (4-D) or `channels_last_3d` (5-D)."""
    return torch.channels_last_3d if t.dim() == 5 else torch.channels_last


def _suggests_channels_last(t) -> bool:
    """`t.suggest_memory_format()` is channels-last: by the strides, as c10's
    `is_channels_last_strides_2d` / `_3d` read them, size-1 dimensions included. A 1x1 weight or a
    pooled (N, C, 1, 1) input is contiguous in both layouts, and its strides decide (blind56/bd05's
    H200 record: squeeze-excitation convolutions of a contiguous pooled input by `channels_last`
    1x1 weights run cuDNN's channels-last problem, their outputs strided (C, 1, C, C); blind44/ar02:
    a one-channel volume and its (24, 1, 3, 3, 3) weight in `channels_last_3d`)."""
    return t.dim() in (4, 5) and suggest_memory_format(t) == _cl_format(t)


def _channels_last(x, w) -> bool:
    """`cudnn_conv_suggest_memory_format` (`ConvUtils.h`): `ChannelsLast` for a 2-D convolution
    and `ChannelsLast3d` for a 3-D one whose input or weight suggests it (float64 never)."""
    if torch.float64 in (x.dtype, w.dtype):
        return False
    return w.dim() in (4, 5) and (_suggests_channels_last(x) or _suggests_channels_last(w))


def _copy_unless_in(cap, t, channels_last: bool):
    """`t.contiguous(layout)`: a temporary copy when `t` is not laid out so."""
    dense = t.is_contiguous(memory_format=_cl_format(t)) if channels_last else t.is_contiguous()
    return None if dense else cap.malloc(t.numel() * t.element_size(), "aten::contiguous", "temporary")


def _in_layout(t, channels_last: bool):
    """A result as cuDNN's path allocates it: `at::empty(sizes, options.memory_format(layout))`
    (the meta kernel may pick the other layout: for depthwise convolutions, or a channels-last
    weight gradient from a channels-last gradient where the input is not, blind10/j02), with that
    layout's strides for size-1 dimensions too (the (N, K, 1, 1) output of a channels-last
    problem is strided (K, 1, K, K), blind56/bd05's H200 record)."""
    if t is None or t.dim() not in (4, 5):
        return t
    layout = _cl_format(t) if channels_last else torch.contiguous_format
    dense = torch.empty_like(t, memory_format=layout)
    return t if t.stride() == dense.stride() else dense


#: cuDNN benchmark mode's search workspace (and timed plan's) by problem, measured on an H200
#: (`cudnn_benchmark_h200.json.xz`, made by validation/run/conv_benchmark_table.py)
_BENCHMARK_TABLE_PATH = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "cudnn_benchmark_h200.json.xz"
)
_benchmark_table: dict | None = None


def benchmark_key(p: dict) -> tuple:
    """A benchmark-table entry's lookup key: its op, dtype, sizes, convolution parameters and layout."""
    return (
        p["op"],
        p["dtype"],
        tuple(p["input"]),
        tuple(p["weight"]),
        tuple(p["stride"]),
        tuple(p["padding"]),
        tuple(p["dilation"]),
        p["groups"],
        p["channels_last"],
        p.get("transposed", False),
        tuple(p.get("output_padding", [0] * len(p["stride"]))),
    )


def _benchmark_entries() -> dict:
    """`cudnn_benchmark_h200.json.xz`'s entries by problem, read once."""
    global _benchmark_table
    if _benchmark_table is None:
        with lzma.open(_BENCHMARK_TABLE_PATH, "rt") as f:
            problems = json.load(f)["problems"]
        _benchmark_table = {benchmark_key(p): p for p in problems}
    return _benchmark_table


def _benchmark_entry(op, dtype, x, w, stride, padding, dilation, transposed, out_pad, groups, cl):
    """The measured entry of a problem under benchmark mode (`search_workspace`, and
    `plan_workspace`, the timed plan's, where the sweep measured it), else one whose search is
    `_benchmark_between` measured batches (`estimated`), or None."""
    # a transposed convolution's forward is cuDNN's data gradient, timed the same way
    # (`raw_cudnn_convolution_backward_input_out` -> `run_single_conv`, cudnn/Conv_v8.cpp)
    key = (
        op,
        dtype,
        tuple(x.shape),
        tuple(w.shape),
        tuple(stride),
        tuple(padding),
        tuple(dilation),
        groups,
        cl,
        bool(transposed),
        tuple(out_pad),
    )
    entry = _benchmark_entries().get(key)
    if entry is None:
        between = _benchmark_between(key)
        entry = None if between is None else {"search_workspace": between, "estimated": True}
    return entry


_benchmark_lines: dict | None = None


def _benchmark_between(key: tuple) -> int | None:
    """The search workspace of a problem at a batch the table lacks, on the line through its
    measured neighbours: the next measured batches below and above it, where a third measured batch
    (the next below or above those) lies on that line, else None. Leaving each measured batch out
    of session 52's benchmark sweep (`conv_benchmark_table.py --affine`), this rule gives 4,053 of
    the 4,096 it applies to exactly; the 43 misses are fp32 problems whose largest plans come and go
    with the batch (fixtures/run/README.md, `cudnn_benchmark_sweep_h200.tar.xz`)."""
    global _benchmark_lines
    if _benchmark_lines is None:
        _benchmark_lines = {}
        for k, p in _benchmark_entries().items():
            line = _benchmark_lines.setdefault((k[0], k[1], k[2][1:], *k[3:]), {})
            line[k[2][0]] = p["search_workspace"]
    line = _benchmark_lines.get((key[0], key[1], key[2][1:], *key[3:]), {})
    n = key[2][0]
    lo, hi = sorted(m for m in line if m < n), sorted(m for m in line if m > n)
    if not lo or not hi:
        return None
    a, b = lo[-1], hi[0]
    if (line[b] - line[a]) % (b - a):
        return None
    slope = (line[b] - line[a]) // (b - a)
    third = [m for m in (lo[-2] if len(lo) > 1 else None, hi[1] if len(hi) > 1 else None) if m]
    if not any(line[a] + slope * (m - a) == line[m] for m in third):
        return None
    return line[a] + slope * (n - a)


def _benchmark_cache_key(cap, op: str, dtype: str, conv) -> tuple:
    """`run_single_conv`'s `CacheKeyWrapper` (cudnn/Conv_v8.cpp) of a problem: its `benchmark_cache`
    is `thread_local` (the program's thread, the autograd engine's device thread, each thread of the
    program's own), keyed by cuDNN's operation and the `ConvolutionParams` of its x and weight, not by
    the transposed flag: a transposed convolution's forward is the backward-data operation whose x is
    its output, its data gradient the forward operation on its output's gradient, its weight
    gradient the backward-filter operation with that gradient as x (`cudnn_convolution_transpose*`,
    ConvShared.cpp). The pointers' alignments are taken as the caching allocator's 512 bytes
    (an offset view's would be another key)."""
    x, w, stride, padding, dilation, transposed, out_pad, groups, cl = conv
    if transposed:
        out = [x.shape[0], w.shape[1] * groups]
        sizes = zip(x.shape[2:], w.shape[2:], stride, padding, dilation, out_pad, strict=True)
        out += [(i - 1) * s - 2 * p + d * (k - 1) + o + 1 for i, k, s, p, d, o in sizes]
        x_shape = tuple(out)
        operation = {"forward": "backward_data", "dgrad": "forward", "wgrad": "backward_filter"}[op]
    else:
        x_shape = tuple(x.shape)
        operation = {"forward": "forward", "dgrad": "backward_data", "wgrad": "backward_filter"}[op]
    t = threading.current_thread()
    thread = cap.thread() if getattr(t, "_vramscope_capture", None) is None else t
    return (
        thread,
        operation,
        dtype,
        x_shape,
        tuple(w.shape),
        tuple(stride),
        tuple(padding),
        tuple(dilation),
        groups,
        cl,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
    )


def _benchmark_first_call(cap, op: str, dtype: str, conv) -> int | None:
    """`run_single_conv` under `torch.backends.cudnn.benchmark` (cudnn/Conv_v8.cpp): the first call
    of a problem on a thread (`_benchmark_cache_key`) times cuDNN's plans in a workspace as large as
    the largest plan's (`generate_and_filter_plans`), frees it, then empties the allocator's cache
    (`_cudnn_get_conv_benchmark_empty_cache`, on by default) before running the fastest plan; later
    calls find the plan in the benchmark cache. The search's workspace is the H200's measured one
    where the problem was measured (`cudnn_benchmark_h200.json.xz`) and it fits the device's free
    memory, else named unmeasured. Returns
    the timed plan's workspace where `conv_sweep.py run-benchmark` measured it (its later calls'),
    else None: the heuristics' workspace stands in for it."""
    x, w, stride, padding, dilation, transposed, out_pad, groups, cl = conv
    key = _benchmark_cache_key(cap, op, dtype, conv)
    seen = cap.cudnn_benchmarked
    entry = _benchmark_entry(op, dtype, x, w, stride, padding, dilation, transposed, out_pad, groups, cl)
    search = None if entry is None else entry["search_workspace"]
    if entry is not None and entry.get("estimated"):
        cap.note_unmeasured(
            "cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True): a search's workspace "
            "estimated on the line through the problem's measured batches",
            "cuDNN's benchmark mode: a search's workspace was not measured at this batch: estimated on "
            "the line through the problem's measured batches (exact for 4,053 of 4,096 held out)",
        )
    if search is None:
        cap.note_unmeasured(
            "cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True): the search's workspace and "
            "the timed plan's",
            "cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True): a problem whose search was "
            "not measured: its search's workspace is not allocated and the heuristics' plan stands in "
            "for the timed one",
        )
    timed = None if entry is None else entry.get("plan_workspace")
    if key in seen:
        return timed
    seen.add(key)
    if search and search > cap.device.mem_get_info()[0]:
        # `generate_and_filter_plans` times only the plans whose workspace is at most
        # `get_available_workspace()`, the device's free memory or the largest cached block: here
        # the largest of them is not known (the cached block is taken as smaller)
        cap.note_unmeasured(
            "cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True): a search's workspace "
            "larger than the free memory (the plans that fit were not measured)"
        )
        search = None
    oom = cap.oom
    while search:
        try:
            ws = cap.malloc(search, "aten::cudnn_convolution", "workspace")
        except torch.OutOfMemoryError:
            # `generate_and_filter_plans` halves the search's workspace after each out-of-memory
            # until one is allocated, and times only the plans that fit in it
            cap.oom = oom
            search //= 2
            cap.cudnn_benchmark_bounds[key] = search
            cap.note_unmeasured(
                "cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True): the plan timed in a "
                "search's workspace halved after an out-of-memory",
                "cuDNN's benchmark mode: a search's workspace did not fit and was halved until it did; "
                "the fastest plan within it was not measured: the measured timed plan's, else the "
                "heuristics', stands in where its workspace fits the halved one, else none",
            )
        else:
            del ws
            break
    if getattr(torch._C, "_cuda_get_conv_benchmark_empty_cache", lambda: True)():
        cap.device.empty_cache()
    return timed


def _conv_workspace(cap, op, conv) -> None:
    """`run_conv_plan`'s workspace, allocated and freed inside the op."""
    x, w, stride, padding, dilation, transposed, out_pad, groups, cl = conv
    name = str(x.dtype).removeprefix("torch.")
    if not torch.backends.cudnn.enabled:
        # `_select_conv_backend` (Convolution.cpp) asks `userEnabledCuDNN()`: without cuDNN the
        # convolution runs PyTorch's own kernels (`slow_conv2d`, `slow_conv3d`, `slow_conv_dilated`,
        # `slow_conv_transpose`), whose im2col column buffers the twin does not model
        cap.note_unmeasured(
            f"the native kernel of a {x.dim() - 2}-D convolution {op} with cuDNN disabled "
            "(`torch.backends.cudnn.enabled = False`)"
        )
        return
    # `raw_cudnn_convolution_*_out` (cudnn/Conv_v8.cpp) gets its handle before any plan: on the
    # autograd thread (a convolution's backward) its first cuDNN call takes the driver's pieces
    from .._capture import CUDNN_THREAD_PIECES, CUDNN_THREAD_PIECES_CONV_BACKWARD

    cap.cudnn_thread_handle(CUDNN_THREAD_PIECES if op == "forward" else CUDNN_THREAD_PIECES_CONV_BACKWARD)
    timed = _benchmark_first_call(cap, op, name, conv) if torch.backends.cudnn.benchmark else None
    key = _benchmark_cache_key(cap, op, name, conv)
    # a search halved after an out-of-memory timed only the plans whose workspace fits the halved
    # one (`generate_and_filter_plans`), the plan kept among them
    bound = cap.cudnn_benchmark_bounds.get(key)
    if bound is not None and timed is not None and timed > bound:
        timed = None
    # the plan is built before its workspace is known: cuDNN's engines load
    cap.cudnn_plan()
    problem = (op, name, list(x.shape), list(w.shape), stride, padding, dilation, groups)
    layout = {"transposed": transposed, "output_padding": out_pad, "channels_last": cl}
    nbytes = cap.device.conv_workspace(*problem, **layout) if timed is None else timed
    if timed is None and x.dtype == torch.float32 and not torch.backends.cudnn.allow_tf32:
        nbytes = _no_tf32_workspace(cap, op, conv, nbytes)
    if nbytes is not None and (
        torch.backends.cudnn.deterministic or torch.are_deterministic_algorithms_enabled()
    ):
        nbytes = _deterministic_workspace(cap, op, conv, nbytes)
    if nbytes is None:
        what = (
            f"cuDNN's {op} workspace of {'a transposed ' if transposed else ''}input {tuple(x.shape)} "
            f"by weight {tuple(w.shape)} ({name}, {'channels-last, ' if cl else ''}stride {tuple(stride)}, "
            f"padding {tuple(padding)}, {f'dilation {tuple(dilation)}, ' if set(dilation) != {1} else ''}"
            f"groups {groups})"
        )
        # not measured: the nearest measured problem's bytes, scaled (`ops/conv.rs`)
        nearest = cap.device.conv_workspace_nearest(*problem, **layout)
        if nearest is None:
            cap.note_unmeasured(what)
            return
        nbytes, neighbour, weight, pad, dil = nearest
        estimate = f"estimated as {nbytes} bytes from the measured input {tuple(neighbour)}"
        scaled = "batch and size"
        if list(weight) != list(w.shape):
            # no problem of its own channels was measured: one of the same kernel
            estimate += f" by weight {tuple(weight)}"
            scaled = "batch, size and channels"
        if (list(pad), list(dil)) != (list(padding), list(dilation)):
            # nor of its padding and dilation: one of the same kernel size and stride
            estimate += f" with padding {tuple(pad)} and dilation {tuple(dil)}"
            scaled = "batch, size and channels"
        cap.note_unmeasured(
            f"{what}: {estimate}",
            f"{what} was not measured: {estimate} (the nearest measured problem, scaled by {scaled})",
        )
    if bound is not None and nbytes and nbytes > bound:
        nbytes = 0
    if nbytes and key not in cap.cudnn_fallback_plans:
        oom = cap.oom
        try:
            ws = cap.malloc(nbytes, "aten::cudnn_convolution", "workspace")
        except torch.OutOfMemoryError:
            # `run_single_conv` (cudnn/Conv_v8.cpp): `try_configs` catches the workspace's
            # OutOfMemoryError and runs the next engine config, which `benchmark_cache` then keeps
            # for the problem; that config's workspace is not measured: taken as none
            cap.oom = oom
            cap.cudnn_fallback_plans.add(key)
            cap.note_unmeasured(
                "cuDNN's next engine config after a convolution's workspace ran out of memory",
                "a cuDNN convolution's workspace did not fit: cuDNN runs its next engine config, whose "
                "workspace was not measured: taken as none (for this problem from here on)",
            )
        else:
            del ws


# cuDNN's heuristics plan for a float32 forward convolution with `torch.backends.cudnn.allow_tf32 =
# False` (cudnn/Conv_v8.cpp's `filterEngineConfigs` drops the engines with
# `CUDNN_NUMERICAL_NOTE_TENSOR_CORE` for a float32 problem then) as the H100 measured it (torch
# 2.11.0+cu130, cuDNN 91900; session 64, validation/run/probes/m80_conv_tf32_off_probe_s64.py,
# fixtures/run/probes/m80_conv_tf32_off_probe_s64_h100.txt): blind280/ju04's ResNet-18 problems,
# NCHW, dilation 1, groups 1, benchmark off. (input, weight, stride, padding) -> requested bytes;
# `cudnn_convolution_relu` and `cudnn_convolution_add_relu` took the same on every problem. The
# tables measured with TF32 on differ: 0 here where they hold up to 488 MB, and 2.8 to 22 times
# theirs on the three 3x3 stride-1 problems of batch 128.
_NO_TF32_FORWARD = {
    ((128, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3)): 0,
    ((128, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1)): 0,
    ((128, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1)): 0,
    ((128, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1)): 285_802_496,
    ((128, 64, 56, 56), (128, 64, 1, 1), (2, 2), (0, 0)): 0,
    ((128, 128, 28, 28), (256, 128, 3, 3), (2, 2), (1, 1)): 0,
    ((128, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1)): 228_851_712,
    ((128, 128, 28, 28), (256, 128, 1, 1), (2, 2), (0, 0)): 0,
    ((128, 256, 14, 14), (512, 256, 3, 3), (2, 2), (1, 1)): 0,
    ((128, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1)): 764_411_904,
    ((128, 256, 14, 14), (512, 256, 1, 1), (2, 2), (0, 0)): 0,
    ((8, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3)): 0,
    ((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1)): 0,
    ((8, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1)): 0,
    ((8, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1)): 0,
    ((8, 64, 56, 56), (128, 64, 1, 1), (2, 2), (0, 0)): 0,
    ((8, 128, 28, 28), (256, 128, 3, 3), (2, 2), (1, 1)): 0,
    ((8, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1)): 0,
    ((8, 128, 28, 28), (256, 128, 1, 1), (2, 2), (0, 0)): 0,
    ((8, 256, 14, 14), (512, 256, 3, 3), (2, 2), (1, 1)): 0,
    ((8, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1)): 0,
    ((8, 256, 14, 14), (512, 256, 1, 1), (2, 2), (0, 0)): 0,
}


def _no_tf32_workspace(cap, op, conv, with_tf32):
    """The workspace of a float32 convolution under `allow_tf32 = False`: `_NO_TF32_FORWARD`'s bytes
    for a measured forward problem, else `with_tf32` (the tables' bytes, measured with TF32 on),
    noted as unmeasured."""
    x, w, stride, padding, dilation, transposed, _, groups, cl = conv
    plain = op == "forward" and not (
        transposed or cl or groups != 1 or set(dilation) != {1} or torch.backends.cudnn.benchmark
    )
    key = (tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding))
    if plain and key in _NO_TF32_FORWARD:
        return _NO_TF32_FORWARD[key]
    if with_tf32 is not None:
        cap.note_unmeasured(
            f"cuDNN's float32 {op} workspace with allow_tf32 False",
            f"cuDNN's float32 {op} workspace of input {tuple(x.shape)} by weight {tuple(w.shape)} with "
            "`torch.backends.cudnn.allow_tf32 = False` was not measured: taken as with TF32",
        )
    return with_tf32


# cuDNN's heuristics plan under `torch.backends.cudnn.deterministic = True` (Convolution.cpp passes
# `deterministicCuDNN() || deterministicAlgorithms()`; cudnn/Conv_v8.cpp's `filterEngineConfigs` then
# drops the engine configs with CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, so the first config left may be
# another engine's) as the H100 measured it (torch 2.11.0,
# validation/run/probes/lx73_conv_deterministic_workspace_probe.py, its _h100.out): blind335/lx01's
# ResNet-18 problems at batch 256, float32 NCHW, TF32 on, dilation 1, groups 1, benchmark off.
# The measured problems (input, weight, stride, padding), each's forward, dgrad and wgrad: all take the
# tables' bytes (measured with deterministic False) but the two in `_DETERMINISTIC_OWN`, which took none
# without: the data gradient of the 7x7 stem (1,042,416,128 bytes allocated beyond the output's block) and
# the weight gradient of the first 1x1 stride-2 downsample (one 512-byte block); the bytes are those
# blocks', the request inside them not measured.
_DETERMINISTIC_MEASURED = {
    ((256, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3)),
    ((256, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1)),
    ((256, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1)),
    ((256, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1)),
    ((256, 64, 56, 56), (128, 64, 1, 1), (2, 2), (0, 0)),
    ((256, 128, 28, 28), (256, 128, 3, 3), (2, 2), (1, 1)),
    ((256, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1)),
    ((256, 128, 28, 28), (256, 128, 1, 1), (2, 2), (0, 0)),
    ((256, 256, 14, 14), (512, 256, 3, 3), (2, 2), (1, 1)),
    ((256, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1)),
    ((256, 256, 14, 14), (512, 256, 1, 1), (2, 2), (0, 0)),
}
_DETERMINISTIC_OWN = {
    ("dgrad", (256, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3)): 1_042_416_128,
    ("wgrad", (256, 64, 56, 56), (128, 64, 1, 1), (2, 2), (0, 0)): 512,
}


def _deterministic_workspace(cap, op, conv, nbytes):
    """The workspace of a convolution under deterministic algorithms: `_DETERMINISTIC_OWN`'s bytes for
    a measured problem it holds, the tables' `nbytes` for the other measured ones, else `nbytes`, noted
    as unmeasured."""
    x, w, stride, padding, dilation, transposed, _, groups, cl = conv
    plain = not (
        transposed
        or cl
        or groups != 1
        or set(dilation) != {1}
        or x.dtype != torch.float32
        or not torch.backends.cudnn.allow_tf32
        or torch.backends.cudnn.benchmark
    )
    problem = (tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding))
    if plain and problem in _DETERMINISTIC_MEASURED:
        return _DETERMINISTIC_OWN.get((op, *problem), nbytes)
    cap.note_unmeasured(
        f"cuDNN's {op} workspace under deterministic algorithms",
        f"cuDNN's {op} workspace of input {tuple(x.shape)} by weight {tuple(w.shape)} with "
        "`torch.backends.cudnn.deterministic = True` was not measured: taken as without",
    )
    return nbytes


def _conv(x, w, args):
    """(input, weight, stride, padding, dilation, transposed, output_padding,
    groups, channels_last) of a cuDNN convolution, or None for what the rules
    do not cover."""
    if not (registered(x) and registered(w)):
        return None
    return _conv_params(x, w, args)


def _conv_params(x, w, args):
    """`_conv`'s tuple of a convolution whatever its operands' devices."""
    stride, padding, dilation, transposed, out_pad, groups = args
    if x.dim() not in (3, 4, 5) or isinstance(padding, str):
        return None
    dim = w.dim() - 2

    def expand(param):
        # `expand_param_if_needed` (Convolution.cpp: `convolution`, `convolution_backward`): one
        # value stands for every spatial dimension (torch.nn.grad.conv2d_input passes `[0]` as
        # output_padding)
        param = list(param)
        return param * dim if len(param) == 1 else param

    return (
        x,
        w,
        expand(stride),
        expand(padding),
        expand(dilation),
        bool(transposed),
        expand(out_pad),
        groups,
        _channels_last(x, w),
    )


def _native_depthwise_3d(conv) -> bool:
    """`_select_conv_backend` (Convolution.cpp) sends a depthwise 3-D convolution (`is_depthwise`:
    groups == in_channels > 1, out_channels a multiple) to `CudaDepthwise3d` (DepthwiseConv3d.cu,
    no workspace) unless it suggests channels-last: `use_cudnn_depthwise`'s other cases ask for a
    4-D input (blind57/be01's H200 history: MViT's bf16 pooling convolutions)."""
    x, w, _stride, _padding, _dilation, transposed, _out_pad, groups, cl = conv
    return (
        x.dim() == 5
        and not transposed
        and not cl
        and groups > 1
        and x.shape[1] == groups
        and w.shape[0] % groups == 0
    )


def _native_depthwise_2d(conv) -> bool:
    """`_select_conv_backend` (Convolution.cpp) sends a depthwise 2-D convolution (`is_depthwise`
    of the 4-D input, a 1-D one viewed as (N, C, 1, L)) to `CudaDepthwise2d` (DepthwiseConv2d.cu,
    no workspace) unless `use_cudnn_depthwise` holds: the input or weight suggests channels-last,
    or (cuDNN >= 8.2) a half problem of at least 32 channels, undilated, with equal strides or a
    height of 1, which `check_cudnn_depthwise_workload_with_filter`'s heuristic then decides; the
    twin leaves those to cuDNN (the table measured them)."""
    x, w, stride, _padding, dilation, transposed, _out_pad, groups, cl = conv
    if x.dim() not in (3, 4) or transposed or cl or groups <= 1:
        return False
    if x.shape[1] != groups or w.shape[0] % groups:
        return False
    if not torch.backends.cudnn.enabled or x.dtype != torch.float16 or w.dtype != torch.float16:
        return True
    strides = [1, *stride] if x.dim() == 3 else list(stride)
    height = 1 if x.dim() == 3 else x.shape[2]
    half_cudnn = (
        all(d == 1 for d in dilation) and (strides[0] == strides[1] or height == 1) and x.shape[1] >= 32
    )
    return not half_cudnn


def _slow_2d(conv) -> bool:
    """`_select_conv_backend` (Convolution.cpp) with cuDNN disabled (`userEnabledCuDNN()`): a CUDA
    convolution of a non-empty 4-D input (a 1-D one viewed as (N, C, 1, L)), not depthwise (that
    takes `CudaDepthwise2d`), not transposed, undilated, takes `Slow2d`; the twin rules the single
    group (more groups run one `_convolution_nogroup_backend` a group, then `cat`)."""
    x, _w, _stride, _padding, dilation, transposed, _out_pad, groups, _cl = conv
    return (
        not torch.backends.cudnn.enabled
        and x.dim() in (3, 4)
        and x.shape[0] > 0
        and x.shape[1] > 0
        and not transposed
        and all(d == 1 for d in dilation)
        and groups == 1
    )


def _slow_2d_columns(cap, x, w, conv, always: bool):
    """`slow_conv2d_forward`/`_backward`/`_grad_weight`'s column buffer (cuda/ConvolutionMM2d.cu):
    (C x kH x kW, oH x oW) of the input's dtype; the forward and the weight's gradient need it only
    where the kernel is not 1x1 or a stride or padding is not 1 or 0 (`requires_columns`), the
    input's gradient always (`resize_output(grad_columns, ...)`)."""
    _x, _w, stride, padding, *_ = conv
    k = list(w.shape[2:])
    stride, padding, size = list(stride), list(padding), list(x.shape[2:])
    if x.dim() == 3:  # `view1d_as_2d`
        k, stride, padding, size = [1, *k], [1, *stride], [0, *padding], [1, *size]
    out = [(size[i] + 2 * padding[i] - k[i]) // stride[i] + 1 for i in (0, 1)]
    needed = k != [1, 1] or stride != [1, 1] or padding != [0, 0]
    if not (always or needed):
        return None
    nbytes = x.shape[1] * k[0] * k[1] * out[0] * out[1] * x.element_size()
    return cap.malloc(nbytes, "aten::_slow_conv2d", "temporary")


def _contiguous_result(t):
    """A result as `resize_output` of an empty tensor makes it: contiguous."""
    if t is None or t.is_contiguous():
        return t
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def _slow_conv2d_forward(cap, func, args, conv):
    """`Slow2d` (Convolution.cpp `_convolution`): the input, then the weight, made contiguous (a 1-D
    input's before its 4-D view), then `thnn_conv2d` -> `slow_conv2d_forward_out_cuda`
    (cuda/ConvolutionMM2d.cu): the result, the column buffer, a cuBLAS gemm a sample; the columns
    go as it returns, then the weight's and the input's copies as `_convolution` does."""
    x, w = args[0], args[1]
    x_c = _copy_unless_in(cap, x, False)
    w_c = _copy_unless_in(cap, w, False)
    out = cap.track(_contiguous_result(func(*args)), "aten::_slow_conv2d_forward")
    cols = _slow_2d_columns(cap, x, w, conv, always=False)
    cap.blas("slow_conv2d", x.dtype, cublaslt_preferred())
    del cols, w_c, x_c
    return out


def _slow_conv2d_backward(cap, grad, x, w, conv, mask, gi, gw, gb):
    """`convolution_backward` on `Slow2d` (Convolution.cpp): the input (a 1-D one first, before its
    4-D view), then the weight, made contiguous; `_slow_conv2d_backward` (cuda/ConvolutionMM2d.cu
    `slow_conv2d_backward_out_cuda`): the gradient's `expect_contiguous()`, then for the input's
    gradient its result, the column buffer and a gemm a sample, for the bias's `sum_out` over
    (0, 2, 3), for the weight's its result and the columns (made now if the input's gradient did
    not), a gemm a sample; the columns, then the gradient's copy, go as it returns, then the
    weight's and the input's copies."""
    x_c = _copy_unless_in(cap, x, False)
    w_c = _copy_unless_in(cap, w, False)
    g_c = _copy_unless_in(cap, grad, False)
    cols = None
    if mask[0] and gi is not None:
        gi = cap.track(_contiguous_result(gi), "aten::_slow_conv2d_backward (input)")
        cols = _slow_2d_columns(cap, x, w, conv, always=True)
        cap.blas("slow_conv2d", x.dtype, cublaslt_preferred())
    grad_seen = grad if g_c is None else torch.empty(grad.shape, dtype=grad.dtype, device="meta")
    gb = _conv_grad_bias(cap, grad_seen, gb, mask)
    if mask[1] and gw is not None:
        gw = cap.track(_contiguous_result(gw), "aten::_slow_conv2d_backward (weight)")
        if cols is None:
            cols = _slow_2d_columns(cap, x, w, conv, always=True)
        cap.blas("slow_conv2d", x.dtype, cublaslt_preferred())
    del cols, g_c, w_c, x_c
    return gi, gw, gb


def _check_same_type(x, w, bias=None) -> None:
    """`check_input_same_type_as_parameters` (Convolution.cpp): `_convolution`'s `Cudnn` and
    `CudnnTranspose` cases check the input against the weight and the bias, `convolution_backward`'s
    against the weight alone (not the gradient), before any allocation; the depthwise and empty
    backends do not (blind216/hh04's H200 run: `torch.nn.grad.conv2d_weight` of an fp32 input saved
    by `custom_fwd` and a bf16 gradient raised "Input type (torch.cuda.FloatTensor) and weight type
    (CUDABFloat16Type) should be the same")."""
    if x.shape[0] == 0 or x.shape[1] == 0:
        return  # `select_conv_backend`: ConvBackend::Empty
    for other, what in ((w, "weight"), (bias, "bias")):
        if other is not None and other.dtype != x.dtype:
            raise RuntimeError(
                f"Input type ({tensor_type_string(x)}) and {what} type ({tensor_type_string(other)}) "
                "should be the same"
            )


def _conv_unruled(cap, x) -> None:
    """A convolution of the simulated device that no rule here covers (string padding): its outputs
    come from the meta kernel, its workspace is named unmeasured."""
    if registered(x):
        cap.note_unmeasured(
            f"aten::convolution of a {x.dim()}-D input outside the cuDNN rules (its workspace)"
        )


def node_key():
    """The autograd node running now, as (graph task, sequence number), or None."""
    node = torch._C._current_autograd_node()
    return None if node is None else (torch._C._current_graph_task_id(), node._sequence_nr())


def _same_view(a, b) -> bool:
    """`a` and `b` view one storage with the same sizes, strides and offset."""
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata and (
        a.shape,
        a.stride(),
        a.storage_offset(),
    ) == (b.shape, b.stride(), b.storage_offset())


def _double_backward_operands(cap, args):
    """`_convolution_double_backward` (Convolution.cpp, ConvolutionBackwardBackward0's body) makes
    one operand of each of its convolutions contiguous where it `is_cuda()`, which the twin's meta
    tensors are not: the weight of ggO = conv(ggI, weight) and ggW of conv(input, ggW), both kept to
    the body's end; gOt = gO.transpose(0, 1) of gW = conv(ggIt, gOt) (conv(gOt, ggIt) transposed,
    a slice a group), a local of its block; gO of gI = convT(gO, ggW), with the ggW made contiguous
    before, kept to the end. The operand is the weight where the call is as transposed as the node's
    convolution, else the input (blind64/bl03's R1 penalty, H200: gOt contiguous, then no copy by
    cuDNN's path). Returns the arguments as the GPU passes them, the copy to drop after the call,
    and whether the body ends with the call (gI's, or gW's without ggW and groups): its kept copies
    go then. Under create_graph the copies are saved by the new convolutions' nodes and live with
    them (`attach_saved`)."""
    node = torch._C._current_autograd_node()
    if node is None or node.name() != "ConvolutionBackwardBackward0":
        return args, None, False
    key = node_key()
    if cap.node_temps is None or cap.node_temps[0] != key:
        # (the node, [(a local, its contiguous copy)], [whether ggW's term ran])
        cap.node_temps = (key, [], [False])
        # the graph task's end, where no allocation outside the node comes first
        torch.autograd.Variable._execution_engine.queue_callback(lambda: _drop_node_temps(cap, key))
    _, kept, ggw_term = cap.node_temps
    args = list(args)
    for j in (0, 1):
        for orig, copy in kept:
            if args[j] is orig:
                args[j] = copy  # a local the body made contiguous before (ggW, for gI's call)
    i = 1 if bool(args[6]) == bool(node._saved_transposed) else 0
    t, g = args[i], node._saved_grad_output
    block_local = t.untyped_storage()._cdata == g.untyped_storage()._cdata and not _same_view(t, g)
    ends = (i == 0 and _same_view(t, g)) or (block_local and not ggw_term[0] and node._saved_groups == 1)
    if i == 1 and _same_view(args[0], node._saved_input):
        ggw_term[0] = True
    if not registered(t) or t.is_contiguous():
        return args, None, ends
    copy = cap.track(torch.empty(t.shape, dtype=t.dtype, device="meta"), "aten::clone", "temporary")
    args[i] = copy
    if block_local:
        return args, copy, ends
    kept.append((t, copy))
    return args, None, ends


def _drop_node_temps(cap, key) -> None:
    if cap.node_temps is not None and cap.node_temps[0] == key:
        cap.node_temps = None


#: (a convolution's output, the body's copies it ran on) whose autograd node is made as the op
#: returns (`attach_saved`)
SAVED_PENDING: list = []


def attach_saved() -> None:
    """Under `create_graph` a double backward's convolutions are recorded, and their nodes save
    the contiguous copies the body made of their operands (`_double_backward_operands`); the copies
    then live with the node, not the body, until it runs in a later pass (its saved variables are
    released after it runs) or dies (blind91/cm04's third-order pass). Each copy goes into its
    node's `metadata` once autograd has made the node, and leaves it when the node has run."""
    while SAVED_PENDING:
        out, copies = SAVED_PENDING.pop()
        node = out.grad_fn if isinstance(out, torch.Tensor) else None
        if node is None:
            continue
        meta = node.metadata
        meta["vramscope_saved"] = copies

        def release(*_, meta=meta):
            meta.pop("vramscope_saved", None)

        node.register_hook(release)


def _convolution(cap, func, args, kwargs):
    given = args
    args, block_copy, body_ends = _double_backward_operands(cap, args)
    out = _convolution_op(cap, func, args, kwargs)
    node = torch._C._current_autograd_node()
    if (
        node is not None
        and node.name() == "ConvolutionBackwardBackward0"
        and isinstance(out, torch.Tensor)
        and bool(given[6]) == bool(node._saved_transposed)
        and _same_view(given[0], node._saved_input)
    ):
        cap.ggw_term_out = weakref.ref(out)
    if torch.is_grad_enabled() and isinstance(out, torch.Tensor):
        copies = [a for a, b in zip(args[:2], given[:2], strict=True) if a is not b]
        if copies:
            SAVED_PENDING.append((out, copies))
    del block_copy
    if body_ends:
        cap.node_temps = None
    return out


def _host_operand(t) -> bool:
    return isinstance(t, torch.Tensor) and not registered(t) and t.device.type == "cpu"


def _check_devices(cap, x, w, bias, args) -> None:
    """`_convolution` (Convolution.cpp) of operands on the host and the simulated device mixed: no
    generated wrapper checks them (`convolution` is CompositeExplicitAutograd), the backend does.
    For a CUDA input, after `check_shape_forward` (and a 1-D input's `contiguous()`): the native
    depthwise kernels' CUDA wrappers ("Expected all tensors to be on the same device, but got weight
    is on cpu, different from other tensors on cuda:0 (when checking argument in method
    wrapper_CUDA___conv_depthwise2d)", after `input.contiguous()`), else cuDNN's
    `check_input_same_type_as_parameters`, `TensorBase::toString()` rewritten by `processErrorMsg`
    ("Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same").
    For an fp32 host input of a CUDA weight (4-D, not transposed): `use_mkldnn` (16 threads on the
    H200's host: `_capture.INTRA_OP_WORKERS` + 1) takes MKLDNN, whose check adds "or input should
    be a MKLDNN tensor and weight is a dense tensor"; else an undilated single group takes
    `Slow2d`, whose `_slow_conv2d_forward` dispatches to CUDA by the weight and its wrapper raises
    ("but got weight is on cuda:0, different from other tensors on cpu (when checking argument in
    method wrapper_CUDA___slow_conv2d_forward)")."""
    conv = _conv_params(x, w, args)
    if conv is None or x.shape[0] == 0 or x.shape[1] == 0:
        return  # unruled, or `ConvBackend::Empty` (a host 0-dim slice of the weight is allowed)
    operands = ((w, "weight"), (bias, "bias"))
    if registered(x) and any(_host_operand(t) for t, _ in operands):
        depthwise = "_conv_depthwise2d" if _native_depthwise_2d(conv) else None
        depthwise = "conv_depthwise3d" if _native_depthwise_3d(conv) else depthwise
        x_c = _copy_unless_in(cap, x, False) if x.dim() == 3 or depthwise else None
        for t, what in operands:
            if t is None or not (_host_operand(t) or (depthwise is None and t.dtype != x.dtype)):
                continue
            del x_c
            if depthwise is not None:
                from .._capture import wrapper_device_message

                raise RuntimeError(
                    wrapper_device_message("cuda:0", "cpu", what, f"wrapper_CUDA__{depthwise}")
                )
            raise RuntimeError(
                f"Input type ({tensor_type_string(x)}) and {what} type ({tensor_type_string(t)}) "
                "should be the same"
            )
    if not (_host_operand(x) and registered(w)) or x.dtype != torch.float32 or x.dim() != 4:
        return
    _, _, stride, _, dilation, transposed, _, groups, _ = conv
    if transposed or not torch.backends.mkldnn.enabled:
        return
    strided, dilated = any(s != 1 for s in stride), any(d != 1 for d in dilation)
    kh, kw = w.shape[-2], w.shape[-1]
    from .._capture import INTRA_OP_WORKERS

    threads = INTRA_OP_WORKERS + 1
    mkldnn = (strided or dilated or x.shape[0] >= 16 or kw != 1 or kh != 1 or threads > 1) and (
        groups > 1 or (kw > 3 and kh > 3) or x.shape[0] > 1 or x.numel() > 20480
    )
    if mkldnn:
        for t, what in operands:
            if t is not None and registered(t):
                raise RuntimeError(
                    f"Input type ({tensor_type_string(x)}) and {what} type ({tensor_type_string(t)}) "
                    f"should be the same or input should be a MKLDNN tensor and {what} is a dense tensor"
                )
    elif groups == 1 and not dilated and w.is_contiguous():
        from .._capture import wrapper_device_message

        raise RuntimeError(
            wrapper_device_message("cpu", "cuda:0", "weight", "wrapper_CUDA___slow_conv2d_forward")
        )


def _empty_backend(x, w, bias, args, bias_sizes=None) -> bool:
    """Whether `_select_conv_backend` (Convolution.cpp) takes `ConvBackend::Empty`: a zero batch or
    zero input channels. It runs `check_shape_forward` first and refuses any other empty input
    ("Only zero batch or zero channel inputs are supported, but got input shape: [1, 64, 0, 199]"),
    as `_convolution` and `convolution_backward` do before any backend: the GPU's errors, raised
    here (the meta kernel's were others, "Trying to create tensor with negative dimension")."""
    stride, padding, dilation, transposed, out_pad, groups = args
    if isinstance(padding, str):
        return False
    backend = torch._C._select_conv_backend(
        x, w, bias, stride, padding, dilation, transposed, out_pad, groups, bias_sizes=bias_sizes
    )
    return backend == torch._C._ConvBackend.Empty


def _weight_4d(w):
    """The weight as `_convolution` sees it: a 1-D convolution's `view4d`."""
    return w.unsqueeze(2) if w.dim() == 3 else w


def _empty_convolution(cap, func, args):
    """`_convolution`'s `ConvBackend::Empty` (Convolution.cpp): no backend, no workspace; the weight
    viewed flat, a contiguous clone of it where it is neither contiguous nor channels-last
    (freed with the case's block), and `input * weight_view[0]`, empty as the input is (the 1-D
    input's `contiguous()` and the output: no bytes)."""
    w4 = _weight_4d(args[1])
    cl = torch.channels_last if w4.dim() == 4 else torch.channels_last_3d
    dense = w4.is_contiguous() or (w4.dim() in (4, 5) and w4.is_contiguous(memory_format=cl))
    clone = None if dense else cap.malloc(w4.numel() * w4.element_size(), "aten::clone", "temporary")
    out = cap.track(func(*args), "aten::mul")
    del clone
    return out


def _convolution_op(cap, func, args, kwargs):
    x, w = args[0], args[1]
    if not kwargs:
        _check_devices(cap, x, w, args[2], args[3:9])
    conv = _conv(x, w, args[3:9])
    if conv is None or kwargs:
        _conv_unruled(cap, x)
        return NotImplemented
    if _empty_backend(x, w, args[2], args[3:9]):
        cap.ops += 1
        return _empty_convolution(cap, func, args)
    cl = conv[-1]
    if not _native_depthwise_2d(conv) and not _native_depthwise_3d(conv):
        _check_same_type(x, w, args[2])
    cap.ops += 1
    if _slow_2d(conv):
        return _slow_conv2d_forward(cap, func, args, conv)
    if _native_depthwise_2d(conv):
        # `_convolution`'s `input.contiguous()`, then `conv_depthwise2d_cuda_out`: the weight's
        # `expect_contiguous()` before the output's `resize_output` (bias inside the kernel)
        x_c = _copy_unless_in(cap, x, False)
        w_c = _copy_unless_in(cap, w, False)
        out = func(*args)
        out = cap.track(out if out.is_contiguous() else out.contiguous(), "aten::_conv_depthwise2d")
        del w_c, x_c
        return out
    op = "aten::cudnn_convolution_transpose" if conv[5] else "aten::cudnn_convolution"
    x_c = _copy_unless_in(cap, x, cl)
    out = _in_layout(func(*args), cl)
    cap.track(out, op)
    x_run = None
    if out.numel() > 0:
        if cl and not conv[5] and not _suggests_channels_last(out):
            # cudnn_convolution_forward_out (ConvShared.cpp) takes `output->suggest_memory_format()`:
            # an (N, 1, 1, 1) output is ambiguous and suggests NCHW, so the weight and then the input
            # are copied contiguous and the problem runs NCHW (blind173/fq05's H200 per-op truth: a
            # channels-last DCGAN's final 4 x 4 conv to one channel copied both, then its workspace)
            conv = (*conv[:-1], False)
            w_c = _copy_unless_in(cap, w, False)
            nbytes = x.numel() * x.element_size()
            x_run = (
                cap.malloc(nbytes, "aten::contiguous", "temporary") if x_c else _copy_unless_in(cap, x, False)
            )
        else:
            w_c = _copy_unless_in(cap, w, cl)
        if not _native_depthwise_3d(conv):
            _conv_workspace(cap, "forward", conv)
        # `input_contig` made after `weight_contig`, so freed before it
        del x_run, w_c
    del x_c
    return out


def _convolution_backward(cap, func, args, kwargs):
    grad, x, w = args[0], args[1], args[2]
    conv = _conv(x, w, args[4:10])
    if conv is None or kwargs or not registered(grad):
        _conv_unruled(cap, x)
        return NotImplemented
    cl = conv[-1]
    mask = list(args[10])
    if _empty_backend(x, w, None, args[4:10], bias_sizes=args[3]):
        # `convolution_backward`'s `ConvBackend::Empty`: `zeros_like(input)` (no bytes),
        # `zeros_like(weight)`, `zeros(bias_sizes)`, in that order; no backend, no workspace
        cap.ops += 1
        gi, gw, gb = func(*args)
        gi = cap.track(torch.empty_like(x), "aten::zeros_like") if mask[0] else None
        gw = cap.track(torch.empty_like(w), "aten::zeros_like") if mask[1] else None
        gb = cap.track(gb, "aten::zeros") if mask[2] and gb is not None else None
        return gi, gw, gb
    if not _native_depthwise_2d(conv) and not _native_depthwise_3d(conv):
        _check_same_type(x, w)
    cap.ops += 1
    gi, gw, gb = func(*args)
    if _slow_2d(conv):
        return _slow_conv2d_backward(cap, grad, x, w, conv, mask, gi, gw, gb)
    if _native_depthwise_3d(conv):
        # `conv_depthwise3d_backward_cuda`: both results first, then `_depthwise_3d_backward_cuda_out`'s
        # `grad_output.contiguous()` and, for the weight's, `input.contiguous()` (blind57/be01's history)
        gi, gw = _in_layout(gi, cl), _in_layout(gw, cl)
        for t, name in ((gi, "input"), (gw, "weight")):
            if t is not None and mask[0 if name == "input" else 1]:
                cap.track(t, f"aten::conv_depthwise3d_backward ({name})")
        g_c = _copy_unless_in(cap, grad, False)
        x_c = _copy_unless_in(cap, x, False) if mask[1] else None
        del g_c, x_c
        return gi, gw, _conv_grad_bias(cap, grad, gb, mask)
    if _native_depthwise_2d(conv):
        gi, gw = _in_layout(gi, cl), _in_layout(gw, cl)
        return _depthwise_2d_backward(cap, grad, x, w, gi, gw, gb, mask)
    # `convolution_backward` (Convolution.cpp) makes a 1-D convolution's input contiguous before
    # viewing it as 2-D whatever the mask (blind21/u02's dgrad alone copies), and passes
    # `input.contiguous(backend_memory_format)` only when the weight's gradient is asked for (a
    # dgrad alone of blind47/au06's expanded input copies nothing);
    # `cudnn_convolution_backward` (ConvShared.cpp) takes `grad_output_t.to(input.suggest_memory_format())`
    # of the input it was passed (a copy unless the gradient suggests that input's format, whatever
    # the mask: blind37/ak02's (8, 240, 1, 1) gradients, contiguous and channels-last both, suggest
    # NCHW; blind68/bp02's channels-last gradient of an NCHW input whose copy for the weight's
    # gradient is channels-last is not copied; the transposed path's `.contiguous(...)` copies
    # unless it is laid out so), then each problem takes its own layout,
    # `cudnn_conv_suggest_memory_format` of its operands: the dgrad's of the gradient and the
    # weight, the wgrad's of the input and the gradient (a pooled (N, C, 1, 1) input keeps its
    # contiguous strides through `.contiguous(channels_last)`: by a channels-last 1x1 weight its
    # wgrad runs NCHW, blind56/bd05's and DCGAN's H200 records), `.contiguous(layout)` of those
    # (none when neither is asked: bp02's bias gradients alone), dropped on return, before the
    # argument
    x_c = _copy_unless_in(cap, x, cl) if mask[1] or x.dim() == 3 else None
    x_seen = x
    if x_c is not None:
        fmt = _cl_format(x) if cl else torch.contiguous_format
        x_seen = torch.empty(x.shape, dtype=x.dtype, device="meta", memory_format=fmt)
    # a 1-D problem's operands as the backend sees them: `view4d`, (N, C, 1, L) (its gradient's
    # `.to` reads the strides of that view: blind16/p03's (16, 256, 399) gradient strided (102144,
    # 1, 256) suggests channels-last there and is copied, the bias's gradient alone included)
    x4, g4 = (x_seen.unsqueeze(2), grad.unsqueeze(2)) if x.dim() == 3 else (x_seen, grad)
    fmt = suggest_memory_format(x4)
    g_to, grad_c = None, grad
    if g4.dim() in (4, 5) and (
        not g4.is_contiguous(memory_format=fmt) if conv[5] else suggest_memory_format(g4) != fmt
    ):
        g_to = cap.malloc(grad.numel() * grad.element_size(), "aten::_to_copy", "temporary")
        grad_c = torch.empty(g4.shape, dtype=grad.dtype, device="meta", memory_format=fmt)
        grad_c = grad_c.squeeze(2) if x.dim() == 3 else grad_c
    cl_d, cl_w = _channels_last(grad_c, w), _channels_last(x_seen, grad_c)
    gi, gw = _in_layout(gi, cl_d), _in_layout(gw, cl_w)
    if mask[0] and gi is not None:
        # `cudnn_convolution_backward_input`: the result, then the weight's and the gradient's
        # `contiguous(layout)`, its own locals (blind127/dw04's H200 history: a channel slice of a
        # `cat`'s channels-last gradient copied after the result, freed at the return)
        cap.track(gi, "aten::cudnn_convolution_backward_input")
        w_c = _copy_unless_in(cap, w, cl_d)
        g_c = _copy_unless_in(cap, grad_c, cl_d)
        if gi.numel() > 0:
            _check_empty_gradient(grad)
            _conv_workspace(cap, "dgrad", (*conv[:-1], cl_d))
        del g_c, w_c
    if mask[1] and gw is not None:
        # `cudnn_convolution_backward_weight`: the gradient's and the input's `contiguous(layout)`
        # (copied again whatever the dgrad copied), then the result
        g_cw = _copy_unless_in(cap, grad_c, cl_w)
        x_cw = _copy_unless_in(cap, x_seen, cl_w)
        cap.track(gw, "aten::cudnn_convolution_backward_weight")
        if gw.numel() > 0:
            _check_empty_gradient(grad)
            _conv_workspace(cap, "wgrad", (*conv[:-1], cl_w))
        del x_cw, g_cw
    del g_to
    # a 1-D input's `contiguous()` is `convolution_backward`'s own local, held past the bias's sum
    x_1d, x_c = (x_c, None) if x.dim() == 3 else (None, x_c)
    del x_c
    gb = _conv_grad_bias(cap, grad, gb, mask)
    del x_1d
    return gi, gw, gb


def _check_empty_gradient(grad) -> None:
    """cuDNN on an empty gradient for a non-empty result: `raw_cudnn_convolution_forward_out` and
    `_backward_weight_out` (cudnn/Conv_v8.cpp) return only at their own output's `numel() == 0`, so
    a transposed convolution with no output (its forward returns empty) fails in backward at the
    plan's finalize (the H200, session 60: validation/run/probes/ms60_conv_zero.py, eager and
    compiled; the first 160 characters of cuDNN's message were recorded)."""
    if grad.numel() == 0:
        raise RuntimeError(
            "CUDNN_BACKEND_OPERATION: cudnnFinalize Failedis_valid_spatial_dim(xSpatialDimA[dim], "
            "wSpatialDimA[dim], ySpatialDimA[dim], cDesc.getPadLowerA()[dim], cDesc.getP"
        )


def _depthwise_2d_backward(cap, grad, x, w, gi, gw, gb, mask):
    """`convolution_backward` (Convolution.cpp) on `CudaDepthwise2d`: a 1-D input made contiguous
    first (held to the end); `conv_depthwise2d_backward_cuda` (DepthwiseConv2d.cu) makes both
    results empty, takes `grad_output.expect_contiguous()`, then for the weight's gradient the
    input's `expect_contiguous()` and `resize_output` of the gradient, the copy dropped before the
    input's gradient is resized after the weight's `expect_contiguous()`; the bias's gradient is
    `grad_output.sum` after."""
    x_1d = _copy_unless_in(cap, x, False) if x.dim() == 3 else None
    g_c = _copy_unless_in(cap, grad, False)
    gi = gi if gi is None or gi.is_contiguous() else gi.contiguous()
    gw = gw if gw is None or gw.is_contiguous() else gw.contiguous()
    if mask[1] and gw is not None:
        x_c = _copy_unless_in(cap, x, False) if x_1d is None else None
        cap.track(gw, "aten::_conv_depthwise2d_backward (weight)")
        del x_c
    if mask[0] and gi is not None:
        w_c = _copy_unless_in(cap, w, False)
        cap.track(gi, "aten::_conv_depthwise2d_backward (input)")
        del w_c
    del g_c
    gb = _conv_grad_bias(cap, grad, gb, mask)
    del x_1d
    return gi, gw, gb


def _conv_grad_bias(cap, grad, gb, mask):
    """`backend_grad_bias = grad_output.sum(all dims but 1)` (Convolution.cpp), over the gradient as
    it came."""
    if mask[2] and gb is not None:
        cap.track(gb, "aten::sum")
        if grad.numel() > 0:
            reduce_scratch(
                cap,
                list(grad.shape),
                list(grad.stride()),
                [d != 1 for d in range(grad.dim())],
                grad.element_size(),
                _acc_bytes(grad.dtype),
                "aten::sum",
            )
    return gb


DISPATCH[aten.convolution.default] = _convolution


def _underscore_convolution(cap, func, args, kwargs):
    """`aten::_convolution` called itself (a traced graph's node, `torch._convolution`): what
    `at::convolution` calls (Convolution.cpp), with its four cuDNN flags (benchmark, deterministic,
    cudnn_enabled, allow_tf32) in force for the call instead of the context's."""
    if kwargs or len(args) != 13:
        return NotImplemented
    benchmark, deterministic, enabled, tf32 = (bool(a) for a in args[9:])
    with torch.backends.cudnn.flags(
        enabled=enabled, benchmark=benchmark, deterministic=deterministic, allow_tf32=tf32
    ):
        return _convolution(cap, aten.convolution.default, tuple(args[:9]), {})


DISPATCH[aten._convolution.default] = _underscore_convolution

#: the convolutions `torch.jit.trace` does not record (gen_trace_type.py's DONT_RECORD_TRACE): their
#: composite kernels call `at::_convolution`, whose node the tracer records: (spatial dims, transposed)
_UNTRACED = {
    torch.conv1d: (1, False),
    torch.conv2d: (2, False),
    torch.conv3d: (3, False),
    torch.conv_transpose1d: (1, True),
    torch.conv_transpose2d: (2, True),
    torch.conv_transpose3d: (3, True),
}


def _traced_convolution(cap, func, args, kwargs):
    """`F.conv2d` and its kin while `torch.jit.trace` records: the composite (`at::conv2d`,
    Convolution.cpp) batchifies an unbatched input and calls `at::convolution`, which the tracer
    does not record and which calls `at::_convolution` with the context's cuDNN flags: that node
    is the trace's (`aten::_convolution` in a traced Conv2d's graph). The twin's dispatch mode sees
    `convolution` itself, below the tracer, with the tracer's state still on (sizes read as
    tensors there), so here the composite's own calls, recorded as on the GPU; with a padding
    string the composite calls `_convolution_mode`, a traced op."""
    if torch._C._get_tracing_state() is None:
        return NotImplemented
    dims, transposed = _UNTRACED[func]
    names = ("input", "weight", "bias", "stride", "padding")
    names += ("output_padding", "groups", "dilation") if transposed else ("dilation", "groups")
    a = dict(zip(names, args, strict=False)) | kwargs
    x, w = a.get("input"), a.get("weight")
    if not (registered(x) and registered(w)):
        return NotImplemented

    def expand(v, default):
        v = default if v is None else v
        return [int(v)] * dims if isinstance(v, int) else [int(i) for i in v]

    stride, dilation = expand(a.get("stride"), 1), expand(a.get("dilation"), 1)
    mode = a.get("padding", 0)
    if isinstance(mode, str) and transposed:
        return NotImplemented  # PyTorch's own error
    out_pad = expand(a.get("output_padding"), 0) if transposed else [0] * dims
    unbatched = x.dim() == dims + 1
    if unbatched:
        x = x.unsqueeze(0)
    if isinstance(mode, str):
        # `conv2d_padding_symint` (Convolution.cpp): `_convolution_mode` is the traced node
        out = torch._convolution_mode(x, w, a.get("bias"), stride, mode, dilation, int(a.get("groups", 1)))
        return out.squeeze(0) if unbatched else out
    padding = expand(mode, 0)
    out = torch._convolution(
        x,
        w,
        a.get("bias"),
        stride,
        padding,
        dilation,
        transposed,
        out_pad,
        int(a.get("groups", 1)),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic or torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.enabled,
        torch.backends.cudnn.allow_tf32,
    )
    return out.squeeze(0) if unbatched else out


for _f in _UNTRACED:
    FUNCTIONS[_f] = _traced_convolution
    TRACED_AS_OWN.add(_f)
DISPATCH[aten.convolution_backward.default] = _convolution_backward
SCRATCH_UNMODELLED.discard("aten::convolution")
SCRATCH_UNMODELLED.discard("aten::convolution_backward")


# The fused plans' workspaces the H100 measured (torch 2.11.0+cu130, cuDNN 91900; session 62,
# validation/run/probes/ji62_fused_conv_workspace_probe.py, fixtures/run/probes/
# ji62_fused_conv_workspace_probe_h100.txt): ResNet-50's convolutions at batch 16, fp32, contiguous,
# dilation 1, groups 1, a bias given, cudnn.benchmark off. (input, weight, stride, padding) -> the
# workspace block's bytes (512-rounded: the probe sees blocks, not the request), the same for
# cudnn_convolution_relu and cudnn_convolution_add_relu on every problem. The probe's figure less
# the output block's unsplit remainder, which its plain line shows (1,048,576 where the output is
# 51,380,224 or 25,690,112 bytes): 9 of the 23 differ from the plain convolution's (all 1x1, stride 1)
_FUSED_WORKSPACE = {
    ((16, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3)): 61051904,
    ((16, 64, 56, 56), (64, 64, 1, 1), (1, 1), (0, 0)): 0,
    ((16, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1)): 12993024,
    ((16, 64, 56, 56), (256, 64, 1, 1), (1, 1), (0, 0)): 12911104,
    ((16, 256, 56, 56), (64, 256, 1, 1), (1, 1), (0, 0)): 0,
    ((16, 256, 56, 56), (128, 256, 1, 1), (1, 1), (0, 0)): 51511808,
    ((16, 128, 56, 56), (128, 128, 3, 3), (2, 2), (1, 1)): 32702976,
    ((16, 128, 28, 28), (512, 128, 1, 1), (1, 1), (0, 0)): 6685184,
    ((16, 256, 56, 56), (512, 256, 1, 1), (2, 2), (0, 0)): 51905024,
    ((16, 512, 28, 28), (128, 512, 1, 1), (1, 1), (0, 0)): 32113152,
    ((16, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1)): 13435392,
    ((16, 512, 28, 28), (256, 512, 1, 1), (1, 1), (0, 0)): 38535680,
    ((16, 256, 28, 28), (256, 256, 3, 3), (2, 2), (1, 1)): 18416128,
    ((16, 256, 14, 14), (1024, 256, 1, 1), (1, 1), (0, 0)): 16056832,
    ((16, 512, 28, 28), (1024, 512, 1, 1), (2, 2), (0, 0)): 38535680,
    ((16, 1024, 14, 14), (256, 1024, 1, 1), (1, 1), (0, 0)): 16056832,
    ((16, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1)): 8782336,
    ((16, 1024, 14, 14), (512, 1024, 1, 1), (1, 1), (0, 0)): 19268096,
    ((16, 512, 14, 14), (512, 512, 3, 3), (2, 2), (1, 1)): 17465856,
    ((16, 512, 7, 7), (2048, 512, 1, 1), (1, 1), (0, 0)): 8028672,
    ((16, 1024, 14, 14), (2048, 1024, 1, 1), (2, 2), (0, 0)): 19268096,
    ((16, 2048, 7, 7), (512, 2048, 1, 1), (1, 1), (0, 0)): 8028672,
    ((16, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1)): 12648960,
}


def _fused_workspace(conv):
    """The measured fused plan's workspace bytes of `conv` (`_conv`'s tuple), or None."""
    x, w, stride, padding, dilation, _, _, groups, cl = conv
    if (
        x.dtype != torch.float32
        or cl
        or groups != 1
        or set(dilation) != {1}
        or torch.backends.cudnn.benchmark
        # measured with TF32 on; off, the fused plans took the plain convolution's (`_NO_TF32_FORWARD`)
        or not torch.backends.cudnn.allow_tf32
    ):
        return None
    key = (tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding))
    return _FUSED_WORKSPACE.get(key)


def _cudnn_fused(cap, func, args, kwargs):
    """`aten::cudnn_convolution_relu` (input, weight, bias, stride, padding, dilation, groups) and
    `aten::cudnn_convolution_add_relu` (input, weight, z, alpha, bias, ...), the ops
    `torch.jit.optimize_for_inference` fuses a frozen CUDA graph's conv + (add +) relu into
    (cudnn/ConvShared.cpp): the input and weight made contiguous in
    `cudnn_conv_suggest_memory_format`'s layout, `z` converted to it, the output `empty_cuda` in
    it, `at::zeros` of the output's channels where no bias is given, then
    `raw_cudnn_convolution_add_relu_out`'s plan and its workspace (cudnn/Conv_v8.cpp's
    `run_fused_conv`); the copies and the zeros go at the op's return."""
    if kwargs:
        return NotImplemented
    add = func is aten.cudnn_convolution_add_relu.default
    x, w = args[0], args[1]
    z = args[2] if add else None
    bias = args[4] if add else args[2]
    stride, padding, dilation, groups = args[5:9] if add else args[3:7]
    dims = w.dim() - 2
    conv = _conv(x, w, (stride, padding, dilation, False, [0] * dims, groups))
    if conv is None or dims not in (2, 3):
        return NotImplemented
    cl = conv[-1]
    cap.ops += 1
    x_c = _copy_unless_in(cap, x, cl)
    w_c = _copy_unless_in(cap, w, cl)
    z_c = _copy_unless_in(cap, z, cl) if add else None
    with torch._C._DisableTorchDispatch():
        meta = aten.convolution.default(x, w, None, stride, padding, dilation, False, [0] * dims, groups)
    out = cap.track(_in_layout(meta, cl), str(func._schema.name))
    if out.numel() > 0:
        zeros = None
        if bias is None:
            zeros = cap.malloc(out.size(1) * out.element_size(), "aten::zeros", "temporary")
        measured = _fused_workspace(conv)
        if measured is None:
            # the fused plan's workspace (conv + bias + add + relu in one cuDNN graph) of a problem
            # the H100 did not measure: taken as the plain convolution's, which 14 of the 23
            # measured problems agree with (`_FUSED_WORKSPACE`)
            cap.note_unmeasured(
                "cuDNN's fused conv-add-relu plan's workspace",
                "the workspace of cuDNN's fused convolution + bias + (add +) relu plan "
                "(`torch.jit.optimize_for_inference` on CUDA) was not measured for this problem: "
                "taken as the plain convolution's",
            )
            _conv_workspace(cap, "forward", conv)
        elif measured:
            cap.cudnn_plan()
            oom = cap.oom
            try:
                ws = cap.malloc(measured, str(func._schema.name), "workspace")
            except torch.OutOfMemoryError:
                # `try_configs_fused` (cudnn/Conv_v8.cpp) catches it and runs the next config,
                # whose workspace is not measured: taken as none
                cap.oom = oom
                cap.note_unmeasured(
                    "cuDNN's next fused engine config after its workspace ran out of memory",
                    "a fused cuDNN convolution's workspace did not fit: cuDNN runs its next engine "
                    "config, whose workspace was not measured: taken as none",
                )
            else:
                del ws
        else:
            cap.cudnn_plan()
        del zeros
    del x_c, w_c, z_c
    return out


DISPATCH[aten.cudnn_convolution_relu.default] = _cudnn_fused
DISPATCH[aten.cudnn_convolution_add_relu.default] = _cudnn_fused
