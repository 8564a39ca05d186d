"""The program's own Triton kernels under the twin (`vramscope._triton`): launches compile and
allocate nothing, write their tensor arguments with unknown values, and autotuning and
`triton.testing.do_bench` allocate Triton's 256 MiB L2-clearing buffer."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
tl = triton.language

MiB = 1 << 20


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr = 128):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
    restore_value=["out_ptr"],
)
@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@triton.jit
def _tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


def test_a_launch_allocates_nothing_and_its_grid_sees_the_bound_arguments():
    import vramscope

    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)

    with vramscope.capture(gpu="h200"):
        x = torch.randn(1 << 20, device="cuda")
        out = torch.empty_like(x)
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        _double[grid](x, out, x.numel())
        _double[(8,)](x, out, x.numel(), BLOCK=1024)
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
        kernel = _double.warmup(x, out, x.numel(), grid=(1,))
    assert after == before
    # the default of BLOCK applied, as Triton's binder does
    assert seen[0]["n"] == 1 << 20 and seen[0]["BLOCK"] == 128
    assert kernel.n_regs > 0


def test_a_launch_forgets_the_values_of_its_tensor_arguments():
    import vramscope
    from vramscope._tensor import value

    with vramscope.capture(gpu="h200"):
        x = torch.ones(8, device="cuda")
        out = torch.ones(8, device="cuda")
        view = out[:4]
        assert value(out) is not None
        _double[(1,)](x, out, 8)
        assert value(out) is None and value(x) is None
        # a view taken before reads its values as stale
        from vramscope._tensor import assumed

        assert assumed(view)


def test_a_host_tensor_argument_fails_as_in_the_launcher():
    import vramscope

    with vramscope.capture(gpu="h200"):
        x = torch.ones(8, device="cuda")
        with pytest.raises(ValueError, match="cannot be accessed from Triton"):
            _double[(1,)](x, torch.ones(8), 8)


def test_autotuning_allocates_the_benchmark_buffer_per_config_then_nothing():
    """`Autotuner._bench` -> `do_bench`: per config, a 256 MiB buffer and `restore_value`'s clone."""
    import vramscope

    grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    with vramscope.capture(gpu="h200"):
        x = torch.randn(1 << 20, device="cuda")
        out = torch.zeros_like(x)
        torch.cuda.reset_peak_memory_stats()
        _tuned[grid](x, out, x.numel())
        first = torch.cuda.max_memory_allocated()
        allocated = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        _tuned[grid](x, out, x.numel())
        second = torch.cuda.max_memory_allocated()
    assert first == 8 * MiB + 4 * MiB + 256 * MiB
    assert allocated == 8 * MiB
    assert second == 8 * MiB


def test_do_bench_holds_the_buffer_and_calls_fn():
    import vramscope

    calls = []
    with vramscope.capture(gpu="h200"):
        x = torch.randn(1 << 20, device="cuda")
        torch.cuda.reset_peak_memory_stats()
        ms = triton.testing.do_bench(lambda: calls.append(x * 2), quantiles=[0.5, 0.2, 0.8])
        peak = torch.cuda.max_memory_allocated()
    assert peak >= 4 * MiB + 256 * MiB
    assert len(calls) == 8
    assert ms == [1.0, 1.0, 1.0]


