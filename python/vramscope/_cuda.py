"""`torch.cuda` answered by the twin while a capture runs.

The memory API is patched where `torch.cuda.memory` reads it (`torch._C`'s
`_cuda_*` functions), so `memory_allocated`, `memory_summary`, `_snapshot`
and the rest keep PyTorch's own Python code; device queries, streams and
events get stand-ins that need no GPU.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import sys
import time
import warnings
import weakref

import torch
import torch.nn.functional as F
from torch.utils._config_module import ConfigModule

from . import (
    _autograd_streams,
    _dataloader,
    _extensions,
    _graph_values,
    _importhook,
    _jit,
    _legacy,
    _philox,
    _processes,
    _threads,
    _triton,
)
from . import _tensor as _tensor_mod
from ._kernels.asserts import INVALID_DEVICE as _INVALID_DEVICE
from ._tensor import CUDA0, PROGRAM_CUDA, contiguous_strides, is_ours, patch_tensor
from ._tensor import assumed as _assumed
from ._tensor import set_value as _set_value
from ._tensor import value as _value


def _named_as(module: str, name: str):
    """A stand-in class named as the PyTorch class it stands for: its `__module__`, `__name__` and
    `__qualname__` (`type(x)`, its repr, pickle's reference to the class) read as on the GPU."""

    def named(cls):
        cls.__module__, cls.__name__, cls.__qualname__ = module, name, name
        return cls

    return named


@_named_as("torch._C", "_CudaDeviceProperties")
class _Properties:
    """What `torch.cuda.get_device_properties(0)` reports."""

    def __init__(self, dev):
        self.name = dev.name
        self.total_memory = dev.total_memory
        self.major, self.minor = dev.capability
        self.multi_processor_count = dev.multi_processor_count
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.gcnArchName = "NVIDIA"
        # the GPU profile's (Inductor's benchmarker flushes that much between timed launches)
        self.L2_cache_size = dev.l2_cache_size
        self.warp_size = 32
        self.max_threads_per_multi_processor = dev.max_threads_per_multi_processor
        # 64 K 32-bit registers an SM at every compute capability from 5.0 to 9.0 (the CUDA C++
        # Programming Guide's table of technical specifications; the H200's generated kernels print
        # regs_per_multiprocessor=65536): Inductor's `_dynamic_scale_rblock` reads it
        self.regs_per_multiprocessor = 65536
        self.uuid = "00000000-0000-0000-0000-000000000000"
        self.pci_bus_id = 0
        self.pci_device_id = 0
        self.pci_domain_id = 0

    def __repr__(self):
        # the binding's `__repr__` (torch/csrc/cuda/Module.cpp, CUDA build: uuid as 8-4-4-4-12 hex,
        # the PCI ids, L2 in MiB)
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
            f"pci_domain_id={self.pci_domain_id}, L2_cache_size={self.L2_cache_size // (1024 * 1024)}MB)"
        )


def _pool_hash(pool) -> int:
    """`MempoolIdHash` (CUDACachingAllocator.cpp): a pool id's first element, or its second where
    the first is 0; the allocator's key of the pool's options."""
    pool = tuple(pool)
    return pool[0] if pool[0] != 0 else pool[1]


#: where the twin keeps a CUDA graph's private pool: a stream id of its own per (pool, capturing
#: stream), since the caching allocator matches a private pool's blocks by stream too
_PRIVATE_POOL_STREAMS = 0x7E00_0000_0000


#: device memory the driver takes at the process's first kernel launch (`mem_get_info`): the Hopper
#: context after kernels, 554,500,096 bytes (`HOPPER_CONTEXT`, crates/engine/src/gpus.rs, measured), less
#: the H200's 552,402,944 before any (fixtures/h200/README.md; cb_meminfo_probe_h200.txt's `setup` line)
_FIRST_LAUNCH_BYTES = 2 << 20


#: streams per priority level in a device's stream pool (`kStreamsPerPool`, c10/cuda/CUDAStream.cpp)
_STREAMS_PER_POOL = 32


def pool_index(cap, priority: int = 0) -> tuple:
    """The next stream of the device's pool at `priority`'s level, as `getStreamFromPool` hands them
    out: round robin over its 32 streams (`get_idx`, c10/cuda/CUDAStream.cpp). Every taker shares the
    counter: `torch.cuda.Stream()`, ProcessGroupNCCL's stream, a CUDA future's callbacks."""
    counters = cap.__dict__.setdefault("_vramscope_pool_next", {})
    level = min(int(priority), 0)
    idx = counters.get(level, 0)
    counters[level] = (idx + 1) % _STREAMS_PER_POOL
    return level, idx


def pool_stream(cap) -> Stream:
    """A stream from the device's low-priority pool (`getStreamFromGlobalPool(device, false)`):
    the one a CUDA `ivalue::Future` runs each callback on (`invokeCallback`,
    aten/src/ATen/core/ivalue_inl.h), the same stream each time its index comes round."""
    key = pool_index(cap)
    streams = cap.__dict__.setdefault("_vramscope_pool_streams", {})
    stream = streams.get(key)
    if stream is None:
        stream = streams[key] = Stream(_index=key)
    return stream


@_named_as("torch.cuda.streams", "Stream")
class Stream:
    """A stand-in for `torch.cuda.Stream`: an id the allocator keys its pools by."""

    _next = 1

    def __init__(self, device=None, priority=0, _index=None, **kwargs):
        type(self)._next += 1
        self.stream_id = Stream._next * 0x10 + 0x7F00_0000_0000
        self.device = CUDA0
        self.priority = priority
        self.cuda_stream = self.stream_id
        from . import _capture

        cap = _capture.current()
        if cap is not None and _index is None:
            # a new stream takes the pool's next index; a pool stream taken later at that index
            # (a future's callback) is this one
            index = pool_index(cap, priority)
            cap.__dict__.setdefault("_vramscope_pool_streams", {}).setdefault(index, self)
        take = getattr(cap.device, "stream_pools", None) if cap is not None else None
        if take is not None:  # a native module built before has none
            # `getStreamFromPool`'s first call makes the device's stream pools: 70 MiB beyond the
            # allocator (mx2_stream_pool_probe_s61_h100.txt), once
            take()

    @staticmethod
    def priority_range():
        # (least, greatest) priority: torch 2.11 on the H100 (mx2_stream_pool_probe_s61_h100.txt);
        # makes no stream pool
        return (0, -3)

    def wait_stream(self, stream):
        # during a capture, the order of the captured work (`cudaStreamWaitEvent` on an event
        # recorded on `stream`): what graph_capture_record_stream_reuse reads
        _capture_wait(self.stream_id, getattr(stream, "stream_id", 0), None)

    def wait_event(self, event):
        _capture_wait(self.stream_id, None, event)

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self):
        pass

    def query(self):
        return True

    def __eq__(self, other):
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(self.stream_id)

    def __repr__(self):
        # torch/cuda/streams.py's
        return f"<torch.cuda.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"

    def __enter__(self):
        from . import _capture

        cap = _capture.current()
        self._prev = cap.stream
        cap.stream = self.stream_id
        cap.current_stream_obj.append(self)
        return self

    def __exit__(self, *exc):
        from . import _capture

        cap = _capture.current()
        cap.stream = self._prev
        cap.current_stream_obj.pop()


@_named_as("torch.cuda.streams", "ExternalStream")
class ExternalStream(Stream):
    """A stand-in for `torch.cuda.ExternalStream(stream_ptr)`, a stream made elsewhere (CuPy's, a
    JAX interop's): `getStreamFromExternal` (c10/cuda/CUDAStream.cpp) wraps the pointer as it is,
    takes no stream of the pool, and the allocator keys its pools by that pointer (`stream()`), so
    the null pointer is the default stream's. The real class subclasses the real `torch.cuda.Stream`,
    whose constructor asks the driver the twin's host does not have."""

    def __init__(self, stream_ptr, device=None, **kwargs):
        self.stream_id = self.cuda_stream = int(stream_ptr)
        self.device = CUDA0
        self.priority = 0


def _default_stream() -> Stream:
    """`torch.cuda.default_stream()`: a `Stream` of id 0 (the legacy default stream's null handle),
    made without taking a pool's stream."""
    stream = Stream.__new__(Stream)
    stream.stream_id = stream.cuda_stream = 0
    stream.device = CUDA0
    stream.priority = 0
    return stream


def _capture_wait(waiter: int, stream: int | None, event) -> None:
    """`waiter` waits on `stream`'s work so far (`wait_stream`) or on `event`, told to the
    allocator's order of captured work while a CUDA graph capture is underway (a stream waiting
    on a capturing one joins the capture)."""
    from . import _capture

    cap = _capture.current()
    if not cap.capture_streams:
        return
    if event is None:
        Event._next += 1
        eid = Event._next
        cap.device.capture_event_record(eid, stream)
        origin = _capture_origin(cap, stream)
    else:
        eid = event.eid
        origin = getattr(event, "_capture_origin", None)
    cap.device.capture_event_wait(waiter, eid)
    if origin is not None and _capture_origin(cap, waiter) is None:
        cap.capture_graphs[origin].join(waiter)


def _capture_origin(cap, stream) -> int | None:
    """The origin stream of the capture `stream` takes part in (its own, or one it joined), None
    where it is not capturing."""
    if stream in cap.capture_graphs:
        return stream
    return cap.joined_captures.get(stream)


