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
