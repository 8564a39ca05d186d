"""CUDA extensions built at run time (`cpp_extension.load`) that the twin knows by their sources."""

from __future__ import annotations

import pytest
import vramscope


def test_peft_fbd_cuda_build_fails_as_on_the_gpu_machine():
    # peft 0.21's BOFT builds `fbd_cuda` at its first layer (peft/tuners/boft/layer.py get_fbd_cuda). On
    # the H200's image nvcc stops at fbd_cuda_kernel.cu against torch 2.11's headers, and peft falls back
    # to torch.block_diag with a butterfly factor of 1 (boft_fbd_cuda_probe_h200.txt). The twin answers
    # that failure without building: 6d851a20 had the build succeed (a butterfly factor of 2 and peaks
    # 250 MB over the GPU's)
    with vramscope.capture(gpu="h200"):
        from torch.utils.cpp_extension import load  # as peft imports it, inside the call

        with pytest.raises(RuntimeError, match="Error building extension 'fbd_cuda'"):
            load(name="fbd_cuda", sources=["/x/fbd/fbd_cuda.cpp", "/x/fbd/fbd_cuda_kernel.cu"], verbose=True)