@_named_as("torch.cuda.streams", "Event")
class Event:
    """A stand-in for `torch.cuda.Event`."""

    _next = 0

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        #: the host's clock when the event was last recorded (`elapsed_time`)
        self.recorded_ns: int | None = None
        type(self)._next += 1
        #: the allocator's name for it (the order of work captured in a CUDA graph)
        self.eid = Event._next

    @property
    def cuda_event(self) -> int:
        """The event's handle: 0 until its first record creates it (`CUDAEvent::record`'s
        `createEvent`), then an address of the twin's own."""
        return 0 if self.recorded_ns is None else 0x7F10_0000_0000 + self.eid * 0x10

    def __repr__(self):
        # torch/cuda/streams.py's
        if self.cuda_event:
            return f"<torch.cuda.Event {self.cuda_event:#x}>"
        return "<torch.cuda.Event uninitialized>"

    def record(self, stream=None):
        self.recorded_ns = time.perf_counter_ns()
        from . import _capture

        cap = _capture.current()
        self._capture_origin = None
        if cap.capture_streams:
            sid = cap.stream if stream is None else getattr(stream, "stream_id", 0)
            cap.device.capture_event_record(self.eid, sid)
            # a stream waiting on it joins the capture `sid` takes part in, if any
            self._capture_origin = _capture_origin(cap, sid)

    def wait(self, stream=None):
        from . import _capture

        cap = _capture.current()
        sid = cap.stream if stream is None else getattr(stream, "stream_id", 0)
        _capture_wait(sid, None, self)

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        """Milliseconds between the two records on the host's clock: the twin has no device
        timeline, and a program divides by the figure (a throughput), which must not be 0. The
        checks are `CUDAEvent::elapsed_time`'s (c10/cuda/CUDAEvent.h, `TORCH_CHECK_VALUE`)."""
        if not (self.enable_timing and end.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self.recorded_ns is None or end.recorded_ns is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return (end.recorded_ns - self.recorded_ns) / 1e6


@_named_as("torch.cuda", "StreamContext")
class _StreamContext:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        if self.stream is not None:
            self.stream.__enter__()
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            self.stream.__exit__(*exc)


def _nest(flat: dict) -> dict:
    """memory_stats' flat keys as `_cuda_memoryStats`' nested dict."""
    out: dict = {}
    for key, value in flat.items():
        parts = key.split(".")
        d = out
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = value
    return out


class _Patch:
    def __init__(self):
        self.saved = []

    def set(self, obj, name, value):
        if isinstance(obj, ConfigModule):
            # a torch config module's options live in its `_config`, not its `__dict__`, and its
            # `delattr` hides one ("does not exist" after the capture: torch.compile raised), so
            # the value comes back, as its own `patch` restores (torch/utils/_config_module.py)
            own = getattr(obj, name)
        elif hasattr(obj, "__dict__"):
            own = vars(obj).get(name, _MISSING)
        else:
            own = getattr(obj, name, _MISSING)
        self.saved.append((obj, name, own))
        setattr(obj, name, value)

    def when_imported(self, name: str, fn) -> None:
        """`fn(module)` on the module `name` now where it is imported, else once it is (while
        this patch lasts): its `set`s are then restored with the others."""
        module = sys.modules.get(name)
        if module is not None:
            fn(module)
            return
        _importhook.after_import(name, fn)
        self.saved.append((name, fn, _HOOK))

    def restore(self):
        for obj, name, value in reversed(self.saved):
            if value is _HOOK:
                _importhook.cancel(obj, name)
            elif value is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
        self.saved.clear()


_MISSING = object()
#: a `when_imported` hook, in `_Patch.saved`
_HOOK = object()


def _causal_bias_new(cls, *args, **kwargs):
    """`CausalBias(variant, seq_len_q, seq_len_kv)` (torch/nn/attention/bias.py) is `Tensor.__new__`'s
    legacy constructor, an uninitialised host tensor of those sizes, made into the subclass; under
    the twin's dispatch mode its `aten::empty` would return a Python tensor already, which the
    constructor refuses: made here with the modes off, as a plain run makes it."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        return torch.Tensor.__new__(cls, *args, **kwargs)


def _jiterator_launch(code_string, kernel_name, return_by_ref, num_outputs, tensors, kwargs):
    """`torch.cuda.jiterator`'s launch (`CompileAndLaunchKernel`, aten/src/ATen/cuda/jiterator.cu): a
    TensorIterator over the inputs that promotes them to their common dtype allocates each output
    as a pointwise op's (the broadcast shape, that dtype, the inputs' layout), first to last; the
    kernel NVRTC compiles allocates nothing on the device. One output is returned alone, more as a
    tuple (torch/csrc/cuda/Module.cpp)."""
    from torch.utils._python_dispatch import _disable_current_modes

    if not tensors:
        raise RuntimeError("jiterator needs at least one input tensor")
    with _disable_current_modes():
        metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in tensors]
        like = torch.empty_like(metas[0])
        for m in metas[1:]:
            # `add` is a TensorIterator binary op: its output has the broadcast shape, the promoted
            # dtype and the layout TensorIterator computes from the operands
            like = torch.add(like, m)
    outs = [
        torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device="cuda")
        for _ in range(num_outputs)
    ]
    return outs[0] if num_outputs == 1 else tuple(outs)


def _set_device(cap, device) -> None:
    """`torch.cuda.set_device`: torch 2.11's `THCPModule_setDevice_wrap` calls
    `c10::cuda::set_device(device, /*force=*/true)` (libtorch_python.so), so `cudaSetDevice` runs
    even for the current device, and since CUDA 12 it initializes the device's primary context at
    once (the CUDA runtime API's `cudaSetDevice`). The twin's context then starts here, so CPU
    tensors made after it are not laid out above it (driver address-space rule 11). A negative
    index is a no-op (torch/cuda/__init__.py)."""
    index = torch.cuda._get_device_index(device, optional=True)
    if index >= getattr(cap, "world", (1, 0))[0]:
        # `cudaSetDevice` refuses an ordinal past the device count (c10's CUDA check: H100,
        # oe81_api_corners_probe_h100.out, `set_device(1)` on one GPU)
        raise torch.AcceleratorError(_INVALID_DEVICE)
    if index >= 0 and not cap.started:
        cap.start()


def patch(cap) -> _Patch:
    """Point torch.cuda at `cap`'s twin; returns what restores it."""
    props = _Properties(cap.device)
    p = _Patch()
    world, rank = getattr(cap, "world", (1, 0))  # `vramscope run --nproc` sets it
    C = torch._C
    cuda = torch.cuda
    default_stream = _default_stream()
    cap.current_stream_obj = [default_stream]

    # torch._dynamo's trace rules are built once from torch's functions: build
    # them before any is patched (one stand-in shared by two names breaks them)
    importlib.import_module("torch._dynamo")

    p.set(cuda, "is_available", lambda: True)
    p.set(cuda, "is_initialized", lambda: True)
    # what `is_initialized` reads, and what `torch.utils.checkpoint` reads to stash the device's RNG state
    p.set(cuda, "_initialized", True)
    p.set(cuda, "_lazy_init", lambda *a, **k: None)
    p.set(cuda, "init", lambda *a, **k: None)
    p.set(cuda, "device_count", lambda: world)  # under --nproc, the node's GPUs
    p.set(cuda, "current_device", lambda: 0)
    p.set(cuda, "set_device", lambda device: _set_device(cap, device))

    def exchange_device(device):
        """`torch.cuda._exchange_device` (`with torch.cuda.device(i)`, `device_of`,
        RNNBase.flatten_parameters): the one device stays current; an index past the device count
        fails in `c10::cuda::ExchangeDevice`'s `cudaSetDevice` (c10's CUDA check), as `set_device`."""
        if device < 0:
            return -1
        if device >= world:
            raise torch.AcceleratorError(_INVALID_DEVICE)
        return 0

    def device_properties(device=None):
        """`torch.cuda.get_device_properties` (and `get_device_name`, `get_device_capability`, which
        call it): torch/cuda/__init__.py refuses an index outside the device count with
        `AssertionError("Invalid device id")` (H100, oe81_api_corners_probe_h100.out: index 1 on one
        GPU)."""
        index = torch.cuda._get_device_index(device, optional=True)
        if index < 0 or index >= world:
            raise AssertionError("Invalid device id")
        return props

    p.set(cuda, "_exchange_device", exchange_device)
    p.set(cuda, "_maybe_exchange_device", lambda device: -1 if device < 0 else 0)
    p.set(cuda, "synchronize", lambda *a, **k: cap.synchronize())
    p.set(cuda, "ipc_collect", lambda *a, **k: None)
    p.set(cuda, "get_device_name", lambda device=None: device_properties(device).name)

    def device_capability(device=None):
        device_properties(device)  # torch's refuses an index as `get_device_properties` does
        return cap.device.capability

    p.set(cuda, "get_device_capability", device_capability)
    p.set(cuda, "get_device_properties", device_properties)
    p.set(cuda, "is_bf16_supported", lambda including_emulation=True: True)
    p.set(cuda, "get_arch_list", lambda: ["sm_90"])
    for owner in (cuda, cuda.streams):
        # the class a pickle of `type(stream)` looks up by its module and name
        p.set(owner, "Stream", Stream)
        p.set(owner, "ExternalStream", ExternalStream)
        p.set(owner, "Event", Event)
    p.set(cuda, "current_stream", lambda device=None: cap.current_stream_obj[-1])
    p.set(cuda, "default_stream", lambda device=None: default_stream)
    p.set(cuda, "stream", _StreamContext)

    def set_stream(stream):
        """`torch.cuda.set_stream` (torch/cuda/__init__.py): `stream` becomes the current one, the one
        `current_stream()` answers too, until a later call; a `torch.cuda.stream` context entered
        around it restores the stream it saved (the top of the twin's stack); None does nothing."""
        if stream is None:
            return
        cap.stream = stream.stream_id
        cap.current_stream_obj[-1] = stream

    p.set(cuda, "set_stream", set_stream)

    def is_current_stream_capturing():
        """Whether the current stream is capturing a CUDA graph (cudaStreamIsCapturing on it,
        CUDAGraph.cpp's `_cuda_isCurrentStreamCapturing`): between a graph's `capture_begin` and
        `capture_end` on its stream. transformers' `is_tracing` reads it (masks kept whole)."""
        return cap.stream in cap.pool_streams or cap.stream in cap.joined_captures

    p.set(cuda, "is_current_stream_capturing", is_current_stream_capturing)
    p.set(cuda.graphs, "is_current_stream_capturing", is_current_stream_capturing)

    # the default CUDA generator's graph-safe seed and offset: two 1-element int64 tensors made on
    # the current stream when the first graph registers with it, freed when the last one leaves
    # (CUDAGeneratorState::register_graph / unregister_graph, CUDAGeneratorImpl.cpp)
    rng_graphs: dict = {"graphs": set(), "extragraph": None}
    #: other generators registered with a graph (`register_generator_state`), by id: (the
    #: generator, its seed and offset)
    rng_states: dict = {}
    pools = [0]
    pool_users: dict[int, set] = {}

    def graph_pool_handle():
        """A new private pool's id, `(0, n)` as `MemPool::graph_pool_handle` numbers them."""
        pools[0] += 1
        return (0, pools[0])

    @_named_as("torch.cuda.graphs", "CUDAGraph")
    class CUDAGraph:
        """`torch.cuda.CUDAGraph` on the simulated device: a captured region runs once, eagerly, on
        the capture's stream (`torch.cuda.graph` enters it after `empty_cache()`); `capture_begin`
        registers the graph with the default generator, the capture allocates from the graph's
        private pool, which empty_cache keeps while a graph holds it (CUDAGraph.cpp,
        CUDACachingAllocator.cpp); a stream joined into the capture (`join`) allocates from that
        pool too. Replays allocate nothing."""

        def __init__(self, keep_graph=False):
            # `keep_graph=True` (CUDAGraph.cpp): capture_end keeps the cudaGraph_t and leaves its
            # instantiation to `instantiate()` or the first replay; neither touches the allocator
            self._keep_graph = bool(keep_graph)
            self._ended = self._instantiated = False

        def register_generator_state(self, state):
            """A generator registered with the graph (`CUDAGraph::register_generator_state`,
            Inductor's graph-safe RNG states): its first graph makes its seed and offset, two
            1-element int64 tensors on the current stream (`CUDAGeneratorState::register_graph`),
            kept while the generator lives (the twin's graphs do not unregister it)."""
            philox = getattr(state, "_philox", None)
            if philox is not None and philox is not cap.philox:
                # the graph's own list (`captured_generator_states_`): its captures count the
                # generator's draws within the graph and its replays move it on
                registered = self.__dict__.setdefault("_generators", [])
                if all(g is not philox for g in registered):
                    registered.append(philox)
            if state is None or id(state) in rng_states:
                return
            op = "aten::empty"
            rng_states[id(state)] = (state, cap.malloc(8, op, "buffer"), cap.malloc(8, op, "buffer"))

        def capture_begin(self, pool=None, capture_error_mode="global"):
            if cap.malloc_async():
                # CudaMallocAsync's beginAllocateToPool: the capture's cudaMallocAsync nodes take the
                # driver's graph memory, which 2.11's getDeviceStats leaves out (the pool's alone)
                cap.note_unmeasured(
                    "CUDA graphs under backend:cudaMallocAsync (the driver's graph memory)",
                    "backend:cudaMallocAsync: a CUDA graph's memory is the driver's graph pool, not "
                    "modelled (the twin keeps it in a private pool of its native allocator)",
                )
            if not rng_graphs["graphs"]:
                op = "aten::empty"
                rng_graphs["extragraph"] = (cap.malloc(8, op, "buffer"), cap.malloc(8, op, "buffer"))
            rng_graphs["graphs"].add(id(self))
            cap.philox.capture_prologue()
            for philox in self.__dict__.get("_generators", ()):
                philox.capture_prologue()
            # beginAllocateToPool: what the capturing stream allocates comes from the graph's
            # private pool (a new one, or the one `pool` names), apart from its ordinary blocks
            self._pool = tuple(pool) if pool is not None and tuple(pool) != (0, 0) else graph_pool_handle()
            self._stream = cap.stream
            cap.capture_streams.add(cap.stream)
            # what writes the values the twin computes, for the replays (`_graph_values`)
            self._tape = cap.graph_tapes[cap.stream] = []
            self._undo = cap.graph_undo[cap.stream] = []
            self._existing = set(cap.storages)
            self._private = _PRIVATE_POOL_STREAMS + (self._pool[1] << 24) + (cap.stream & 0xFFFFFF)
            cap.pool_streams[cap.stream] = self._private
            cap.device.register_private_stream(self._private, _pool_hash(self._pool), cap.stream)
            cap.capture_graphs[cap.stream] = self
            #: the private pool's streams of the streams joined into the capture (`joined_private`)
            self._joined: list[int] = []
            # the stream captures from now on (the order of its work: graph_capture_record_stream_reuse)
            cap.device.capture_stream_begin(cap.stream)
            # the pool's use_count: empty_cache keeps it while a graph holds it
            pool_users.setdefault(self._private, set()).add(id(self))
            cap.device.keep_through_empty_cache(self._private, True)
            cap.device.begin_allocate_to_pool()

        def join(self, stream):
            """`stream` waited on this capture's work: it captures into this graph (its ops taped
            for the replays, its allocations from the graph's pool) until `capture_end`."""
            cap.joined_captures[stream] = self._stream
            cap.graph_tapes[stream] = self._tape
            cap.graph_undo[stream] = self._undo

        def joined_private(self, stream):
            """The twin's stream id for the blocks a joined `stream` allocates in the graph's pool
            (held, as the capturing stream's, until the graph is reset)."""
            private = _PRIVATE_POOL_STREAMS + (self._pool[1] << 24) + (stream & 0xFFFFFF)
            if private not in self._joined:
                self._joined.append(private)
                cap.device.register_private_stream(private, _pool_hash(self._pool), stream)
                pool_users.setdefault(private, set()).add(id(self))
                cap.device.keep_through_empty_cache(private, True)
            return private

        def capture_end(self):
            cap.pool_streams.pop(self._stream, None)
            cap.capture_streams.discard(self._stream)
            cap.capture_graphs.pop(self._stream, None)
            for stream in [s for s, o in cap.joined_captures.items() if o == self._stream]:
                del cap.joined_captures[stream]
                cap.graph_tapes.pop(stream, None)
                cap.graph_undo.pop(stream, None)
            cap.graph_tapes.pop(self._stream, None)
            cap.graph_undo.pop(self._stream, None)
            _graph_values.undo(self._undo, self._existing)
            self._undo = self._existing = None
            cap.device.capture_stream_end(self._stream)
            cap.device.end_allocate_to_pool()
            self._rng_increment = cap.philox.capture_epilogue()
            self._rng_increments = [(g, g.capture_epilogue()) for g in self.__dict__.get("_generators", ())]
            self._ended = True
            if not self._keep_graph:
                self._instantiated = True  # capture_end's own instantiate()

        def instantiate(self):
            """`CUDAGraph::instantiate`: cudaGraphInstantiate, device memory of the driver's, not the
            caching allocator's; its two checks as CUDAGraph.cpp makes them."""
            if not self._ended:
                raise RuntimeError("capture_end() must have been called before calling instantiate")
            if self._instantiated and not self._keep_graph:
                raise RuntimeError(
                    "instantiate() is intended to be called by the user only when keep_graph=true"
                )
            self._instantiated = True

        def replay(self):
            if self._ended and not self._instantiated:
                self.instantiate()  # a kept graph's first replay instantiates it (CUDAGraph::replay)
            # the default generator's offset moves on by what the capture drew (`replay_prologue`)
            cap.philox.replay_prologue(getattr(self, "_rng_increment", 0))
            for philox, increment in getattr(self, "_rng_increments", ()):
                philox.replay_prologue(increment)
            # the values the replayed kernels write (`_graph_values`): into the captured tensors
            # still alive, and the tensors the tree manager names (`_cudagraph_trees`)
            tape = getattr(self, "_tape", None)
            if tape:
                sources = getattr(self, "_vs_sources", ())
                self._vs_shadow = _graph_values.replay(tape, sources)
                _graph_values.apply(self._vs_shadow, [*sources, *_graph_values.captured(tape)])

        def reset(self):
            # (the generator keeps the graph registered: only `~CUDAGraph` unregisters it)
            private = getattr(self, "_private", None)
            if private is not None:
                for held in [private, *self.__dict__.get("_joined", ())]:
                    users = pool_users.get(held, set())
                    users.discard(id(self))
                    if not users:
                        cap.device.keep_through_empty_cache(held, False)
                self._private = None
                self._joined = []

        def __del__(self):
            if cap.active:
                # ~CUDAGraph (CUDAGraph.cpp): `unregister_graph` from each generator state, then
                # `reset()`; the last graph to leave frees the seed and offset tensors
                rng_graphs["graphs"].discard(id(self))
                if not rng_graphs["graphs"]:
                    rng_graphs["extragraph"] = None
                self.reset()

        def pool(self):
            return getattr(self, "_pool", (0, 0))

        def enable_debug_mode(self):
            pass

        def debug_dump(self, *args, **kwargs):
            pass

    @_named_as("torch.cuda.memory", "MemPool")
    class MemPool:
        """`torch.cuda.MemPool` on the simulated device (MemPool.cpp): an id `(0, n)` as
        `graph_pool_handle` numbers them and a private pool whose use count its life holds
        (`createOrIncrefPool`), so empty_cache keeps its cached blocks; `no_split` (`setNoSplit`:
        its blocks are never split) and `use_on_oom` (`setUseOnOOM`: its free blocks serve a
        request outside any pool that cudaMalloc cannot, `try_mempool_fallback`); its deletion
        (`setUseOnOOM(false)`, `releasePool`, then `emptyCache(id_)`) frees the pool's unsplit
        cached blocks alone. Blocks are matched by stream inside the pool as in a graph's."""

        def __init__(self, allocator=None, use_on_oom=False, no_split=False):
            if allocator is not None:
                cap.note_unmeasured("MemPool with its own allocator")
            self._id = graph_pool_handle()
            self._uses = 1
            self._streams: list[int] = []
            # given to the allocator with the pool's first stream (`setNoSplit`, `setUseOnOOM`):
            # a pool without blocks splits none and serves no fallback, and the twin's allocator
            # starts at the first allocation, with the settings the script may set until then
            self._no_split = bool(no_split)
            self._use_on_oom = bool(use_on_oom)

        @property
        def id(self):
            return self._id

        @property
        def allocator(self):
            return None

        def use_count(self):
            return self._uses

        def private_stream(self, stream):
            """The twin's stream id for this pool's blocks allocated on `stream`."""
            private = _PRIVATE_POOL_STREAMS + (self._id[1] << 24) + (stream & 0xFFFFFF)
            if private not in self._streams:
                self._streams.append(private)
                cap.device.keep_through_empty_cache(private, True)
                cap.device.register_private_stream(private, _pool_hash(self._id), stream)
                if self._no_split:
                    cap.device.set_no_split(_pool_hash(self._id))
                if self._use_on_oom:
                    cap.device.set_use_on_oom(_pool_hash(self._id), True)
            return private

        def snapshot(self, include_traces=True):
            """`MemPool.snapshot`: `torch.cuda.memory_snapshot(self.id)`, this pool's segments."""
            return memory_snapshot((*self._id, include_traces))["segments"]

        def __del__(self):
            if cap.active:
                # ~MemPool (PyTorch 2.11): setUseOnOOM(id_, false) first
                cap.device.set_use_on_oom(_pool_hash(self._id), False)
            if cap.active and self._streams:
                # (a graph captured into this pool holds it until the graph is reset)
                cap.device.empty_cache_of([s for s in self._streams if not pool_users.get(s)])

    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        """`torch.cuda.use_mem_pool`: `beginAllocateToPool` with a filter on the calling thread,
        so the program's allocations on any stream go to `pool` and the autograd engine's
        device thread's do not; `endAllocateToPool` and `releasePool` at the exit."""
        pool._uses += 1
        cap.thread_pools.append(pool)
        cap.device.begin_allocate_to_pool()
        try:
            yield
        finally:
            cap.device.end_allocate_to_pool()
            cap.thread_pools.remove(pool)
            pool._uses -= 1

    for owner in (cuda, cuda.memory):
        p.set(owner, "MemPool", MemPool)
        p.set(owner, "use_mem_pool", use_mem_pool)
    p.set(cuda, "CUDAGraph", CUDAGraph)
    p.set(cuda.graphs, "CUDAGraph", CUDAGraph)
    p.set(cuda, "graph_pool_handle", graph_pool_handle)
    p.set(cuda.graphs, "graph_pool_handle", graph_pool_handle)
    # the default CUDA generator (torch/cuda/random.py over `CUDAGeneratorImpl`): `torch.manual_seed`
    # seeds it through `torch.cuda.manual_seed_all`
    gen = cap.philox
    # `torch.cuda.default_generators[0]`: the default generator, its state the capture's
    generator = _generator(torch.Generator)
    default = generator("cuda:0")
    default._philox = gen
    p.set(cuda, "default_generators", (default,))
    p.set(cuda, "manual_seed", lambda seed: gen.manual_seed(seed))
    p.set(cuda, "manual_seed_all", lambda seed: gen.manual_seed(seed))
    p.set(cuda, "seed", lambda: gen.seed_nondeterministic() and None)
    p.set(cuda, "seed_all", lambda: gen.seed_nondeterministic() and None)
    p.set(cuda, "initial_seed", lambda: gen.seed)
    p.set(cuda, "get_rng_state", lambda device="cuda": gen.get_state())
    p.set(cuda, "set_rng_state", lambda new_state, device="cuda": gen.set_state(new_state))
    p.set(cuda, "get_rng_state_all", lambda: [gen.get_state()])
    p.set(cuda, "set_rng_state_all", lambda new_states: [gen.set_state(s) for s in new_states] and None)

    def memory_stats_nested(device=None):
        cap.flush_frees()
        return _nest(cap.allocator_stats())

    def reset_peak(device=None):
        cap.mark_phase()
        cap.device.reset_peak_memory_stats()

    def empty_cache():
        cap.flush_frees()
        cap.device.empty_cache()

    def mem_get_info(device=None):
        """`cudaMemGetInfo`: the device's free memory and total. Until the process's first kernel
        launch the driver's own 2 MiB of that launch (address-space rule 6) is free still, which the
        context's figure (`context_bytes`, read after loading) holds: measured on the H200, 552,402,944
        bytes used after `torch.cuda.init()` and after a model's blocking `.to("cuda", bfloat16)`
        (host-side conversions, no kernel: cb_meminfo_probe_h200.txt's `setup`; fixtures/h200/README.md),
        554,500,096 after its first kernels (`HOPPER_CONTEXT`)."""
        free, total = cap.device.mem_get_info()
        if not cap.launched:
            free += _FIRST_LAUNCH_BYTES
        return free, total

    def set_fraction(fraction, device=None):
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        try:
            cap.set_memory_fraction(fraction)
        except ValueError as e:
            raise ValueError(str(e)) from None

    def record_history(enabled=None, *args, **kwargs):
        if cap.malloc_async():
            # CudaMallocAsyncAllocator::recordHistory, enabling or not
            raise RuntimeError(
                "cudaMallocAsync does not yet support recordHistory. If you need it, please file an "
                "issue describing your use case."
            )
        cap.record_history(bool(enabled) and enabled != "None")
        # `_record_memory_history_impl` passes (enabled, context, stacks, max_entries, clear_history,
        # compile_context, global_record_annotations, skip_actions): CUDACachingAllocator.cpp's
        # `record_trace` drops an action in skip_actions and keeps the last max_entries in its ring
        # buffer; the twin records every entry and applies both when the snapshot is taken
        cap.history_max_entries = args[2] if len(args) > 2 and args[2] else None
        cap.history_skip_actions = frozenset(args[6]) if len(args) > 6 and args[6] else frozenset()

    def record_history_legacy(enabled=None, *args, **kwargs):
        # `_record_memory_history_legacy` (a bool `enabled`): its positional layout differs
        # (trace_alloc_max_entries second, skip_actions ninth); the twin keeps its whole trace there
        record_history(enabled)

    def reset_accumulated(device=None):
        if cap.malloc_async():
            # CudaMallocAsyncAllocator::resetAccumulatedStats (TORCH_WARN_ONCE)
            if "resetAccumulatedStats" not in cap.warned:
                cap.warned.add("resetAccumulatedStats")
                warnings.warn(
                    "For backend:cudaMallocAsync, resetAccumulatedStats has no effect.", stacklevel=3
                )
            return
        cap.device.reset_accumulated_memory_stats()

    def memory_snapshot(*args, **kwargs):
        if cap.malloc_async():
            raise RuntimeError(
                "Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, "
                "snapshot returns a detailed summary of all blocks tracked by the allocator, but the "
                "cudaMallocAsync backend does not track individual blocks.)"
            )
        snap = pickle.loads(cap.device.snapshot_pickle())
        if cap.uncached:
            # uncached_allocate's storages are no allocator's blocks: no segments, no trace entries
            snap["segments"] = []
            snap["device_traces"] = [[] for _ in snap["device_traces"]]
        skip, most = cap.history_skip_actions, cap.history_max_entries
        if skip or most:
            traces = [[e for e in trace if e["action"] not in skip] for trace in snap["device_traces"]]
            snap["device_traces"] = [trace[-most:] if most else trace for trace in traces]
        pool_id = tuple(args[0][:2]) if args and isinstance(args[0], tuple) else (0, 0)
        if pool_id != (0, 0):
            # CUDACachingAllocator.cpp `snapshot(mempool_id)`: only the segments of that private
            # pool (the twin's private pools are streams numbered by the pool's id)
            snap["segments"] = [
                seg
                for seg in snap.get("segments", [])
                if seg["stream"] >= _PRIVATE_POOL_STREAMS
                and (seg["stream"] - _PRIVATE_POOL_STREAMS) >> 24 == pool_id[1]
            ]
        if rank:
            # under --nproc, the process's GPU is the one its local rank selects; the others are empty
            snap["device_traces"] = [[] for _ in range(rank)] + list(snap["device_traces"])
            for seg in snap.get("segments", []):
                seg["device"] = rank
        return snap

    raw_blocks: dict = {}

    def caching_allocator_alloc(size, device=None, stream=None):
        """`torch.cuda.caching_allocator_alloc`: `raw_alloc_with_stream` (CUDACachingAllocator.cpp),
        an ordinary `malloc` of `size` bytes on `stream` (the current one by default), routed to a
        pool as any other; 0 bytes give a null pointer. Returns the block's address."""
        if stream is None:
            stream = cap.current_stream_obj[-1]
        stream_id = stream.stream_id if isinstance(stream, Stream) else stream
        if not isinstance(stream_id, int):
            raise TypeError(
                "Invalid type for stream argument, must be `torch.cuda.Stream` or `int` representing a"
                " pointer to a existing stream"
            )
        if size == 0:
            return 0
        prev, cap.stream = cap.stream, stream_id
        try:
            block = cap.malloc(int(size), "caching_allocator_alloc", "buffer")
        finally:
            cap.stream = prev
        if block.handle is None:
            # an uncached allocation (`caching_allocator_enable(False)`): no block, a unique address
            ptr = (1 << 61) + id(block)
        else:
            ptr = cap.device.addr_of(block.handle) or (1 << 60) + block.handle
        raw_blocks[ptr] = block
        return ptr

    def caching_allocator_delete(mem_ptr):
        """`torch.cuda.caching_allocator_delete`: `raw_delete`, the block freed on its stream."""
        if mem_ptr:
            raw_blocks.pop(mem_ptr, None)

    for owner in (cuda, cuda.memory):
        p.set(owner, "caching_allocator_alloc", caching_allocator_alloc)
        p.set(owner, "caching_allocator_delete", caching_allocator_delete)
    p.set(C, "_cuda_memoryStats", memory_stats_nested)
    p.set(C, "_cuda_resetPeakMemoryStats", reset_peak)
    p.set(C, "_cuda_resetAccumulatedMemoryStats", reset_accumulated)
    p.set(C, "_cuda_emptyCache", empty_cache)
    p.set(C, "_host_emptyCache", lambda: cap.pinned.empty_cache(cap))
    p.set(C, "_cuda_hostMemoryStats", lambda: cap.pinned.stats())
    p.set(C, "_cuda_resetPeakHostMemoryStats", lambda: cap.pinned.reset_peak())
    p.set(C, "_cuda_resetAccumulatedHostMemoryStats", lambda: cap.pinned.reset_accumulated())
    p.set(C, "_cuda_setMemoryFraction", set_fraction)
    p.set(C, "_cuda_getMemoryFraction", lambda device=None: cap.device.memory_fraction())
    p.set(C, "_cuda_record_memory_history", record_history)
    p.set(C, "_cuda_record_memory_history_legacy", record_history_legacy)
    # the backend the environment's settings chose (`CUDACachingAllocator::get()->name()`)
    p.set(C, "_cuda_getAllocatorBackend", lambda: "cudaMallocAsync" if cap.malloc_async() else "native")
    p.set(C, "_cuda_memorySnapshot", memory_snapshot)

    def caching_allocator_enable(val):
        """`torch._C._cuda_cudaCachingAllocator_enable` (`torch.cuda.caching_allocator_enable`):
        the native allocator's `enable(value)` sets the flag `allocate` reads per request
        (`Capture._malloc_handle`); a storage keeps the deleter it was made with. Anything but a
        bool fails `THCPModule_cudaCachingAllocator_enable`'s check (torch/csrc/cuda/Module.cpp)."""
        if not isinstance(val, bool):
            raise RuntimeError(f"cudaCachingAllocator_enable expects a bool, but got {type(val).__name__}")
        if cap.malloc_async():
            cap.note_unmeasured(
                "caching_allocator_enable under cudaMallocAsync",
                "torch.cuda.caching_allocator_enable under backend:cudaMallocAsync: the twin keeps "
                "allocating from the stream-ordered pool",
            )
            return
        cap.caching_enabled = val

    p.set(C, "_cuda_cudaCachingAllocator_enable", caching_allocator_enable)

    def set_allocator_settings(env):
        if not isinstance(env, str):
            raise TypeError(
                "_accelerator_setAllocatorSettings(): incompatible function arguments. The following"
                f" argument types are supported:\n    1. (arg0: str) -> None\n\nInvoked with: {env!r}"
            )
        cap.set_allocator_settings(env)

    # (`torch.cuda.memory._set_allocator_settings`, deprecated, calls it through `torch._C`)
    p.set(C, "_accelerator_setAllocatorSettings", set_allocator_settings)

    def clear_cublas_workspaces():
        cap.device.clear_cublas_workspaces()
        cap.blas_streams.clear()

    p.set(C, "_cuda_clearCublasWorkspaces", clear_cublas_workspaces)
    p.set(C, "_cuda_isHistoryEnabled", lambda: False)
    p.set(C, "_cuda_jiterator_compile_and_launch_kernel", _jiterator_launch)
    _tunableop_patch(p, props)
    from . import _attention, _kernels, _linalg

    original_sdpa = F.scaled_dot_product_attention

    bias = importlib.import_module("torch.nn.attention.bias")

    def scaled_dot_product_attention(*args, **kwargs):
        mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
        if isinstance(mask, bias.CausalBias) and not torch.compiler.is_dynamo_compiling():
            # what its `__torch_function__` does, which this stand-in would otherwise skip
            return bias.CausalBias._dispatch(*args, **kwargs)
        if torch.compiler.is_dynamo_compiling() or torch._C._get_tracing_state() is not None:
            # dynamo traces a compiled region: PyTorch's own (`_compile` picks the kernel); so
            # while `torch.jit.trace` records (its node is `scaled_dot_product_attention`)
            return original_sdpa(*args, **kwargs)
        try:
            if is_ours(_attention._physical(args[0] if args else kwargs.get("query"))):
                # under torch.func's transforms too: the query's physical tensor is the device's
                out = _attention.sdpa(cap, args, kwargs)
                if out is not NotImplemented:
                    return out
            elif getattr(args[0] if args else kwargs.get("query"), PROGRAM_CUDA, False) is True:
                # fake CUDA tensors of the program's own FakeTensorMode, kept on the host: the
                # GPU's kernel (flash, efficient, cuDNN), not the host's
                # `_scaled_dot_product_flash_attention_for_cpu`
                return _attention.sdpa(cap, args, kwargs, traced=True)
        except Exception as e:
            # C++ on the GPU, which holds nothing of the call as an error unwinds (blind310/ky05's
            # IndexError on the H100: its `q.to(bfloat16)` argument freed): the twin's frames keep
            # their lines in the traceback, not their tensors
            from ._capture import _forget_frames

            _forget_frames(e.__traceback__)
            del e, args, kwargs, mask
            raise
        return original_sdpa(*args, **kwargs)

    p.set(F, "scaled_dot_product_attention", scaled_dot_product_attention)
    names = ("can_use_flash_attention", "can_use_efficient_attention", "can_use_cudnn_attention")
    checks = _attention.nested_backend_checks(cap, {n: getattr(torch.backends.cuda, n) for n in names})
    nested_sdpa = sys.modules.get("torch.nested._internal.sdpa")
    for name, check in checks.items():
        # the jagged path binds them at its import (`from torch.backends.cuda import ...`)
        p.set(torch.backends.cuda, name, check)
        if nested_sdpa is not None:
            p.set(nested_sdpa, name, check)
        if hasattr(bias, name):
            p.set(bias, name, check)  # bound at its import too (`CausalBias._dispatch` asks them)
    p.set(bias.CausalBias, "__new__", _causal_bias_new)
    p.set(F, "linear", _traced_as_pytorch(_kernels.linear(F.linear), F.linear))
    p.set(F, "dropout", _traced_as_pytorch(_kernels.dropout(F.dropout), F.dropout))
    for owner, name in (
        (torch.linalg, "svdvals"),
        (torch.linalg, "matrix_norm"),
        (torch.linalg, "norm"),
        (torch.linalg, "cond"),
        (torch.linalg, "matrix_rank"),
        (torch, "nuclear_norm"),
        (torch, "norm"),
    ):
        original = getattr(owner, name)
        p.set(owner, name, _traced_as_pytorch(_linalg.svdvals_only(original), original))
    for owner in (torch, torch.Tensor):
        original = owner.svd
        only = _linalg.svdvals_only(original, _linalg.svd_without_vectors)
        p.set(owner, "svd", _traced_as_pytorch(only, original))
    p.set(torch.nn.Module, "_apply", _kernels.module_apply(torch.nn.Module._apply))
    from . import _compile

    p.set(torch, "compile", _compile.compile_fn(torch.compile, cap))
    _compile.patch(p, cap)
    from . import _compiled_autograd

    _compiled_autograd.patch(p, cap)
    p.set(torch.export, "export", _compile.export_fn(torch.export.export, cap))
    ep_class = torch.export.ExportedProgram
    p.set(ep_class, "run_decompositions", _compile.run_decompositions_fn(ep_class.run_decompositions, cap))
    from . import _aoti

    _aoti.patch(p, cap)
    from . import _cudagraph_trees

    _cudagraph_trees.patch(p, cap)
    original_data_ptr = torch.Tensor.data_ptr

    def data_ptr(self):
        """`Tensor.data_ptr()` of a simulated tensor (`_rnn._data_ptr`'s pointer) also where no
        torch-function mode sees the call: a saved-tensor hook run inside an op, as
        `allow_mutation_on_saved_tensors`' hooks, which key saved tensors by `(id(t), t.data_ptr(),
        t._version)` (torch/autograd/graph.py `_get_tid`) and would take the meta tensors' null
        pointers for one another's."""
        if is_ours(self):
            return _cudagraph_trees.storage_ptr(self.untyped_storage()._cdata) + self.storage_offset() * (
                self.element_size()
            )
        return original_data_ptr(self)

    p.set(torch.Tensor, "data_ptr", data_ptr)
    p.set(
        torch._C, "_group_tensors_by_device_and_dtype", _grouped(torch._C._group_tensors_by_device_and_dtype)
    )
    p.set(torch, "Generator", generator)
    p.set(torch._C, "Generator", generator)  # where a pickle of `type(g)` looks it up
    p.set(torch, "Stream", _generic(torch.Stream, Stream))
    p.set(torch, "Event", _generic(torch.Event, Event))
    p.set(torch.Tensor, "record_stream", _record_stream(torch.Tensor.record_stream, cap))
    mha = torch.nn.MultiheadAttention
    layer = torch.nn.TransformerEncoderLayer
    p.set(mha, "forward", _attention.mha_forward(mha.forward, cap))
    p.set(layer, "forward", _attention.encoder_layer_forward(layer.forward, cap))
    encoder = torch.nn.TransformerEncoder
    p.set(encoder, "forward", _attention.encoder_forward(encoder.forward, cap))
    p.set(
        torch.overrides,
        "has_torch_function",
        _attention.has_torch_function(torch.overrides.has_torch_function),
    )
    p.set(F, "has_torch_function_variadic", _normalize_unmoded(F.has_torch_function_variadic))
    # `clip_grad_norm_` / `clip_grad_value_` ask `_has_foreach_support(tensors, device)` with the
    # device C++ grouping read (meta): the GPU's is cuda, which takes the foreach kernels
    from torch.nn.utils import clip_grad

    for name in ("_has_foreach_support", "_device_has_foreach_support"):
        p.set(clip_grad, name, _kernels.foreach_support(getattr(clip_grad, name)))
    patch_tensor(p)
    _patch_accelerator(p, world)
    p.set(torch._C, "_scatter", _scatter)  # nn.DataParallel's input scatter
    _patch_constraint_checks(p, cap)
    # torch.jit.optimize_for_inference's CUDA conv-add-relu fusion (its filter reads the twin's
    # constants as meta tensors in C++)
    p.set(
        torch._C,
        "_jit_pass_optimize_for_inference",
        _jit.optimize_for_inference_pass(torch._C._jit_pass_optimize_for_inference),
    )
    # a scripted function's call: the profiling executor's levels and NNC's fused kernels (the
    # real executor never fuses the twin's meta tensors)
    p.set(
        torch.jit.ScriptFunction,
        "__call__",
        _jit.script_function_call(torch.jit.ScriptFunction.__call__, cap),
    )
    p.set(torch._C, "_jit_set_fusion_strategy", _jit.set_fusion_strategy(torch._C._jit_set_fusion_strategy))
    p.set(torch.UntypedStorage, "resize_", _storage_resize(torch.UntypedStorage.resize_, cap))
    p.set(torch.UntypedStorage, "device", property(_storage_device(torch._C.StorageBase.device.__get__, cap)))
    p.set(
        torch.UntypedStorage,
        "is_cuda",
        property(_storage_is_cuda(torch.UntypedStorage.is_cuda.fget, cap, False)),
    )
    p.set(torch.TypedStorage, "device", property(_typed_storage_device(torch.TypedStorage.device.fget, cap)))
    p.set(
        torch.TypedStorage, "is_cuda", property(_storage_is_cuda(torch.TypedStorage.is_cuda.fget, cap, True))
    )
    p.set(torch.UntypedStorage, "__getitem__", _storage_getitem(torch.UntypedStorage.__getitem__, cap))
    for name in ("share_memory_", "is_shared"):
        p.set(torch.UntypedStorage, name, _storage_shared(getattr(torch.UntypedStorage, name), cap))
    restored: dict = {}
    p.set(torch.storage, "_to", _storage_to(torch.storage._to, cap, restored))
    p.set(torch._utils, "_rebuild_tensor", _rebuild_tensor(torch._utils._rebuild_tensor, cap, restored))
    p.set(torch.UntypedStorage, "_write_file", _storage_write_file(torch.UntypedStorage._write_file, cap))
    p.set(torch.serialization, "location_tag", _location_tag(torch.serialization.location_tag, cap))
    pickled: dict = {}
    p.set(torch._utils, "_get_obj_state", _obj_state(torch._utils._get_obj_state, pickled))
    p.set(torch.UntypedStorage, "cpu", _storage_cpu(torch.UntypedStorage.cpu, cap, pickled))
    p.set(cuda.memory, "mem_get_info", mem_get_info)
    p.set(cuda, "mem_get_info", mem_get_info)
    p.set(cuda.memory, "_lazy_init", lambda *a, **k: None)
    p.set(cuda.memory, "is_initialized", lambda: True)
    # backward passes that record a graph run on the engine's device thread, as on the GPU
    from . import _device_thread

    cap.device_thread = _device_thread.DeviceThread(cap)
    _device_thread.patch(cap, p, cap.device_thread)
    _autograd_streams.patch(cap, p)
    _dataloader.patch(cap, p)
    _processes.patch(cap, p)
    _triton.patch(cap, p)
    _extensions.patch(p)
    _legacy.patch(p)
    from . import _nested

    _nested.patch(cap, p)
    from . import _dlpack

    _dlpack.patch(p)
    _threads.patch(cap, p)
    _profiler_without_gpu_events(p)
    from torch.utils import checkpoint as _ckpt

    p.set(
        _ckpt,
        "_checkpoint_without_reentrant_generator",
        _recompute_under_modes(_ckpt._checkpoint_without_reentrant_generator, cap),
    )
    p.set(_ckpt.CheckpointFunction, "backward", _reentrant_backward_under_mode(_ckpt.CheckpointFunction, cap))
    njt = importlib.import_module("torch.nested._internal.nested_tensor")
    p.set(njt, "jagged_from_list", _under_function_mode(njt.jagged_from_list, cap))
    masked = importlib.import_module("torch.masked.maskedtensor.core")
    own = vars(masked.MaskedTensor)["__torch_function__"].__func__
    p.set(masked.MaskedTensor, "__torch_function__", classmethod(_under_function_mode(own, cap)))
    return p


def _under_function_mode(real, cap):
    """`real` under the capture's function mode, for torch's Python that runs where the program's
    call has the mode popped (inside the mode's own call of the function) and makes device tensors:
    a factory for `cuda` there (`torch.tensor(..., device=...)`) initializes the host's CUDA in C++
    before any dispatch (torch/csrc/utils/tensor_new.cpp) ("Found no NVIDIA driver"), where the
    mode builds it on the host and copies it. `jagged_from_list` (torch/nested/_internal/
    nested_tensor.py): a jagged tensor's `clone` to contiguous (`torch.nested.narrow(...)
    .contiguous()`, ops.py `clone_default`) calls it inside the op's dispatch, and its
    `torch.tensor(lengths, device=values.device)`. `MaskedTensor.__torch_function__`
    (torch/masked/maskedtensor/core.py): its reductions run torch/masked/_ops.py, whose
    `_reduction_identity` makes `torch.tensor(0, dtype=dtype, device=device)` (`mt.sum(dim=1)`,
    blind293/kh04)."""

    def under_mode(*args, **kwargs):
        mode = cap._modes[0]
        stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
        if any(m is mode for m in stack):
            return real(*args, **kwargs)
        torch._C._push_on_torch_function_stack(mode)
        try:
            return real(*args, **kwargs)
        finally:
            torch._C._pop_torch_function_stack()

    return under_mode


def _reentrant_backward_under_mode(cls, cap):
    """A reentrant checkpoint's recompute (`CheckpointFunction.backward`, torch/utils/checkpoint.py:
    `ctx.run_function(*detached_inputs)` under enable_grad) runs inside the backward too, with no
    torch-function mode on: its backward runs under the capture's function mode, as
    `_recompute_under_modes` does for the non-reentrant recompute."""
    real = cls.backward

    def backward(ctx, *args):
        mode = cap._modes[0]
        stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
        if any(m is mode for m in stack):
            return real(ctx, *args)
        torch._C._push_on_torch_function_stack(mode)
        try:
            return real(ctx, *args)
        finally:
            torch._C._pop_torch_function_stack()

    return staticmethod(backward)


def _recompute_under_modes(real, cap):
    """A non-reentrant checkpoint's recompute runs in an unpack hook, inside the backward, where no
    torch-function mode is on (the engine does not carry that stack), so the twin's function-level
    rules (`_kernels.FUNCTIONS`: `F.rms_norm`'s fused CUDA kernel, which a meta tensor decomposes)
    would miss the recomputed calls and their saved tensors would differ from the forward's
    (torch/utils/checkpoint.py's `check_recomputed_tensors_match`); on the GPU the recompute calls
    the same kernels as the forward. The recompute context (`context_fn`'s second) enters the
    capture's function mode for the recompute. It holds the recompute context as PyTorch's
    `recompute_fn` closure does, for the checkpoint frame's life: a selective checkpoint's cache
    (its `_CachedTorchDispatchMode`'s storage, with the saved outputs the recompute did not reach)
    dies with the frame, at the end of the region's backward, not when the recompute ends."""

    class UnderMode:
        def __init__(self, recompute_context):
            self.recompute_context = recompute_context
            self.pushed = []

        def __enter__(self):
            self.recompute_context.__enter__()
            mode = cap._modes[0]
            stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
            pushed = not any(m is mode for m in stack)
            if pushed:
                torch._C._push_on_torch_function_stack(mode)
            self.pushed.append(pushed)

        def __exit__(self, *exc):
            if self.pushed.pop():
                torch._C._pop_torch_function_stack()
            return self.recompute_context.__exit__(*exc)

    def generator(fn, preserve_rng_state, context_fn, *args, **kwargs):
        if torch.utils.checkpoint._is_compiling(fn, args, kwargs):
            # AOTAutograd traces the region (a `tag_activation_checkpoint` under torch.compile):
            # its recompute is traced, not run on the twin, and PyTorch requires `context_fn`'s
            # two contexts to be TorchDispatchModes there
            return real(fn, preserve_rng_state, context_fn, *args, **kwargs)

        def contexts():
            forward_context, recompute_context = context_fn()
            return forward_context, UnderMode(recompute_context)

        return real(fn, preserve_rng_state, contexts, *args, **kwargs)

    return generator


def _traced_as_pytorch(stand_in, original):
    """`stand_in` (the twin's `torch.nn.functional` function), or PyTorch's `original` while
    dynamo traces a compiled region (`_compile`) or `torch.jit.trace` records (its node is
    `original`'s op)."""

    def run(*args, **kwargs):
        if torch.compiler.is_dynamo_compiling() or torch._C._get_tracing_state() is not None:
            return original(*args, **kwargs)
        # the arguments die left to right, positional then keyword, as CPython's caller of the
        # builtin frees them once it returns (ceval's CALL); the `*args` tuple would free them
        # right to left (blind91/cm06: `F.linear(x, qw.rsample(), qb.rsample())` frees its sampled
        # weight before its bias on the H200)
        args = list(args)
        try:
            return stand_in(*args, **kwargs)
        except Exception as e:
            # the stand-in is C++ on the GPU, whose temporaries (autocast's casts) die as an error
            # unwinds (out of memory too): its frames keep their lines, not their tensors
            from ._capture import _forget_frames

            _forget_frames(e.__traceback__)
            del e
            raise
        finally:
            for i in range(len(args)):
                args[i] = None
            for k in kwargs:
                kwargs[k] = None

    run.__name__ = original.__name__
    return _scripted_as(run, original)


def _scripted_as(wrapper, original):
    """`torch.jit.script` compiles `original` where a scripted function calls `wrapper`: the same
    builtin op (`torch.jit._builtins`), or `original`'s source (`_script_impl` follows
    `__original_fn` of a `__script_if_tracing_wrapper`)."""
    from torch.jit import _builtins

    name = _builtins._find_builtin(original)
    if name is not None:
        # keyed by id: the entry goes with the wrapper, before its id can be reused
        _builtins._register_builtin(wrapper, name)
        weakref.finalize(wrapper, _builtins._get_builtin_table().pop, id(wrapper), None)
    else:
        setattr(wrapper, "__script_if_tracing_wrapper", True)
        setattr(wrapper, "__original_fn", original)
    return wrapper


def _record_stream(original, cap):
    """`Tensor.record_stream(stream)`: the C++ binding takes only a `torch.Stream`, not the twin's
    stand-in, so the twin's allocator is told here (`recordStream`: freed, the block waits for the
    stream's work, and its requested and active bytes stay counted until then). A simulated tensor
    with no block (empty, or uncached by `caching_allocator_enable(False)`) records nothing:
    `recordStream` returns for a null pointer or another deleter than `local_raw_delete`."""

    def record_stream(self, stream):
        if not is_ours(self):
            return original(self, stream)
        handle = cap.handle_of(self)
        if handle is not None:
            cap.device.record_stream(handle, getattr(stream, "stream_id", 0))
        return None

    return record_stream


def _generator(original):
    """`torch.Generator(device="cuda")`: a host generator (the twin draws random values on the host)
    that reads as the simulated device's; every generator, made before or after, is still an
    instance of the patched class."""

    class _Meta(type(original)):
        def __instancecheck__(cls, obj):
            return isinstance(obj, original)

    class Generator(original, metaclass=_Meta):
        def __new__(cls, device="cpu"):
            device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
            g = super().__new__(cls, device="cpu" if device.type == "cuda" else device)
            g._simulated = device.type == "cuda"
            # `make_generator<CUDAGeneratorImpl>(device.index())` (torch/csrc/Generator.cpp): "cuda"
            # keeps no index, so its device reads `cuda` (the H100, rp64's probe), "cuda:0" `cuda:0`
            g._cuda_device = device if g._simulated else None
            # its Philox seed and offset (`_philox`), which the simulated device's draws take
            g._philox = _philox.Philox() if g._simulated else None
            return g

        @property
        def device(self):
            return self._cuda_device if self._simulated else super().device

        def __reduce__(self):
            """`THPGenerator_reduce` (torch/csrc/Generator.cpp): the class, the device and (initial
            seed, offset, state), which `__setstate__` sets again, so a deep copy, copy or pickle of
            a CUDA generator is a CUDA generator with its seed and offset."""
            if self._philox is None:
                return super().__reduce__()
            return (type(self), (self.device,), (self.initial_seed(), self.get_offset(), self.get_state()))

        def __setstate__(self, state):
            if self._philox is None:
                return super().__setstate__(state)
            seed, offset, rng_state = state
            self.manual_seed(seed)
            if offset is not None:
                self.set_offset(offset)
            self.set_state(rng_state)

        def manual_seed(self, seed):
            if self._philox is not None:
                self._philox.manual_seed(seed)
            return super().manual_seed(seed)

        def seed(self):
            if self._philox is None:
                return super().seed()
            super().manual_seed(self._philox.seed_nondeterministic())
            return self._philox.seed

        def initial_seed(self):
            return super().initial_seed() if self._philox is None else self._philox.seed

        def get_state(self):
            return super().get_state() if self._philox is None else self._philox.get_state()

        def set_state(self, new_state):
            if self._philox is None:
                return super().set_state(new_state)
            self._philox.set_state(new_state)
            return self

        def get_offset(self):
            return super().get_offset() if self._philox is None else self._philox.offset

        def set_offset(self, offset):
            if self._philox is None:
                return super().set_offset(offset)
            self._philox.offset = int(offset)
            return self

        def clone_state(self):
            """`CUDAGeneratorImpl::clone_state`: a new generator with a copy of this one's seed and
            offset (AOTAutograd's graph-safe RNG states for the random ops a checkpointed region
            recomputes, `initialize_rng_states`, clone the default generator's)."""
            if self._philox is None:
                return super().clone_state()
            g = Generator(self.device)
            g._philox.seed, g._philox.offset = self._philox.seed, self._philox.offset
            return g

        def graphsafe_get_state(self):
            """`graphsafe_get_state`: a generator sharing this one's state."""
            if self._philox is None:
                return super().graphsafe_get_state()
            g = Generator(self.device)
            g._philox = self._philox
            return g

        def graphsafe_set_state(self, state):
            """`graphsafe_set_state`: this generator draws from `state`'s state from now on."""
            if self._philox is None:
                return super().graphsafe_set_state(state)
            self._philox = state._philox
            return self

    # `torch.Generator` is `torch._C.Generator` (`<class 'torch._C.Generator'>`)
    return _named_as("torch._C", "Generator")(Generator)


def _normalize_unmoded(original):
    """`torch.nn.functional.has_torch_function_variadic`, false for `F.normalize`'s own check when only
    the capture's torch-function mode is active and its operands are plain tensors: the GPU's process
    runs the body with no mode, so a temporary passed as `input` dies with the function's frame,
    before its `denom` (a frame's locals are released in order). Through the mode's
    `handle_torch_function` the tuples of the frames between hold `input` until after the body's
    locals are gone (blind40/an04's and blind127/dw01's H200 histories: spectral norm's power
    iteration frees `mv`'s result, then the norm; the twin freed them the other way round)."""
    codes = (F.normalize.__code__,)

    def check(*args):
        if (
            # (dynamo first: it cannot trace `sys._getframe`, which broke a `fullgraph=True` trace
            # of a checkpointed block's RMSNorm, blind254/iu03)
            not torch.compiler.is_dynamo_compiling()
            and sys._getframe(1).f_code in codes
            and torch._C._len_torch_function_stack() == 1
            and all(a is None or type(a) in (torch.Tensor, torch.nn.Parameter) for a in args)
        ):
            return False
        return original(*args)

    # scripted functionals (`F.batch_norm`) compile the check to `aten::has_torch_function`, as
    # torch/jit/_script.py registers PyTorch's own
    return _scripted_as(check, original)


def _generic(original, stand_in):
    """`torch.Stream()` / `torch.Event()`, the device-generic classes (transformers' offloaded
    cache makes its prefetch stream so): on the current accelerator, the simulated CUDA device
    while capturing, the twin's stand-in; on another device the real class. Both read as
    instances of the patched class."""

    class _Meta(type(original)):
        def __instancecheck__(cls, obj):
            return isinstance(obj, (original, stand_in))

    class Generic(original, metaclass=_Meta):
        def __new__(cls, device=None, *args, **kwargs):
            kind = "cuda" if device is None or isinstance(device, int) else torch.device(device).type
            if kind == "cuda":
                return stand_in(*args, **kwargs)
            return original(device, *args, **kwargs)

    Generic.__name__ = Generic.__qualname__ = original.__name__
    Generic.__module__ = "torch"
    return Generic


def _grouped(original):
    """`_group_tensors_by_device_and_dtype` (ForeachUtils.h) where one index mixes DTensors (FSDP2's
    parameters, gradients and states: wrappers on `cuda`) with plain simulated tensors (a fused
    optimizer's `step`, made on `p.device`: a meta tensor underneath). On a GPU both are `cuda:0`
    and group together; the C++ check sees cuda and meta. Grouped as the C++ code groups: by the
    first list's (device, dtype), every list's tensors at the same indices (empty lists stay empty)."""

    def group(tensorlistlist, with_indices=False):
        try:
            return original(tensorlistlist, with_indices)
        except RuntimeError:
            tensors = [t for tl in tensorlistlist for t in tl if t is not None]
            if not tensors or any(t.device.type != "cuda" for t in tensors):
                raise
        groups: dict = {}
        for i, t in enumerate(tensorlistlist[0]):
            lists, indices = groups.setdefault((t.device, t.dtype), ([[] for _ in tensorlistlist], []))
            for j, tl in enumerate(tensorlistlist):
                if tl:
                    lists[j].append(tl[i])
            if with_indices:
                indices.append(i)
        return groups

    def keyed(tensorlistlist, with_indices=False):
        # the C++ grouping keys by the device underneath, meta for simulated tensors; on a GPU the
        # key is their `cuda:0`, and callers move tensors to it (torch.optim.swa_utils'
        # `self.n_averaged.to(device)`, a host tensor: an 8-byte copy per group, blind173/fq05)
        groups = group(tensorlistlist, with_indices)
        if not any(device.type == "meta" for device, _ in groups):
            return groups
        out = {}
        for (device, dtype), (lists, indices) in groups.items():
            first = next((t for tl in lists for t in tl if t is not None), None)
            if device.type == "meta" and first is not None:
                device = first.device
            out[(device, dtype)] = (lists, indices)
        return out

    return keyed


def _patch_constraint_checks(p: _Patch, cap) -> None:
    """`torch.distributions.constraints`' checks of values the twin does not compute pass, as
    `torch._is_all_true` does (a program whose checks pass on the GPU passes them here;
    docs/run.md): the check's ops run as on the GPU (their memory counts), the bools it reads
    inside read True, and a result without values carries True (transformers'
    `positive_definite.check(covariance).all()` when it resizes embeddings, blind35/ai02)."""
    from torch.distributions import constraints

    for cls in vars(constraints).values():
        if isinstance(cls, type) and issubclass(cls, constraints.Constraint) and "check" in vars(cls):
            p.set(cls, "check", _passing_check(vars(cls)["check"], cap))


def _passing_check(original, cap):
    def check(self, value):
        if not is_ours(value) or (_value(value) is not None and not _assumed(value)):
            return original(self, value)
        cap.checks_pass += 1
        try:
            out = original(self, value)
        finally:
            cap.checks_pass -= 1
        if is_ours(out) and out.dtype == torch.bool and (_value(out) is None or _assumed(out)):
            _set_value(out, torch.ones(out.shape, dtype=torch.bool))
        return out

    return check


def _scatter(tensor, devices, chunk_sizes=None, dim=0, streams=None):
    """`torch._C._scatter` (torch/csrc/cuda/comm.cpp `scatter`, under `nn.DataParallel`'s input
    scatter): the tensor split into one chunk per device, each moved (`to`, non-blocking, on the
    device's stream where one is given) only where its device is not the tensor's, so a single
    device's chunk is the tensor itself. The C++ reads the simulated tensor's device as meta and
    would copy it."""
    if chunk_sizes is not None:
        chunks = tensor.split_with_sizes(list(chunk_sizes), dim)
    else:
        chunks = tensor.chunk(len(devices), dim)
    out = []
    for i, (chunk, device) in enumerate(zip(chunks, devices, strict=False)):
        if device != tensor.get_device():
            stream = streams[i] if streams else None
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                chunk = chunk.to(torch.device("cuda", device), non_blocking=True)
        out.append(chunk)
    return out


def _patch_accelerator(p: _Patch, world: int) -> None:
    """`torch.accelerator` (the device-generic API transformers and FSDP2's default mesh use) reads
    the C++ accelerator, which is the CPU on a machine without a GPU: while capturing it is the
    simulated CUDA device, and its memory functions are `torch.cuda`'s (answered by the twin)."""
    import torch.accelerator as acc
    from torch.accelerator import memory as acc_memory

    cuda = torch.device("cuda")
    p.set(torch._C, "_get_accelerator", lambda: cuda)
    p.set(torch._C, "_accelerator_getAccelerator", lambda: cuda)
    # `with torch.accelerator.device_index(i)` (DDP moving its inputs to `cuda:LOCAL_RANK`): the
    # one simulated device stays current, as under `torch.cuda.device(i)`
    p.set(torch._C, "_accelerator_exchangeDevice", lambda device: -1 if device < 0 else 0)
    p.set(torch._C, "_accelerator_maybeExchangeDevice", lambda device: -1 if device < 0 else 0)
    simple = {
        "current_accelerator": lambda check_available=False: cuda,
        "is_available": lambda: True,
        "device_count": lambda: world,
        "current_device_index": lambda: 0,
        "current_device_idx": lambda: 0,
        "set_device_index": lambda device: None,
        "set_device_idx": lambda device: None,
        "synchronize": lambda device=None: None,
        "current_stream": lambda device=None: torch.cuda.current_stream(),
    }
    for name, fn in simple.items():
        if hasattr(acc, name):
            p.set(acc, name, fn)
    memory = {
        "memory_stats": lambda device_index=None, /: torch.cuda.memory_stats(),
        "memory_allocated": lambda device_index=None, /: torch.cuda.memory_allocated(),
        "max_memory_allocated": lambda device_index=None, /: torch.cuda.max_memory_allocated(),
        "memory_reserved": lambda device_index=None, /: torch.cuda.memory_reserved(),
        "max_memory_reserved": lambda device_index=None, /: torch.cuda.max_memory_reserved(),
        "reset_peak_memory_stats": lambda device_index=None, /: torch.cuda.reset_peak_memory_stats(),
        "reset_accumulated_memory_stats": lambda device_index=None, /: (
            torch.cuda.reset_accumulated_memory_stats()
        ),
        "empty_cache": lambda: torch.cuda.empty_cache(),
        "get_memory_info": lambda device_index=None, /: torch.cuda.mem_get_info(),
    }
    for name, fn in memory.items():
        for mod in (acc, acc_memory):
            if hasattr(mod, name):
                p.set(mod, name, fn)


def _storage_shared(original, cap):
    """`UntypedStorage.share_memory_` and `is_shared` of a simulated storage: a CUDA storage is
    shared as it is (torch/storage.py `share_memory_`: "CUDA ... doesn't use POSIX shared memory";
    `THPStorage_isShared`: true for CUDA), where the host's would move a meta storage to shared
    memory and raise."""

    def shared(self, *args, **kwargs):
        if self._cdata in cap.storages:
            return self if original.__name__ == "share_memory_" else True
        return original(self, *args, **kwargs)

    return shared


#: the files whose reads of a storage's device see the meta storage the twin models: torch's own
#: (storage.py's `clone`, `_to`, `__str__`, torch.load's `_rebuild_tensor`, `Tensor.__deepcopy__`
#: build on `storage.device`, which the twin's patches model on the meta device) and the twin's
_STORAGE_INSIDERS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
)