def test_a_triton_op_called_eagerly_launches_its_kernel():
    """`torch.library.triton_op` with `wrap_triton`: eagerly, `wrap_triton(k)[grid](...)` is
    `k.run(...)` (torch/_higher_order_ops/triton_kernel_wrap.py)."""
    import vramscope
    from torch.library import triton_op, wrap_triton

    @triton_op("vramscope_test::double", mutates_args={})
    def double(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        wrap_triton(_double)[(triton.cdiv(x.numel(), 128),)](x, out, x.numel())
        return out

    with vramscope.capture(gpu="h200"):
        x = torch.randn(1 << 20, device="cuda")
        y = double(x)
        allocated = torch.cuda.memory_allocated()
    assert y.shape == x.shape
    assert allocated == 8 * MiB


def test_a_warmed_up_kernel_launched_itself_writes_its_arguments():
    """The fused-softmax tutorial's persistent launch: `kernel = k.warmup(..., grid=(1,))`, a grid
    from the driver's properties and the kernel's occupancy, then `kernel[grid](*args)`."""
    import vramscope
    from triton.runtime import driver
    from vramscope._tensor import value

    with vramscope.capture(gpu="h200"):
        props = driver.active.utils.get_device_properties(driver.active.get_active_torch_device().index)
        x = torch.ones(8, device="cuda")
        out = torch.ones(8, device="cuda")
        kernel = _double.warmup(x, out, 8, grid=(1,))
        kernel._init_handles()
        occupancy = min(
            props["max_num_regs"] // (kernel.n_regs * props["warpSize"] * kernel.metadata.num_warps),
            props["max_shared_mem"] // kernel.metadata.shared,
        )
        assert value(out) is not None
        kernel[(props["multiprocessor_count"] * occupancy, 1, 1)](x, out, 8, 128)
        assert value(out) is None
    assert props["multiprocessor_count"] == 132


def test_a_triton_kernel_inside_torch_compile_runs():
    """A bare `@triton.jit` launch inside a compiled function: dynamo traces it as
    `triton_kernel_wrapper_mutation` and Inductor launches it from its wrapper (`_compile`)."""
    import vramscope

    def f(x):
        out = torch.empty_like(x)
        _double[(triton.cdiv(x.numel(), 128),)](x, out, x.numel())
        return out.relu()

    with vramscope.capture(gpu="h200"):
        x = torch.randn(1 << 20, device="cuda")
        y = torch.compile(f)(x)
        allocated = torch.cuda.memory_allocated()
    assert y.shape == x.shape
    assert allocated == 8 * MiB


def test_cubin_registers_are_read_as_cuobjdump_reads_them():
    # `_dynamic_scale_rblock` reads a binary's registers (the driver's `n_regs`); the twin compiles
    # the kernel on the host for the GPU's target and reads the cubin's EIATTR_REGCOUNT
    import os
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from vramscope._compile import _cubin_registers

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    if not os.path.exists(cuobjdump):
        pytest.skip("Triton ships no cuobjdump here")
    source = ASTSource(
        _double, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}
    )
    binary = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(binary.asm["cubin"])
        f.flush()
        usage = subprocess.run(
            [cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    assert _cubin_registers(binary.asm["cubin"]) == int(re.search(r"REG:(\d+)", usage).group(1))


def _reduction_autotuner(configs, x=4096):
    from types import SimpleNamespace

    from torch._inductor.runtime.hints import HeuristicType

    props = SimpleNamespace(
        major=9,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        warp_size=32,
        multi_processor_count=132,
    )
    return SimpleNamespace(
        configs=configs,
        device_props=props,
        deterministic_mode=False,
        inductor_meta={},
        heuristic_type=HeuristicType.REDUCTION,
        size_hints={"x": x, "r0_": 1024},
    )


@pytest.mark.parametrize(
    ("registers", "x", "launched"), [(40, 4096, [1024, 512]), (32, 4096, [1024]), (40, 1024, [1024])]
)
def test_dynamic_scale_rblock_halves_a_reduction_block_once(monkeypatch, registers, x, launched):
    # blind245/il06: the H200 benchmarked a LayerNorm backward (4,096 rows of 768, one heuristic
    # config XBLOCK 2, R0_BLOCK 1,024, 8 warps, 40 registers a thread) twice: 2,048 blocks outnumber
    # the 5 x 132 the SMs hold, so `_dynamic_scale_rblock` added R0_BLOCK 512 (48 registers), which,
    # not loaded yet, it does not scale again. 32 registers, or blocks that fit, add none
    from vramscope import _compile

    monkeypatch.setattr(_compile, "_binary_registers", lambda autotuner, config: registers)
    config = triton.Config({"XBLOCK": 2, "R0_BLOCK": 1024}, num_warps=8, num_stages=1)
    configs = _compile._configs_launched(_reduction_autotuner([config], x))
    assert [c.kwargs["R0_BLOCK"] for c in configs] == launched


def test_a_recompiled_kernel_reads_its_best_config_from_the_autotune_cache(monkeypatch):
    # Inductor's local autotune cache keeps the best of a kernel's heuristic configs by its source:
    # an identical graph compiled again (blind245/il06's recompile) launches it without a benchmark;
    # a kernel with one heuristic config (a second added by `_dynamic_scale_rblock`) has no cache
    from types import SimpleNamespace

    from vramscope import _compile

    tuned = []
    monkeypatch.setattr(
        _compile, "_autotune", lambda kernel, configs, args, kwargs: tuned.append(len(configs))
    )
    cap = SimpleNamespace(autotuned_sources=set(), note_compile_unmeasured=lambda what: None)
    two = SimpleNamespace(configs=[1, 2])
    monkeypatch.setattr(_compile, "_configs_launched", lambda autotuner: list(autotuner.configs))
    for _ in range(2):
        _compile._Kernel("k", two, "source of k", cap).run()
    assert tuned == [2]
    # the cache is read when a kernel is loaded: two graphs compiled before either ran (DDPOptimizer's
    # bucket graphs) both benchmark
    loaded = [_compile._Kernel("m", two, "source of m", cap) for _ in range(2)]
    for kernel in loaded:
        kernel.run()
    assert tuned == [2, 2, 2]
    one = SimpleNamespace(configs=[1])
    monkeypatch.setattr(_compile, "_configs_launched", lambda autotuner: [1, 2])
    for _ in range(2):
        _compile._Kernel("j", one, "source of j", cap).run()
    assert tuned == [2, 2, 2, 2, 2]


def test_a_kernel_compiled_in_the_process_is_benchmarked_again_after_each_load(monkeypatch):
    # with one compile thread (no workers) `PyCodeCache.load` gives a source loaded before its
    # module again: the same CachingAutotuner, whose `precompile` remakes a launcher per config, so
    # a graph compiled later with an identical kernel benchmarks it again (the H200's
    # nocuda_compiled_probe_s59 phase7, compiled 0.2 s after phase3, before the worker pool was
    # ready: +60 MiB, its L2 buffer); two loads before a launch benchmark once
    from types import SimpleNamespace

    from vramscope import _compile

    tuned = []
    monkeypatch.setattr(
        _compile, "_autotune", lambda kernel, configs, args, kwargs: tuned.append(len(configs))
    )
    monkeypatch.setattr(_compile, "_configs_launched", lambda autotuner: list(autotuner.configs))
    cap = SimpleNamespace(
        autotuned_sources=set(),
        note_compile_unmeasured=lambda what: None,
        compile_in_process=True,
        loaded_kernels={},
    )
    two = SimpleNamespace(configs=[1, 2])
    for _ in range(2):
        _compile._Kernel("k", two, "source of k", cap).run()
    assert tuned == [2, 2]
    loaded = [_compile._Kernel("m", two, "source of m", cap) for _ in range(2)]
    for kernel in loaded:
        kernel.run()
    assert tuned == [2, 2, 2]
