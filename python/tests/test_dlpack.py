"""DLPack export and import of simulated CUDA tensors (`_dlpack.py`): zero-copy, the capsule keeping
the exported tensor's storage until it is consumed (blind293/kh04)."""

from __future__ import annotations

import pytest
import torch
import vramscope
from torch.utils import dlpack


def test_dlpack_round_trip_aliases_the_device_tensor_without_allocating():
    # (the functions read from the module inside the capture, as a program's imports bind them)
    with vramscope.capture(gpu="h100"):
        emb = torch.randn(256, 1024, device="cuda")
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        capsule = dlpack.to_dlpack(emb)
        received = dlpack.from_dlpack(capsule)
        again = torch.from_dlpack(received)  # through `__dlpack__` / `__dlpack_device__`
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
        assert again.data_ptr() == emb.data_ptr() and again.is_cuda and again.shape == (256, 1024)
        with pytest.raises(RuntimeError, match="consumed only once"):
            dlpack.from_dlpack(capsule)
        # the imports keep the exporter's storage, as `fromDLPack`'s deleter does
        del emb, received
        assert torch.cuda.memory_allocated() == 1 << 20
        del again
        assert torch.cuda.memory_allocated() == 0


def test_an_unconsumed_capsule_holds_the_tensor_until_it_dies():
    with vramscope.capture(gpu="h100"):
        capsule = dlpack.to_dlpack(torch.ones(1024, device="cuda"))
        assert torch.cuda.memory_allocated() == 4096
        del capsule
        assert torch.cuda.memory_allocated() == 0