def _simulated_storage(storage, cap) -> bool:
    """Whether `storage` is a simulated one read from outside the twin's kernels (as `is_ours`
    reads a tensor: PyTorch's meta kernels see the meta device)."""
    return cap.active and storage._cdata in cap.storages and not _tensor_mod._kernel_here()


def _program_reads(storage, cap) -> bool:
    """Whether the caller two frames up, outside torch and the twin (the program, a library), reads
    `storage` (an untyped one), a simulated storage: it reads as on the GPU."""
    caller = sys._getframe(2).f_code.co_filename
    return not caller.startswith(_STORAGE_INSIDERS) and _simulated_storage(storage, cap)


def _storage_device(original, cap):
    """`UntypedStorage.device` of a simulated storage, read by the program: the device its tensors
    read, cuda:0 (H100, oe81_api_corners_probe_h100.out: `x.untyped_storage().device` of a CUDA
    tensor is cuda:0, `is_cuda` True; the twin's read meta). Torch's own Python keeps reading the
    meta device (`_STORAGE_INSIDERS`)."""

    def device(self):
        if _program_reads(self, cap):
            return CUDA0
        return original(self)

    return device


def _storage_is_cuda(original, cap, typed: bool):
    """`UntypedStorage.is_cuda` / `TypedStorage.is_cuda` (torch/storage.py reads `device.type`) of a
    simulated storage, read by the program: True, as `_storage_device`."""

    def is_cuda(self):
        if _program_reads(self._untyped_storage if typed else self, cap):
            return True
        return original(self)

    return is_cuda


