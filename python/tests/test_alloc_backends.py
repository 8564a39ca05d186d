"""The allocator settings that choose another allocator: `backend:cudaMallocAsync`
(c10/cuda/CUDAMallocAsyncAllocator.cpp) and the caching host allocator's `pinned_*` keys
(aten/src/ATen/cuda/CachingHostAllocator.cpp), PyTorch 2.11."""

import warnings

import pytest
import torch
import vramscope

MIB = 1 << 20
ASYNC = "backend:cudaMallocAsync"
POOL = "backend:cudaMallocAsync (the driver's pool)"


def _uint8(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def test_malloc_async_reports_its_pool_not_the_native_allocator():
    # getDeviceStats: allocated_bytes.all / active_bytes.all the pool's used memory (every request is
    # a cudaMallocAsync of its exact size: no 512-byte rounding, no 2 or 20 MiB segment),
    # reserved_bytes.all the pool's reserved memory (release threshold UINT64_MAX: kept until
    # empty_cache trims it; in 32 MiB granules, the H200's ma60_malloc_async.py of session 60),
    # every other statistic zero; the twin gave its native allocator's
    with vramscope.capture(gpu="h200", alloc_conf=ASYNC) as cap:
        a = _uint8(1000)
        b = _uint8(3 * MIB + 1)
        both = 1000 + 3 * MIB + 1
        assert torch.cuda.memory_allocated() == both
        assert torch.cuda.memory_reserved() == 32 * MIB
        del b
        assert torch.cuda.memory_allocated() == 1000
        c = _uint8(40 * MIB)
        assert torch.cuda.memory_reserved() == 64 * MIB
        del c
        assert torch.cuda.memory_reserved() == 64 * MIB
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 32 * MIB
        assert torch.cuda.max_memory_reserved() == 64 * MIB
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == 1000
        assert torch.cuda.max_memory_reserved() == 32 * MIB
        s = torch.cuda.memory_stats()
        assert s["active_bytes.all.current"] == 1000
        zero = [
            k for k, v in s.items() if v and not k.startswith(("allocated_bytes.all", "active_bytes.all"))
        ]
        assert zero == ["reserved_bytes.all.current", "reserved_bytes.all.peak"]
        assert s["max_split_size"] == 0
        assert torch.cuda.get_allocator_backend() == "cudaMallocAsync"
        del a
    assert POOL in cap.unmeasured
    assert POOL in cap.report()["unmeasured"]


def test_mem_get_info_sees_the_async_pools_reserved_memory():
    # mem_get_info is cudaMemGetInfo, the device's: the pool keeps what it reserved mapped until a
    # trim (lazy_init_device: release threshold UINT64_MAX), so used memory moves with
    # memory_reserved() (the H200: +96 MiB as the pool went from 32 to 128 MiB); the twin's moved
    # with its native 2 and 20 MiB segments
    with vramscope.capture(gpu="h200", alloc_conf=ASYNC):

        def other():
            free, total = torch.cuda.mem_get_info()
            return total - free - torch.cuda.memory_reserved()

        # the first allocation takes 70 MiB beyond the pool for good (lazy_init_device: the
        # pool's setup and the first stream pool; the H100's mx61_async_pool_h100.txt)
        base = other() + 70 * MIB
        a = _uint8(1)
        assert other() == base
        b = [_uint8(20 * MIB) for _ in range(3)]
        assert torch.cuda.memory_reserved() == 64 * MIB and other() == base
        del b
        assert other() == base
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 32 * MIB and other() == base
        del a
        torch.cuda.empty_cache()
        assert other() == base


def test_malloc_async_has_no_snapshot_and_no_history():
    with vramscope.capture(gpu="h200", alloc_conf=ASYNC):
        _uint8(1000)
        with pytest.raises(
            RuntimeError, match=r"^Calling snapshot with backend:cudaMallocAsync is not meaningful"
        ):
            torch.cuda.memory_snapshot()
        with pytest.raises(RuntimeError, match=r"^cudaMallocAsync does not yet support recordHistory"):
            torch.cuda.memory._record_memory_history()
        with pytest.raises(RuntimeError, match=r"^cudaMallocAsync does not yet support recordHistory"):
            torch.cuda.memory._record_memory_history(enabled=None)
        with pytest.warns(UserWarning, match="resetAccumulatedStats has no effect"):
            torch.cuda.reset_accumulated_memory_stats()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.cuda.reset_accumulated_memory_stats()  # TORCH_WARN_ONCE


def test_malloc_async_limits_the_bytes_requested_with_its_own_message():
    # setMemoryFraction: pytorch_memory_limits = fraction x total; mallocAsync fails a request when
    # pytorch_used_bytes + size is above it, with its own message
    with vramscope.capture(gpu="h200", alloc_conf=ASYNC):
        total = torch.cuda.get_device_properties(0).total_memory
        assert torch.cuda.get_per_process_memory_fraction() == (2**64 - 1) / total
        torch.cuda.set_per_process_memory_fraction(0.001)
        limit = int(0.001 * total)
        a = _uint8(limit - 10)
        b = _uint8(10)  # exactly at the limit
        with pytest.raises(torch.OutOfMemoryError) as e:
            _uint8(1)
        mib = f"{limit / MIB:.2f} MiB"  # format_size
        assert str(e.value).startswith(
            "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
            f"Currently allocated     : {mib}\nRequested               : 1 bytes\n"
        )
        assert str(e.value).endswith(
            f"PyTorch limit (set by user-supplied memory fraction)\n                        : {mib}"
        )
        del a, b


def test_a_cuda_graph_under_malloc_async_is_named():
    # the capture's cudaMallocAsync nodes take the driver's graph memory, which 2.11's
    # getDeviceStats leaves out: not modelled, named
    with vramscope.capture(gpu="h200", alloc_conf=ASYNC) as cap:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            torch.empty(256, device="cuda")
    assert "CUDA graphs under backend:cudaMallocAsync (the driver's graph memory)" in cap.unmeasured


def test_the_native_allocators_keys_do_not_warn_under_malloc_async():
    # CUDAAllocatorConfig::parseArgs has a TORCH_WARN for backend:cudaMallocAsync with a key only
    # the native allocators read, but the H200 showed none for the environment's settings (session
    # 60's ma60_malloc_async.py, `async_keys`: no warning at the first allocation, nothing on
    # stderr); the twin warned
    for conf in (",pinned_num_register_threads:8", ",expandable_segments:True"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with vramscope.capture(gpu="h200", alloc_conf=ASYNC + conf):
                _uint8(1000)


def test_the_native_backend_is_unchanged():
    with vramscope.capture(gpu="h200") as cap:
        a = _uint8(1000)
        assert torch.cuda.memory_allocated() == 1024
        assert torch.cuda.memory_reserved() == 2 * MIB
        assert torch.cuda.get_allocator_backend() == "native"
        del a
    assert POOL not in cap.unmeasured


def test_a_pinned_reserve_segment_serves_new_blocks_without_cuda_host_alloc():
    # pinned_reserve_segment_size_mb: the first new block makes the reserve segment (one
    # cudaHostAlloc, not a block); blocks are carved from it (4 KiB rounded) while they fit, with
    # no cudaHostAlloc of their own, and never freed (free_block skips them): host_alloc_time and
    # host_free_time count the calls, num_host_alloc / num_host_free the blocks
    with vramscope.capture(gpu="h200", alloc_conf="pinned_reserve_segment_size_mb:4"):
        torch.zeros(1, device="cuda")
        a = torch.empty(100_000, dtype=torch.uint8, pin_memory=True)  # 128 KiB, carved
        b = torch.empty(3 << 20, dtype=torch.uint8, pin_memory=True)  # 4 MiB: does not fit
        s = torch.cuda.host_memory_stats()
        assert s["num_host_alloc"] == 2 and s["allocated_bytes.current"] == (1 << 17) + (4 << 20)
        assert s["host_alloc_time.count"] == 2  # the reserve segment and b
        del a, b
        torch._C._host_emptyCache()
        s = torch.cuda.host_memory_stats()
        assert s["num_host_free"] == 2 and s["host_free_time.count"] == 1
        c = torch.empty(100_000, dtype=torch.uint8, pin_memory=True)  # carved further on
        s = torch.cuda.host_memory_stats()
        assert s["num_host_alloc"] == 3 and s["host_alloc_time.count"] == 2
        del c


def test_the_host_register_path_keeps_the_statistics_and_is_named():
    # pinned_use_cuda_host_register: malloc + cudaHostRegister of the same rounded size: the same
    # statistics; where glibc maps the blocks is not laid out
    with vramscope.capture(gpu="h200", alloc_conf="pinned_use_cuda_host_register:True") as cap:
        torch.zeros(1, device="cuda")
        a = torch.empty(3 << 20, dtype=torch.uint8, pin_memory=True)
        s = torch.cuda.host_memory_stats()
        assert s["num_host_alloc"] == s["host_alloc_time.count"] == 1
        assert s["allocated_bytes.current"] == 4 << 20
        del a
    assert any(u.startswith("pinned_use_cuda_host_register") for u in cap.unmeasured)


def test_the_h100s_async_pool_probe_line_for_line(monkeypatch):
    # validation/run/probes/mx61_async_pool.py on the H100 (fixtures/run/probes/
    # mx61_async_pool_h100.txt): the pool packs blocks in address order across its 32 MiB
    # granules, a trim keeps every granule a live block touches (holes: 64 MiB, the twin said 32),
    # a freed hole takes only a block that fits it (misfit, reuse: 96 MiB, the twin said 64), and
    # mem_get_info sees 70 MiB beyond the pool from the first allocation on
    import contextlib
    import io
    import pathlib
    import runpy

    root = pathlib.Path(__file__).resolve().parents[2]
    gpu = (root / "fixtures/run/probes/mx61_async_pool_h100.txt").read_text()
    out = io.StringIO()
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", ASYNC)
    with (
        vramscope.capture(gpu="h100", alloc_conf=ASYNC),
        warnings.catch_warnings(),
        contextlib.redirect_stdout(out),
    ):
        warnings.simplefilter("ignore")
        runpy.run_path(str(root / "validation/run/probes/mx61_async_pool.py"), run_name="__main__")
    assert out.getvalue() == gpu


def test_the_h100s_stream_pool_probe_line_for_line(monkeypatch):
    # validation/run/probes/mx2_stream_pool_probe_s61.py on the H100 (fixtures/run/probes/
    # mx2_stream_pool_probe_s61_h100.txt): the 70 MiB beyond the allocator come with the device's
    # stream pools, made by the first side stream under either backend (priority_range() makes
    # none), or by cudaMallocAsync's first allocation (lazy_init_device's getStreamFromPool), once
    import contextlib
    import io
    import pathlib
    import runpy
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    probe = root / "validation/run/probes/mx2_stream_pool_probe_s61.py"
    gpu = (root / "fixtures/run/probes/mx2_stream_pool_probe_s61_h100.txt").read_text()
    out = io.StringIO()
    # the probe runs each case in a child process of its own: the twin runs each child here
    cases = runpy.run_path(str(probe), run_name="probe")["CASES"]
    for name, (conf, steps) in cases.items():
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
        monkeypatch.setattr(sys, "argv", [str(probe), "--child", name, steps])
        with (
            vramscope.capture(gpu="h100", alloc_conf=conf or None),
            warnings.catch_warnings(),
            contextlib.redirect_stdout(out),
            pytest.raises(SystemExit),
        ):
            warnings.simplefilter("ignore")
            runpy.run_path(str(probe), run_name="__main__")
    assert out.getvalue() == gpu


@pytest.mark.parametrize("value, uncached", [("1", True), ("0", False), ("true", False)])
def test_no_cuda_memory_caching_keeps_every_storage_out_of_the_allocators_figures(
    monkeypatch, value, uncached
):
    # PYTORCH_NO_CUDA_MEMORY_CACHING=1 (forceUncachedAllocator, CUDACachingAllocator.cpp, read at the
    # first allocation; check_env takes "1" alone): allocate() and raw_alloc_with_stream() cudaMalloc
    # each request themselves (uncached_allocate), so memory_stats() reads zero throughout and the
    # snapshot has no segment (blind317/lf02); the twin counted them as cached blocks
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", value)
    with warnings.catch_warnings(), vramscope.capture(gpu="h100") as cap:
        warnings.simplefilter("ignore")
        x = torch.randn(1024, 1024, device="cuda")
        y = x @ x
        ptr = torch.cuda.caching_allocator_alloc(3 * MIB)
        seen = (torch.cuda.memory_allocated(), torch.cuda.max_memory_reserved())
        segments = torch.cuda.memory_snapshot()
        torch.cuda.caching_allocator_delete(ptr)
        del x, y
        torch.cuda.reset_peak_memory_stats()
    if uncached:
        assert seen == (0, 0) and segments == []
        assert set(cap.phases[0].as_dict().values()) <= {0, "phase0"}
        assert "PYTORCH_NO_CUDA_MEMORY_CACHING (the driver's memory)" in cap.unmeasured
    else:
        assert seen[0] >= 2 * 4 * MIB + 3 * MIB and len(segments) > 0


def test_caching_allocator_enable_false_keeps_new_storages_out_of_the_figures():
    # torch.cuda.caching_allocator_enable(False) (NativeCachingAllocator::enable, CUDACachingAllocator.cpp):
    # while it holds, allocate() and raw_alloc() take `forceUncachedAllocator() || !isEnabled()`'s path,
    # uncached_allocate (cudaMalloc) with uncached_delete as the storage's deleter: no block, no
    # statistic; a storage made before is freed into the cache as ever (blind326/lo01's no_grad
    # evaluation; the twin took the call as a no-op)
    with warnings.catch_warnings(), vramscope.capture(gpu="h100"):
        warnings.simplefilter("ignore")
        a = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.caching_allocator_enable(False)
        b = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        c = b * 2
        ptr = torch.cuda.caching_allocator_alloc(3 * MIB)
        disabled = (
            torch.cuda.memory_allocated(),
            torch.cuda.max_memory_allocated(),
            torch.cuda.memory_reserved(),
        )
        del a, c
        freed = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        torch.cuda.caching_allocator_enable(True)
        d = torch.empty(32 * MIB, dtype=torch.uint8, device="cuda")
        del b
        enabled = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        del d, ptr
    assert disabled == (64 * MIB, 64 * MIB, 64 * MIB)
    assert freed == (0, 64 * MIB)
    assert enabled == (32 * MIB, 64 * MIB)
