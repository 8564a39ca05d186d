"""`torch.backends.cuda.cufft_plan_cache` under the twin (blind268/ji04's probe, helper rp)."""

from __future__ import annotations

import pytest
import torch
import vramscope


def test_cufft_plan_cache_reads_counts_and_clears_as_on_the_gpu():
    # CuFFTPlanCache.h: 4,096 plans by default (CUDA >= 10), one per distinct CuFFTParams, least
    # recently used evicted past max_size; the GPU answers these, the CPU host has no CUDA device
    with vramscope.capture():
        cache = torch.backends.cuda.cufft_plan_cache
        assert cache.max_size == 4096
        assert cache.size == 0
        x = torch.randn(4, 64, 64, dtype=torch.complex64, device="cuda")
        torch.fft.fftn(x, dim=(-2, -1))
        torch.fft.ifftn(x, dim=(-2, -1))
        assert cache.size == 1  # forward and inverse share the C2C plan (direction given at exec)
        torch.fft.fftn(x[:2], dim=(-2, -1))  # another batch: another plan
        torch.fft.rfft(torch.randn(8, 100, device="cuda"))
        assert cache.size == 3
        cache.max_size = 1
        assert cache.max_size == 1
        assert cache.size == 1
        cache.clear()
        assert cache.size == 0
        assert cache[0].max_size == 1
        with pytest.raises(RuntimeError, match="device index"):
            _ = cache[3].size