def _typed_storage_device(original, cap):
    """`TypedStorage.device` (torch/storage.py: its untyped storage's) of a simulated storage, read
    by the program: cuda:0, as `_storage_device`."""

    def device(self):
        if _program_reads(self._untyped_storage, cap):
            return CUDA0
        return original(self)

    return device


def _storage_getitem(original, cap):
    """`UntypedStorage[i]` of a simulated storage: one byte copied from the device (Storage.cpp
    `storage_get`: `self_t[idx].item()` of a uint8 tensor over the storage, a copy to the host that
    allocates nothing on the device). The twin keeps values by tensor, not by storage: it reads the
    byte as zero, with a warning (H100, oe81_api_corners_probe_h100.out: byte 4 of `arange(6.0)`'s
    storage, 0). A slice is the host's (a storage of the slice's bytes)."""

    def getitem(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], int) and _simulated_storage(self, cap):
            index, n = args[0], self.nbytes()
            if index < 0:
                index += n
            if not 0 <= index < n:
                # THPStorage_get's IndexError, with the index wrapped
                raise IndexError(f"index {index} out of range for storage of size {n}")
            from ._capture import _user_site

            site = _user_site()
            cap.warn_once(
                "storage-byte:" + site,
                f"{site}: reads a byte of a CUDA storage, whose values the twin keeps by tensor, not by "
                "storage: it reads zero",
            )
            return 0
        return original(self, *args, **kwargs)

    return getitem


