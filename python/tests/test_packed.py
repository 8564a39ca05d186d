"""Kernels that pack their metadata to the device (`pack_vecs`, aten/src/ATen/native/cuda/TensorShape.cu)
and FSDP2's `fsdp::` operators that reach them (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
the 8-byte entries `split_with_sizes_copy.out` and `_chunk_cat` pack, made and freed inside the op, as
rank 0 of fixtures/multi's `fsdp_llama_mp_bf16` recorded them on 2 H200s (traces_h200_n2.tar.xz: 32,112
bytes after each copy-out, the twin's trace the GPU's in every size and stream)."""

from __future__ import annotations

import torch
import vramscope


def _transient(fn) -> tuple[int, int]:
    """The requested bytes `fn` held at its peak beyond what it leaves, and what it leaves."""
    before = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    keep = fn()
    stats = torch.cuda.memory_stats()
    del keep
    return stats["requested_bytes.all.peak"] - stats["requested_bytes.all.current"], (
        stats["requested_bytes.all.current"] - before
    )


def test_split_with_sizes_copy_packs_one_entry_per_block():
    with vramscope.capture() as cap:
        x = torch.empty(2, 2 << 20, device="cuda")
        outs = [torch.empty(2, 1 << 20, device="cuda") for _ in range(2)]
        # chunks of 4 MiB: 2,048 tiles each, 8,192 over both rows; max_blocks = 132 SMs x 2,048
        # threads / 128 x 2 = 4,224: iter_factor 2, chunks_per_block 2, iters_per_chunk 1: 4,096
        # blocks; 3 per split + 4,096 + 3 cumulative sums = 4,105 int64s
        peak, left = _transient(lambda: torch.split_with_sizes_copy(x, [1 << 20, 1 << 20], dim=1, out=outs))
        assert (peak, left) == (4105 * 8, 0)
        # outputs with gaps (not non-overlapping and dense): the composite's copy per split, nothing else
        strided = [torch.empty(2, 2 << 20, device="cuda")[:, ::2] for _ in range(2)]
        assert _transient(lambda: torch.split_with_sizes_copy(x, [1 << 20, 1 << 20], dim=1, out=strided)) == (
            0,
            0,
        )
    assert cap.report()["unmeasured"] == []


def test_chunk_cat_packs_before_its_output_and_pads_off_the_fast_path():
    with vramscope.capture() as cap:
        g = torch.empty(4096, 1024, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(2, 4096 * 512, device="cuda")
        # bf16 into float32 (the kernel casts): padded chunks of 8 MiB, 4,096 tiles; 4 + 4,096 + 2 x 2
        assert _transient(lambda: torch._chunk_cat([g], 0, 2, out=out)) == (4104 * 8, 0)
        # without out: the metadata goes before the output is made, so the peak is the output's
        peak, left = _transient(lambda: torch._chunk_cat([g], 0, 2))
        assert (peak, left) == (0, g.numel() * 2)
        # float16 into float32 is no fast path: `_pad_chunk`'s zeroed copy of the 5 rows padded to
        # 6, alive through `cat_out`; 4 rows need none
        h = torch.empty(5, 8, device="cuda", dtype=torch.float16)
        small = torch.empty(2, 24, device="cuda")
        assert _transient(lambda: torch._chunk_cat([h], 0, 2, out=small)) == (6 * 8 * 2, 0)
        assert _transient(lambda: torch._chunk_cat([h[:4]], 0, 2, out=small[:, :16])) == (0, 0)
    assert cap.report()["unmeasured"] == []


def test_fsdp_operators_run_their_cuda_bodies():
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives  # noqa: F401  (defines fsdp::)

    with vramscope.capture() as cap:
        shards = [torch.empty(1000, device="cuda"), torch.empty(24, device="cuda")]
        output = torch.empty(2 * 1024, device="cuda")
        # rank 1's input: a narrow of the output, the shards `_foreach_copy_`'d into its splits
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        inp, whole = torch.ops.fsdp.all_gather_copy_in(shards, output, [1000, 24], 1024, 1)
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
        assert inp.untyped_storage().data_ptr() == whole.untyped_storage().data_ptr() == output.data_ptr()
        assert inp.storage_offset() == 1024 and inp.shape == (1024,)
        a, b = torch.empty(2, 1000, device="cuda"), torch.empty(2, 24, device="cuda")
        # 2 splits of 4,000 and 96 bytes: 2 + 1 tiles; 3 x 2 + 3 + 3 entries
        peak, _ = _transient(
            lambda: torch.ops.fsdp.split_with_sizes_copy(output.view(2, -1), [1000, 24], dim=1, out=[a, b])
        )
        assert peak == 12 * 8
        reduce_in = torch.empty(2, 1024, device="cuda")
        peak, _ = _transient(lambda: torch.ops.fsdp.chunk_cat([a.view(-1), b.view(-1)], 0, 2, out=reduce_in))
        # 2 tensors: 4 x 2 + (2 + 1) tiles (chunks of 4,000 and 96 bytes) + 2 x 3
        assert peak == 17 * 8
        del inp, whole
    assert cap.report()["unmeasured"] == []
