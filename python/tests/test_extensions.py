"""CUDA extensions built at run time (`cpp_extension.load`) that the twin knows by their sources."""

from __future__ import annotations

import torch
import vramscope


def test_peft_fbd_cuda_loads_and_allocates_its_kernels_outputs():
    # peft 0.21's BOFT builds `fbd_cuda` at its first layer (peft/tuners/boft/layer.py get_fbd_cuda); on a
    # machine with nvcc and ninja the build succeeds and FastBlockDiag's forward allocates
    # at::zeros({z, N*b, N*b}), its backward at::zeros_like(input) (fbd/fbd_cuda_kernel.cu). The twin
    # used to run PyTorch's build on its own host, which failed without ninja: peft then took
    # torch.block_diag and a butterfly factor of 1, not the GPU machine's model
    with vramscope.capture(gpu="h200"):
        from torch.utils.cpp_extension import load  # as peft imports it, inside the call

        ext = load(
            name="fbd_cuda", sources=["/x/fbd/fbd_cuda.cpp", "/x/fbd/fbd_cuda_kernel.cu"], verbose=True
        )
        x = torch.empty(2, 16, 32, 32, device="cuda")
        before = torch.cuda.memory_allocated()
        (y,) = ext.forward(x)
        assert y.shape == (2, 512, 512) and y.dtype == x.dtype
        assert torch.cuda.memory_allocated() - before == 2 * 512 * 512 * 4
        (g,) = ext.backward(y, x)
        assert g.shape == x.shape
        assert torch.cuda.memory_allocated() - before == 2 * 512 * 512 * 4 + x.numel() * 4