def _storage_resize(original, cap):
    """`UntypedStorage.resize_` of a simulated storage (FSDP2's `free_storage` / `alloc_storage`
    of the unsharded parameters and gradients): the caching allocator frees the storage's block
    and, for a new size, allocates another (`resize_bytes_cuda`)."""

    def resize_(self, size):
        entry = cap.storages.get(self._cdata)
        out = original(self, size)
        if entry is None or not cap.active:
            return out
        handle, ref = entry
        # the new block first (the old bytes are copied into it), then the old one freed
        new = cap._malloc_handle(int(size), "aten::resize_", "output") if size else None
        if handle is not None:
            cap.free(handle)
        cap.storages[self._cdata] = (new, ref)
        return out

    return resize_


def _profiler_without_gpu_events(p: _Patch) -> None:
    """`torch.profiler.profile(activities=[CPU, CUDA])` (or `use_device="cuda"`) profiles the host
    side only. This machine's Kineto has no CUPTI device (`_supported_activities()` is CPU alone),
    so PyTorch falls back to recording CUDA events around each op (`KINETO_GPU_FALLBACK`,
    torch/autograd/profiler.py), which ask the real driver: a warning and a C++ trace per op
    ("Failed to record CUDA event"). The twin runs no kernels to time, so the profiler records the
    host ops alone (`KINETO`). Kineto's own error on starting without a GPU ("gpuGetDeviceCount
    failed with code 35", kineto's DeviceProperties.cpp), which the GPU's run does not print, is
    silenced by its log level, where the program sets none (`KINETO_LOG_LEVEL`, read when Kineto
    starts: 5 is above its ERROR level)."""
    from torch.autograd import profiler as _profiler

    real_init = _profiler.profile.__init__

    def __init__(self, *args, **kwargs):
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        real_init(self, *args, **kwargs)
        if self.use_device == "cuda" and self.profiler_kind == _profiler.ProfilerState.KINETO_GPU_FALLBACK:
            self.profiler_kind = _profiler.ProfilerState.KINETO

    p.set(_profiler.profile, "__init__", __init__)


