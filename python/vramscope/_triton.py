"""The program's own Triton kernels under the twin (triton 3.6, the one torch 2.11 pins).

A launch, `kernel[grid](...)` or `kernel.run(..., grid=..., warmup=False)` (`JITFunction.run`,
triton/runtime/jit.py), compiles the kernel once per specialization and calls the launcher
(`CudaLauncher.__call__`, triton/backends/nvidia/driver.py). Neither allocates through torch: the
launcher takes global and profile scratch from `triton.set_allocator`'s allocator only where the
compiled kernel asks for it (`global_scratch_size > 0`: device-side tensor descriptors); torch 2.11
sets one (`torch.empty(size, dtype=torch.int8)`) only at an Inductor launch (`CachingAutotuner.run`,
triton_heuristics.py), where it stays set for the thread's later launches. So a launch here binds the
arguments as Triton's binder does (defaults applied), evaluates a callable grid on them, and compiles
and launches nothing. The kernel may write any pointer argument, and which it writes is known only
to the compiler: every tensor argument is taken as written with values the twin does not know
(docs/run.md "Values"). A kernel needing scratch is not modelled (the twin does not compile).

Benchmarks allocate: `Autotuner._bench` (triton/runtime/autotuner.py) times each config with the
driver's benchmarker, `triton.testing.do_bench`, which calls `fn` once, takes the 256 MiB buffer of
`get_empty_cache_for_benchmark` (`torch.empty(64 Mi, dtype=torch.int, device='cuda')`), zeroes it
before each of 5 timed calls, then before each of `rep / estimate` calls after `warmup / estimate`
untimed ones, and drops it on return. The twin does the same with one untimed and one timed call
(their counts come from the GPU's clock; a call repeated allocates what the one before freed) and
returns 1.0 ms, a placeholder, for every config, so the autotuner keeps its first one. The
autotuner's own hooks (`reset_to_zero`, `restore_value` clones) and a config's `pre_hook` run as
written, through the twin's ops."""

from __future__ import annotations

import inspect

import torch

from . import _tensor
from ._tensor import registered, set_value, value

#: the 256 MiB that `CudaDriver.get_empty_cache_for_benchmark` zeroes before each timed call
#: (triton/backends/nvidia/driver.py: `cache_size = 256 * 1024 * 1024`, int32 elements)
BENCH_CACHE_BYTES = 256 * 1024 * 1024

#: the times `do_bench` calls `fn` to estimate its runtime (triton/testing.py: `for _ in range(5)`)
ESTIMATE_CALLS = 5

#: what the twin's `do_bench` returns for every call, in ms: a placeholder (no device clock), not 0
#: because programs divide by it (a throughput)
PLACEHOLDER_MS = 1.0


class _Properties(dict):
    """`driver.active.utils.get_device_properties(i)`'s dict (`getDeviceProperties`,
    triton/backends/nvidia/driver.c): the SM count is the twin's GPU's; the per-block limits are
    compute capability 9.0's (CUDA C Programming Guide, "Technical Specifications per Compute
    Capability": 227 KiB of shared memory opt-in, 64 Ki registers, warps of 32)."""


class _Utils:
    def __init__(self, cap):
        self.cap = cap

    def get_device_properties(self, device=0):
        return _Properties(
            max_shared_mem=227 * 1024,
            max_num_regs=64 * 1024,
            multiprocessor_count=self.cap.device.multi_processor_count,
            warpSize=32,
        )


