"""`vramscope._native`, the Rust core, driven directly: one simulated GPU of one
fresh process (crates/py), its figures checked against PyTorch's rules and the
H100's measurements (fixtures/seeds, fixtures/alloc)."""

from __future__ import annotations

import json
import pickle

import pytest
import vramscope._native as n
from conftest import FIXTURES

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def test_a_small_block_takes_a_small_segment():
    d = n.Device()
    h = d.malloc(1 << 20, 0, "output", "aten::empty", "")
    assert (d.memory_allocated(), d.memory_reserved()) == (1 * MIB, 2 * MIB)
    d.free(h)
    assert (d.memory_allocated(), d.memory_reserved()) == (0, 2 * MIB)
    assert d.max_memory_allocated() == 1 * MIB
    d.empty_cache()
    assert d.memory_reserved() == 0
    assert d.max_memory_reserved() == 2 * MIB


def test_the_seed_case_nograd_as_the_h100_measured_it():
    """seed000:nograd: two randn of 1 GiB, then (x + 1) * (2 * y), each
    temporary freed where CPython frees it (fixtures/seeds)."""
    truth = {}
    for line in (FIXTURES / "seeds" / "seeds_h100.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("case") == "seed000:nograd":
            truth[r["step"]] = r

    def figures(d):
        s = d.memory_stats()
        return {
            "allocated": d.memory_allocated(),
            "peak": d.max_memory_allocated(),
            "reserved": d.memory_reserved(),
            "peak_reserved": d.max_memory_reserved(),
            "requested": s["requested_bytes.all.current"],
        }

    def pick(r):
        return {k: r[k] for k in ("allocated", "peak", "reserved", "peak_reserved", "requested")}

    d = n.Device()
    d.first_kernels()
    x = d.malloc(GIB, 0, "input", "aten::randn", "")
    y = d.malloc(GIB, 0, "input", "aten::randn", "")
    assert figures(d) == pick(truth["inputs"])
    a = d.malloc(GIB, 0, "temporary", "aten::add", "")  # x + 1
    b = d.malloc(GIB, 0, "temporary", "aten::mul", "")  # 2 * y
    z = d.malloc(GIB, 0, "output", "aten::mul", "")  # a * b
    d.free(b)
    d.free(a)
    assert figures(d) == pick(truth["after_compute"])
    for h in (x, y, z):
        d.free(h)


def test_more_than_the_card_raises_pytorchs_message():
    d = n.Device()
    with pytest.raises(n.OutOfMemory) as e:
        d.malloc(d.total_memory, 0, "output", "aten::empty", "")
    msg = e.value.args[0]
    assert msg.startswith(
        "CUDA out of memory. Tried to allocate 79.18 GiB. GPU 0 has a total capacity of 79.18 GiB"
    )
    assert " is free. Including non-PyTorch memory, this process has " in msg
    assert "Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved" in msg
    assert msg.endswith(
        "  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )
    assert d.memory_allocated() == 0
    assert d.memory_stats()["num_ooms"] == 1


def test_a_memory_fraction_is_the_allowed_part():
    d = n.Device()
    d.set_memory_fraction(0.25)
    with pytest.raises(n.OutOfMemory) as e:
        d.malloc(30 * GIB, 0, "output", "aten::empty", "")
    assert "19.79 GiB allowed; Of the allocated memory" in e.value.args[0]
    with pytest.raises(ValueError, match=r"invalid fraction 1\.5"):
        d.set_memory_fraction(1.5)


def test_bad_names_are_value_errors_naming_them():
    with pytest.raises(ValueError, match='unknown GPU "a100"; expected one of h100, h200'):
        n.Device("a100")
    with pytest.raises(ValueError, match=r"PYTORCH_CUDA_ALLOC_CONF=.*max_split_size_mb:abc"):
        n.Device("h100", "max_split_size_mb:abc")
    d = n.Device()
    with pytest.raises(ValueError, match='unknown category "weights"; expected one of parameter, '):
        d.malloc(512, 0, "weights", "aten::empty", "")
    h = d.malloc(512, 0, "output", "aten::empty", "")
    with pytest.raises(ValueError, match="unknown category"):
        d.set_category(h, "weights")
    d.set_category(h, "parameter")
    with pytest.raises(ValueError, match='unknown thread "worker"'):
        d.blas("aten::mm", "worker", 0, "float32", False)
    with pytest.raises(ValueError, match='unknown dtype "complex32"'):
        d.blas("aten::mm", "main", 0, "complex32", False)


def test_the_gpus_properties():
    h100, h200 = n.Device(), n.Device("h200")
    assert (h100.name, h100.total_memory, h100.capability) == (
        "NVIDIA H100 80GB HBM3",
        85_017_493_504,
        (9, 0),
    )
    assert h100.multi_processor_count == 132
    # L2_cache_size: the H100's 50 MB specification, the H200's 60 MiB measured
    assert (h100.l2_cache_size, h200.l2_cache_size) == (52_428_800, 62_914_560)
    assert n.Device("t4").l2_cache_size == 4 << 20
    # the profile's threads per SM (the compute capability table): 2048 on sm_90, 1536 on sm_89
    assert (h100.max_threads_per_multi_processor, n.Device("l40s").max_threads_per_multi_processor) == (
        2048,
        1536,
    )
    assert h200.name == "NVIDIA H200" and h200.total_memory > h100.total_memory
    free, total = h100.mem_get_info()
    assert total == h100.total_memory and 0 < free < total


def test_blas_workspaces_per_thread_and_stream():
    """Hopper's cuBLAS workspace is 32 MiB, cuBLASLt's 1 MiB, one per
    (thread, stream) (CublasHandlePool.cpp); clearing them keeps the handles."""
    d = n.Device()
    free0, _ = d.mem_get_info()
    d.blas("aten::mm", "main", 0, "float32", False)
    assert d.memory_allocated() == 32 * MIB
    d.blas("aten::addmm", "main", 0, "float32", True)
    assert d.memory_allocated() == 33 * MIB
    d.blas("aten::mm", "autograd", 0, "bfloat16", False)
    assert d.memory_allocated() == 65 * MIB
    free1, _ = d.mem_get_info()
    # the handles' driver memory is outside the allocator
    assert free0 - free1 > d.memory_reserved()
    d.clear_cublas_workspaces()
    assert d.memory_allocated() == 0


def test_memory_stats_has_every_key_pytorch_reports():
    """The key set of torch.cuda.memory_stats() on the H100 (fixtures/alloc)."""
    gpu = json.loads((FIXTURES / "alloc" / "default.stats.json").read_text())
    d = n.Device()
    h = d.malloc(3 * MIB, 0, "output", "aten::empty", "")
    s = d.memory_stats()
    assert set(s) == set(gpu)
    assert s["allocated_bytes.all.current"] == 3 * MIB and s["requested_bytes.all.current"] == 3 * MIB
    assert s["segment.large_pool.current"] == 1
    d.free(h)
    d.reset_peak_memory_stats()
    assert d.memory_stats()["allocated_bytes.all.peak"] == 0
    d.reset_accumulated_memory_stats()
    assert d.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_memory_summary_is_pytorchs_table():
    d = n.Device()
    d.malloc(3 * MIB, 0, "output", "aten::empty", "")
    text = d.memory_summary()
    assert "PyTorch CUDA memory summary, device ID 0" in text
    assert "Allocated memory" in text
    assert len(d.memory_summary(abbreviated=True)) < len(text)


def test_snapshot_pickle_opens_with_pickle():
    d = n.Device()
    keep = d.malloc(3 * MIB, 0, "parameter", "aten::empty", "model.fc")
    d.record_memory_history(True)
    h = d.malloc(5 * MIB, 0, "temporary", "aten::mm", "model.fc")
    d.free(h)
    snap = pickle.loads(d.snapshot_pickle())
    assert {"segments", "device_traces"} <= set(snap)
    assert sum(s["allocated_size"] for s in snap["segments"]) == 3 * MIB
    (trace,) = snap["device_traces"]
    assert [e["action"] for e in trace] == ["alloc", "free_requested", "free_completed"]
    assert trace[0]["size"] == 5 * MIB
    names = {f["name"] for f in trace[0]["frames"]}
    assert "aten::mm" in names
    d.free(keep)


def test_main_runs_the_rust_command_line(capfd):
    """`--version` and a usage error return clap's code (0, 2) instead of
    exiting the interpreter."""
    assert n.main(["--version"]) == 0
    assert capfd.readouterr().out == "vramscope 0.1.0\n"
    assert n.main(["no-such-command"]) == 2
    assert "unrecognized subcommand 'no-such-command'" in capfd.readouterr().err


def test_autocast_policies_name_every_policy():
    policies = dict(n.autocast_policies())
    assert policies["mm"] == "lower_precision_fp"
    assert set(policies.values()) <= {
        "lower_precision_fp",
        "fp32",
        "fp32_set_opt_dtype",
        "fp32_append_dtype",
        "promote",
        "banned",
    }