#: the largest host storage (bytes) whose values a storage restored to the GPU keeps for the
#: tensors torch.load rebuilds over it (`_rebuild_tensor`): `_capture.VALUE_LIMIT` elements of 8
#: bytes; the twin's own cost bound, not a PyTorch constant
_RESTORED_VALUES_BYTES = (1 << 16) * 8


def _storage_to(original, cap, restored):
    """`UntypedStorage.to(device=cuda)` / `.cuda()` (torch/_utils.py `_to`), which `torch.load` calls
    for each storage tagged "cuda:N" or mapped to the GPU (serialization.py `_deserialize`): a new
    device storage of the source's bytes (`torch.UntypedStorage(self.size(), device=device)`, one
    caching-allocator block), then the copy into it; a simulated storage is already on the GPU.
    A small host storage's bytes are the values the copy holds: `restored` keeps them, by the new
    storage, for the tensors torch.load rebuilds over it (`_rebuild_tensor`)."""

    def to(self, device, non_blocking=False):
        if not cap.active or device.type != "cuda" or self.is_sparse:
            return original(self, device, non_blocking)
        if self._cdata in cap.storages:
            return self
        new = torch.empty(self.nbytes(), dtype=torch.uint8, device=device).untyped_storage()
        # the legacy format restores a storage before reading its bytes (`_torch_load_uninitialized`)
        if self.nbytes() <= _RESTORED_VALUES_BYTES and not getattr(self, "_torch_load_uninitialized", False):
            key = new._cdata
            restored[key] = (self, weakref.ref(new, lambda _r, key=key: restored.pop(key, None)))
        return new

    return to