class Driver:
    """Triton's active driver under the twin (`triton.runtime.driver.driver.active`): the parts of
    `CudaDriver` that launches, autotuning and benchmarks ask for, on the twin's torch.cuda. The real
    one builds a launcher against libcuda at its construction."""

    def __init__(self, cap):
        self.utils = _Utils(cap)

    def get_current_device(self):
        return torch.cuda.current_device()

    def set_current_device(self, device):
        torch.cuda.set_device(device)

    def get_current_stream(self, device=None):
        return torch.cuda.current_stream().cuda_stream

    def get_device_capability(self, device=None):
        return torch.cuda.get_device_capability(device)

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        major, minor = torch.cuda.get_device_capability()
        return GPUTarget("cuda", major * 10 + minor, 32)

    def get_active_torch_device(self):
        return torch.device("cuda", torch.cuda.current_device())

    def get_device_interface(self):
        return torch.cuda

    def get_benchmarker(self):
        return do_bench

    def get_empty_cache_for_benchmark(self):
        return torch.empty(BENCH_CACHE_BYTES // 4, dtype=torch.int, device="cuda")

    def clear_cache(self, cache):
        cache.zero_()

    @staticmethod
    def is_active():
        return True


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """`triton.testing.do_bench`'s calls and allocations in its order (module docstring), with one
    untimed and one timed call after the estimate, where the GPU makes `warmup / estimate` and
    `rep / estimate` of them."""
    from triton import runtime
    from triton.testing import _summarize_statistics

    assert return_mode in ["min", "max", "mean", "median", "all"]
    active = runtime.driver.active
    fn()
    torch.cuda.synchronize()
    cache = active.get_empty_cache_for_benchmark()
    for _ in range(ESTIMATE_CALLS):
        active.clear_cache(cache)
        fn()
    fn()  # warm-up
    if grad_to_none is not None:
        for x in grad_to_none:
            x.grad = None
    active.clear_cache(cache)
    fn()
    torch.cuda.synchronize()
    del cache
    return _summarize_statistics([PLACEHOLDER_MS], quantiles, return_mode)


def _bind(fn, args, kwargs) -> dict:
    """`args` and `kwargs` bound to the kernel's parameters with its defaults applied, as Triton's
    binder does (`create_function_from_signature`: "sig.bind followed by apply_defaults"); the
    launch options (`num_warps`, ...) are left out."""
    bound = {}
    params = list(fn.signature.parameters.values())
    if len(args) > len(params):
        raise TypeError(f"{fn._fn_name}() takes {len(params)} arguments but {len(args)} were given")
    for p, a in zip(params, args, strict=False):
        bound[p.name] = a
    for p in params[len(args) :]:
        if p.name in kwargs:
            bound[p.name] = kwargs[p.name]
        elif p.default is not inspect.Parameter.empty:
            bound[p.name] = p.default
        else:
            raise TypeError(f"{fn._fn_name}() missing 1 required positional argument: '{p.name}'")
    return bound


def _tensors(x):
    """The tensors an argument passes to the kernel: itself, a tuple's, a tensor descriptor's base."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(getattr(x, "base", None), torch.Tensor):
        yield x.base


class _Metadata:
    def __init__(self, kwargs):
        self.num_warps = kwargs.get("num_warps", 4)
        self.num_stages = kwargs.get("num_stages", 3)
        self.num_ctas = kwargs.get("num_ctas", 1)
        #: a placeholder (the twin compiles nothing), not 0: programs divide by it (`Kernel`)
        self.shared = 1


class Kernel:
    """What a launch or `warmup` returns in place of the `CompiledKernel`. Its register count and
    shared memory are placeholders (the twin compiles nothing): the fused-softmax tutorial sizes a
    persistent grid by the occupancy they give, and a grid's size allocates nothing. Launched itself
    (`kernel[grid](*args)`, `CompiledKernel.__getitem__`), it writes its tensor arguments as a
    `JITFunction` launch does."""

    n_regs = 32
    n_spills = 0

    def __init__(self, cap, fn, kwargs):
        self.cap = cap
        self.name = fn._fn_name
        self.metadata = _Metadata(kwargs)

    def _init_handles(self):
        pass

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            _launch(self.cap, list(args) + list(kwargs.values()))

        return launch


def _launch(cap, values) -> None:
    """A launch over the argument `values`: a host tensor among them fails as in the launcher's
    `getPointer` (triton/backends/nvidia/driver.py); every simulated tensor is written."""
    for i, a in enumerate(values):
        for t in _tensors(a):
            if not registered(t) and t.device.type == "cpu":
                raise ValueError(f"Pointer argument (at {i}) cannot be accessed from Triton (cpu tensor?)")
    for a in values:
        for t in _tensors(a):
            if registered(t):
                _wrote(cap, t)


def _wrote(cap, t) -> None:
    """`t` written by a kernel with values the twin does not compute: it and every tensor over its
    storage read them as unknown (`Capture.forget_constants`, `_tensor.set_stale`)."""
    v = value(t)
    if v is not None:
        for other in list(cap.constants.pop(v.untyped_storage().data_ptr(), None) or ()):
            set_value(other, None)
    _tensor.set_stale(t)
    _tensor.forget_range(t)
    _tensor.set_standin(t, None)
    set_value(t, None)


def _run(cap):
    def run(self, *args, grid, warmup, **kwargs):
        """`JITFunction.run` under the twin (module docstring)."""
        for hook in self.pre_run_hooks:
            hook(*args, **kwargs)
        bound = _bind(self, args, kwargs)
        if warmup:
            return Kernel(cap, self, kwargs)
        assert grid is not None
        if callable(grid):
            grid = grid(bound)
        len(grid)
        _launch(cap, list(bound.values()))
        return Kernel(cap, self, kwargs)

    return run


def install(cap, p, triton) -> None:
    """Patch the imported `triton` (its driver, `JITFunction.run`, `do_bench`) while `p` lasts."""
    from triton.runtime import jit
    from triton.runtime.driver import driver

    p.set(driver, "_active", Driver(cap))
    p.set(jit.JITFunction, "run", _run(cap))
    p.set(triton.testing, "do_bench", do_bench)


def patch(cap, p) -> None:
    """Install the above once `triton` is imported (now, if it is), while `p` lasts."""
    p.when_imported("triton", lambda triton: install(cap, p, triton))
