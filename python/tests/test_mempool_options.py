"""The allocator options of PyTorch 2.11 that act on private pools and captures:
`MemPool(no_split=True)`, `MemPool(use_on_oom=True)` and `graph_capture_record_stream_reuse:True`
(c10/cuda/CUDACachingAllocator.cpp `should_split`, `try_mempool_fallback`, `record_free_markers`,
`free_safe_blocks_in_capture`; aten/src/ATen/cuda/MemPool.cpp)."""

from __future__ import annotations

from pathlib import Path

import torch
import vramscope
from conftest import run_script

MIB = 1 << 20
SCRIPT = (
    Path(__file__).resolve().parents[2]
    / "validation/run/ak59/ak01_mempool_no_split_use_on_oom_and_graph_capture_record_stream_reuse.py"
)


def test_a_no_split_pool_hands_out_whole_segments():
    with vramscope.capture():
        pool = torch.cuda.MemPool(no_split=True)
        with torch.cuda.use_mem_pool(pool):
            a = torch.empty(1024, dtype=torch.uint8, device="cuda")
            b = torch.empty(5 * MIB, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated() == 22 * MIB
        plain = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(plain):
            c = torch.empty(1024, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated() == 22 * MIB + 1024
        del a, b, c, pool, plain


def test_a_use_on_oom_pool_serves_what_cuda_malloc_cannot_and_stops_with_its_deletion():
    with vramscope.capture():
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(256 * MIB / total)
        pool = torch.cuda.MemPool(use_on_oom=True)
        with torch.cuda.use_mem_pool(pool):
            x = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        del x
        y = torch.empty(120 * MIB, dtype=torch.uint8, device="cuda")
        z = torch.empty(60 * MIB, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated() == 180 * MIB
        assert torch.cuda.memory_reserved() == 220 * MIB
        blocks = [(b["size"], b["state"]) for s in pool.snapshot() for b in s["blocks"]]
        assert blocks == [(60 * MIB, "active_allocated"), (40 * MIB, "inactive")]
        del z, pool  # ~MemPool: setUseOnOOM(false), its cached block freed
        assert torch.cuda.memory_reserved() == 120 * MIB
        try:
            torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")
            raise AssertionError("served")
        except torch.OutOfMemoryError:
            pass
        del y


def _capture_blocks(reuse: bool):
    with vramscope.capture(alloc_conf=f"graph_capture_record_stream_reuse:{reuse}"):
        torch.empty(1, device="cuda")
        g = torch.cuda.CUDAGraph()
        s, side = torch.cuda.Stream(), torch.cuda.Stream()
        with torch.cuda.stream(s):
            g.capture_begin()
            a = torch.empty(MIB, device="cuda")
            a.fill_(1)
            side.wait_stream(s)
            with torch.cuda.stream(side):
                a.add_(1)
            a.record_stream(side)
            del a
            b = torch.empty(MIB, device="cuda")
            b.fill_(2)
            s.wait_stream(side)
            c = torch.empty(MIB, device="cuda")
            g.capture_end()
        snap = torch.cuda.memory_snapshot(g.pool())
        out = [(blk["size"] // MIB, blk["state"]) for seg in snap for blk in seg["blocks"]]
        del b, c, g
        return out


def test_graph_capture_record_stream_reuse_reuses_a_block_once_its_side_stream_is_joined_back():
    assert _capture_blocks(True) == [(4, "active_allocated"), (4, "active_allocated"), (12, "inactive")]
    assert _capture_blocks(False) == [
        (4, "active_pending_free"),
        (4, "active_allocated"),
        (4, "active_allocated"),
        (8, "inactive"),
    ]


def test_the_validation_script_under_the_twin():
    status, lines, _report, err = run_script(SCRIPT)
    assert status == 0, err
    got = {line.split(":")[0]: line for line in lines if ": peak" in line}
    assert got["no_split"].endswith(f"alloc {24 * MIB} reserved {24 * MIB}")
    assert "plain_pool_60MiB out of memory" in lines
    assert got["use_on_oom"].endswith(f"alloc {180 * MIB} reserved {220 * MIB}")
    assert "use_on_oom pool blocks [[(60.0, 'active_allocated'), (40.0, 'inactive')]]" in lines
    graphs = [line for line in lines if line.startswith("graph pool blocks")]
    assert graphs == [
        "graph pool blocks [[(4.0, 'active_allocated'), (4.0, 'active_allocated'), (12.0, 'inactive')]]",
        "graph pool blocks [[(4.0, 'active_pending_free'), (4.0, 'active_allocated'),"
        " (4.0, 'active_allocated'), (8.0, 'inactive')]]",
    ]