def _rebuild_tensor(original, cap, restored):
    """torch.load's tensor over a restored storage (torch/_utils.py `_rebuild_tensor`: `set_` of
    the storage at the saved offset, sizes and strides). Over a storage restored to the GPU from
    the host (`_storage_to`) a small tensor carries the values that were copied: the optimizer's
    `step` counts of a checkpoint read back with `map_location="cuda"`, which Adam's
    `_get_value(step)` reads (`.item()`) when the optimizer is neither fused nor capturable."""

    def rebuild(storage, storage_offset, size, stride):
        t = original(storage, storage_offset, size, stride)
        if not restored or not cap.active:
            return t
        untyped = getattr(storage, "_untyped_storage", storage)
        held = restored.get(getattr(untyped, "_cdata", None))
        if held is None or held[1]() is None or t.numel() > (1 << 16):
            return t
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            host = torch.empty((0,), dtype=t.dtype).set_(held[0], storage_offset, size, stride)
        _set_value(t, host)
        return t

    return rebuild


def _storage_write_file(original, cap):
    """`UntypedStorage._write_file` of a simulated storage (torch.save's legacy format,
    `_use_new_zipfile_serialization=False`): the GPU copies the storage's bytes to the host with
    `Tensor.to(kCPU)` and writes those (serialization.cpp `THPStorage_writeFileRaw`), no device
    block; the twin writes its host copy of the storage, as the zipfile format's `storage.cpu()`."""

    def _write_file(self, *args, **kwargs):
        if cap.active and self._cdata in cap.storages:
            return original(self.cpu(), *args, **kwargs)
        return original(self, *args, **kwargs)

    return _write_file


