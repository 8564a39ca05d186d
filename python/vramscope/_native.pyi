"""The Rust core (crates/py, PyO3): the twin of one CUDA device of one process.

Every figure comes from the allocator twin (crates/alloc) driven by the eager
twin's runtime (crates/engine): the caching allocator, the driver's memory
outside it (CUDA context, cuBLAS handles), the cuBLAS/cuBLASLt workspaces.
"""

import os
from collections.abc import Sequence

class OutOfMemory(Exception):
    """Raised by Device.malloc/Device.blas where the GPU would run out of memory.

    args[0] is PyTorch's own message ("CUDA out of memory. Tried to allocate ...
    Including non-PyTorch memory, this process has ... memory in use. ..."), or
    the driver's ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED ...") where a new cuBLAS
    handle finds no room.
    """

class Device:
    """One simulated GPU of one fresh process (torch.cuda.init() done, nothing allocated)."""

    def __init__(self, gpu: str = "h100", alloc_conf: str | None = None) -> None:
        """gpu: a key of gpus() ("h100", "h200", "a100-80gb", ...); alloc_conf:
        PYTORCH_CUDA_ALLOC_CONF's text (None: defaults).

        Raises ValueError naming the bad gpu or setting."""
    name: str  # get_device_name()
    total_memory: int  # get_device_properties().total_memory
    capability: tuple[int, int]
    multi_processor_count: int
    key: str  # the profile's --gpu key
    estimated_constants: list[str]  # the constants not measured on this GPU (empty: all measured)
    cudnn_tables: bool  # whether the sm_90 cuDNN workspace tables hold for this GPU
    sdpa: dict[str, bool]  # SDPA backends the capability allows: flash, efficient, cudnn, prefers_cudnn, ...
    def malloc(self, nbytes: int, stream: int, category: str, op: str, module: str) -> int:
        """Allocate through the caching allocator; returns a handle for free().

        category: one of parameter, buffer, gradient, optimizer_state,
        saved_for_backward, output, temporary, workspace, input.
        Raises OutOfMemory with PyTorch's message."""
    def free(self, handle: int) -> None: ...
    def addr_of(self, handle: int) -> int | None:
        """The device address of the live allocation `handle` (None: freed)."""
    def set_category(self, handle: int, category: str) -> None: ...
    def record_stream(self, handle: int, stream: int) -> None:
        """`Tensor.record_stream(stream)`: the allocation is used on `stream` too."""
    def blas(self, op: str, thread: str, stream: int, dtype: str, lt: bool) -> None:
        """A cuBLAS call on (thread, stream): thread "main" or "autograd";
        dtype "float32", "bfloat16", "float16", ... The first call per thread
        creates the handle (driver memory outside the allocator), the first per
        (thread, stream) allocates the cuBLAS workspace; lt=True also the
        cuBLASLt workspace (gemm_and_bias: addmm with a bias). Raises OutOfMemory."""
    def first_kernels(self) -> None:
        """The process's first kernel launch is next (driver address-space rule)."""
    def kernels_launched(self) -> None:
        """The process's first kernel has just launched, after its op's allocations: the CUDA
        context gives back its address range (driver address-space rule)."""
    def cudnn_plan(self) -> None:
        """A cuDNN plan (convolution, cuDNN attention) is built next: cuDNN's graph and engine
        libraries load where they have not (driver address-space rule 9)."""
    def cudnn_rnn(self, jit_cache_cold: bool) -> None:
        """A cuDNN RNN call (`_cudnn_rnn_flatten_weight`, `_cudnn_rnn`) is next: at the process's first,
        cuDNN's graph, ops and adv libraries and the driver's own mappings take address space, and the
        driver's PTX compiler where its JIT cache is cold (driver address-space rule 18)."""
    def sdpa_backend_choice(self) -> None:
        """scaled_dot_product_attention chooses its backend, asking cuDNN: its graph library loads
        where it has not (driver address-space rule 9)."""
    def aoti_constant_blob(self, bytes: int) -> None:
        """`cudaMalloc` of AOTInductor's constant blob, taken from the device as driver memory."""
    def aoti_constant_blob_free(self, bytes: int) -> None:
        """The blob's `cudaFree`."""
    def kernel_module(self, module: str) -> None:
        """The ATen op `op` (no overload, "pow") has launched its kernels for the first time: the
        host memory its kernel module's lazy load maps, where the twin knows it (driver
        address-space rule 12)."""
    def reduce_scratch(
        self, sizes: Sequence[int], strides: Sequence[int], reduced: Sequence[bool], elem: int, acc: int
    ) -> list[tuple[int, int]]:
        """The scratch of each 32-bit launch of a CUDA reduction (gpu_reduce_kernel):
        (global buffer bytes, semaphore bytes) of each launch, for an
        input of sizes/strides (elements) reduced over the dims marked in
        reduced, elem and acc bytes per element. Allocates nothing."""
    def cub_scratch(
        self, kind: str, n: int, t_bytes: int, value_bytes: int = 8, end_bit: int | None = None
    ) -> int | None:
        """CUB's temporary storage: kind "scan" (inclusive_scan over n items of
        t_bytes) or "sort" (radix_sort_pairs of n keys of t_bytes on end_bit bits,
        values of value_bytes); None where not measured. Allocates nothing."""
    def efficient_attention_backward_workspace(
        self, dtype: str, b: int, h: int, m: int, n: int, k: int, kv: int
    ) -> int:
        """The workspace bytes of _efficient_attention_backward (cutlassB.h) for
        batch b, heads h, query/key lengths m, n, head dims k, kv. Allocates nothing."""
    def conv_workspace(
        self,
        op: str,
        dtype: str,
        input: Sequence[int],
        weight: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        groups: int,
        transposed: bool = False,
        output_padding: Sequence[int] | None = None,
        channels_last: bool = False,
    ) -> int | None:
        """The workspace of cuDNN's plan for a convolution ("forward", "dgrad" or
        "wgrad") as aten's convolution received it, from the measured tables;
        None where the problem was not measured. Allocates nothing."""
    def conv_workspace_nearest(
        self,
        op: str,
        dtype: str,
        input: Sequence[int],
        weight: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        groups: int,
        transposed: bool = False,
        output_padding: Sequence[int] | None = None,
        channels_last: bool = False,
    ) -> tuple[int, list[int], list[int], list[int], list[int]] | None:
        """For a problem conv_workspace has no bytes for: the nearest measured
        problem's bytes, scaled (by batch and spatial size; also by channels where
        it is of the same kernel or kernel shape only), and that problem's input and
        weight sizes, padding and dilation; None where none of its kernel's shape
        was measured. Allocates nothing."""
    def memory_stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats(): every key PyTorch 2.11 reports."""
    def memory_summary(self, abbreviated: bool = False) -> str: ...
    def memory_allocated(self) -> int: ...
    def max_memory_allocated(self) -> int: ...
    def memory_reserved(self) -> int: ...
    def max_memory_reserved(self) -> int: ...
    def reset_peak_memory_stats(self) -> None: ...
    def reset_accumulated_memory_stats(self) -> None: ...
    def empty_cache(self) -> None: ...
    def empty_cache_of(self, streams: list[int]) -> None:
        """`emptyCache(mempool_id)` of a released private pool: its streams' unsplit cached blocks."""
    def begin_allocate_to_pool(self) -> None: ...
    def end_allocate_to_pool(self) -> None: ...
    def keep_through_empty_cache(self, stream: int, keep: bool) -> None:
        """Whether empty_cache leaves `stream`'s cached blocks alone (a live CUDA graph's pool)."""
    def clear_cublas_workspaces(self) -> None: ...
    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) as cudaMemGetInfo reports them."""
    def set_memory_fraction(self, fraction: float) -> None:
        """Raises ValueError outside [0, 1]."""
    def is_malloc_async(self) -> bool:
        """Whether the allocator is backend:cudaMallocAsync's (its pool's statistics)."""
    def pinned_settings(self) -> tuple[bool, int, bool, int]:
        """(pinned_use_cuda_host_register, pinned_num_register_threads,
        pinned_use_background_threads, pinned_reserve_segment_size_mb) now."""
    def record_memory_history(self, enabled: bool) -> None: ...
    def set_allocator_settings(self, env: str) -> None:
        """`torch._C._accelerator_setAllocatorSettings(env)`: the settings from here on; a bad
        string raises PyTorch's ValueError, IndexError or RuntimeError (NotImplementedError for a
        setting the twin does not model)."""
    def snapshot_pickle(self) -> bytes:
        """torch.cuda.memory._dump_snapshot's pickle of the state now (and the
        trace since record_memory_history(True)); memory_viz opens it."""

def main(argv: Sequence[str]) -> int:
    """The Rust command line (`vramscope estimate|plan|inspect|replay|...`).

    argv without the program name; returns the exit code."""

def write_html(
    snapshot: str | os.PathLike[str], out: str | os.PathLike[str], title: str | None = None
) -> None:
    """`vramscope inspect SNAPSHOT --html OUT`'s page, written with no report on stdout,
    titled `title` (default: the snapshot's path).

    Raises OSError (the error chain) when the snapshot cannot be read or OUT not written."""

def autocast_policies() -> list[tuple[str, str]]:
    """Every ATen op (`name` or `name.overload`) with an AutocastCUDA kernel and
    its policy: lower_precision_fp, fp32, fp32_set_opt_dtype, fp32_append_dtype,
    promote or banned (vramscope_engine::autocast::CUDA_POLICIES)."""

def gpus() -> list[tuple[str, str, int, tuple[int, int], bool]]:
    """The GPUs Device(gpu=...) takes: (key, name, total_memory, capability, measured)."""