def _storage_cpu(original, cap, pickled):
    """`UntypedStorage.cpu()` of a simulated storage, which torch.save writes (serialization.py
    `_save`: `storage.cpu()` of each storage not on the host; the legacy format's `_write_file`): the
    host copy holds the values that the tensors pickled over it carry (`_obj_state`), as the GPU's
    copy holds the device's bytes; the rest reads as zeros, as any copy of values the twin does not
    compute. A fused or capturable optimizer's `step` counts on the GPU come back with their values."""

    def cpu(self):
        entry = pickled.pop(getattr(self, "_cdata", None), None) if cap.active else None
        if entry is None or entry[0]() is None:
            return original(self)
        nbytes = self.nbytes()
        whole = any(
            offset == 0 and v.numel() * v.element_size() == nbytes and stride == contiguous_strides(size)
            for offset, size, stride, v in entry[1]
        )
        # a tensor over all of the storage holds every byte: no byte the twin does not know is read
        host = torch.zeros(nbytes, dtype=torch.uint8).untyped_storage() if whole else original(self)
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            for offset, size, stride, v in entry[1]:
                torch.empty((0,), dtype=v.dtype).set_(host, offset, size, stride).copy_(v)
        return host

    return cpu


def _location_tag(original, cap):
    """`torch.save`'s location of a storage (serialization.py `location_tag`): a simulated storage
    is a CUDA one, tagged "cuda:0" as `_backend_tag` tags it on the GPU, so that `torch.load`
    with the default map_location puts it back on the GPU."""

    def location_tag(storage):
        untyped = getattr(storage, "_untyped_storage", storage)
        if cap.active and getattr(untyped, "_cdata", None) in cap.storages:
            return "cuda:0"
        return original(storage)

    return location_tag


def _obj_state(original, pickled):
    """A tensor's pickled Python state (torch/_utils.py `_get_obj_state`, which `Tensor.__reduce_ex__`
    saves beside the storage) without the twin's own attributes (`_vs_val`, `_vs_assumed`): on the
    GPU a plain tensor has none, so torch.save writes no second storage for its values (a CPU one
    that `map_location="cuda"` would put on the GPU, blind134/ed01). A simulated tensor that
    carries values notes them in `pickled`, by its storage, for the storage's host copy that
    torch.save writes next (`_storage_cpu`)."""

    def _get_obj_state(obj):
        state = original(obj)
        if not isinstance(obj, torch.Tensor):
            return state
        d = state[0] if isinstance(state, tuple) else state
        if isinstance(d, dict) and any(k.startswith("_vs_") for k in d):
            d = {k: v for k, v in d.items() if not k.startswith("_vs_")}
            state = (d, *state[1:]) if isinstance(state, tuple) else d
        v = _value(obj)
        if v is not None and is_ours(obj):
            storage = obj.untyped_storage()
            key = storage._cdata
            entry = pickled.get(key)
            if entry is None:
                entry = pickled[key] = (weakref.ref(storage, lambda _r, key=key: pickled.pop(key, None)), [])
            entry[1].append((obj.storage_offset(), tuple(obj.shape), obj.stride(), v))
        return state

    return _get_obj_state


#: TunableOp's settings the twin reads: whether `set_numerical_check_tolerances` turned the
#: numerical check on
TUNABLE_STATE = {"numerics": False}


def _tunableop_patch(p, props) -> None:
    """TunableOp's calls that reach the device (aten/src/ATen/cuda/tunable/Tunable.cpp): a results
    filename with the device ordinal inserted (`SetFilename(..., insert_device_ordinal)` reads
    `c10::cuda::current_device()`: "%d" replaced, else the ordinal put before the last '.', else
    appended), and the rotating buffer size, which `GetRotatingBufferSize` returns in bytes: the
    device's L2 cache size (`getCurrentDeviceProperties()->l2CacheSize`) while the size set in MB
    (`SetRotatingBufferSize`, size * MB) or PYTORCH_TUNABLEOP_ROTATING_BUFFER_SIZE is negative or
    unset. The state lives here, the C++ context (whose defaults need no device) keeps the rest."""
    C = torch._C
    set_filename = C._cuda_tunableop_set_filename
    state = {"rotating": -1}

    def tunable_set_filename(filename, insert_device_ordinal=False):
        if insert_device_ordinal and filename:
            device = str(torch.cuda.current_device())
            if "%d" in filename:
                filename = filename.replace("%d", device, 1)
            elif "." in filename:
                dot = filename.rfind(".")
                filename = filename[:dot] + device + filename[dot:]
            else:
                filename = filename + device
        return set_filename(filename, False)

    def tunable_set_rotating(size):
        state["rotating"] = int(size) * 1024 * 1024
        return C_set_rotating(size)

    def tunable_get_rotating():
        env = os.environ.get("PYTORCH_TUNABLEOP_ROTATING_BUFFER_SIZE")
        if env is not None:
            val = int(env)
            return props.L2_cache_size if val < 0 else val * 1024 * 1024
        return props.L2_cache_size if state["rotating"] < 0 else state["rotating"]

    def tunable_set_numerics(enable, atol=1e-5, rtol=1e-5):
        TUNABLE_STATE["numerics"] = bool(enable)
        return C_set_numerics(enable, atol, rtol)

    def tunable_get_results():
        # the C++ manager's (read from a file), then those the twin tuned (`Capture.tunable_copies`)
        from . import _capture

        cap = _capture.current()
        ours = (
            ()
            if cap is None
            else tuple((op, params, kernel, 0.0) for (op, params), kernel in cap.tunable_results.items())
        )
        return tuple(C_get_results()) + ours

    C_set_rotating = C._cuda_tunableop_set_rotating_buffer_size
    C_set_numerics = C._cuda_tunableop_set_numerical_check_tolerances
    C_get_results = C._cuda_tunableop_get_results
    TUNABLE_STATE["numerics"] = False
    p.set(C, "_cuda_tunableop_set_numerical_check_tolerances", tunable_set_numerics)
    p.set(C, "_cuda_tunableop_get_results", tunable_get_results)
    p.set(C, "_cuda_tunableop_set_filename", tunable_set_filename)
    p.set(C, "_cuda_tunableop_set_rotating_buffer_size", tunable_set_rotating)
    p.set(C, "_cuda_tunableop_get_rotating_buffer_size", tunable_get_rotating)
