"""CUDA extensions a program builds at run time with `torch.utils.cpp_extension.load`, which the twin
knows by their sources. On the GPU machine the build succeeds where nvcc and ninja are there (the
H200's image has both) and the program then calls the extension's kernels; the twin neither builds
nor runs them: `load` of a known extension returns a module whose functions allocate what the
extension's C++ allocates (outputs as `torch.empty`, whose values the twin does not carry). Any other
`load` is PyTorch's own."""

from __future__ import annotations

import os
import types

import torch


def _fbd_forward(input):
    """peft's `fbd_cuda.forward` (peft/tuners/boft/fbd/fbd_cuda_kernel.cu
    `forward_fast_block_diag_cuda`): `at::zeros({z, N*b, N*b}, input.options())` for an input of
    (z, N, b, b), the block-diagonal matrices, returned in a list."""
    z, n, b, _ = input.shape
    return [torch.empty((z, n * b, n * b), dtype=input.dtype, device=input.device)]


def _fbd_backward(grad_output, input):
    """peft's `fbd_cuda.backward` (`backward_fast_block_diag_cuda`): `at::zeros_like(input)`, the
    blocks' gradient, returned in a list."""
    return [torch.empty_like(input)]


#: extension name -> (the sources' file names, the functions of its module)
KNOWN = {
    "fbd_cuda": (
        ("fbd_cuda.cpp", "fbd_cuda_kernel.cu"),
        {"forward": _fbd_forward, "backward": _fbd_backward},
    ),
}


def known_module(name, sources):
    """The twin's module for `load(name, sources)` of a known extension, else None."""
    entry = KNOWN.get(name)
    if entry is None:
        return None
    files, functions = entry
    if isinstance(sources, str):
        sources = [sources]
    if tuple(os.path.basename(str(s)) for s in sources) != files:
        return None
    module = types.ModuleType(name)
    for fn_name, fn in functions.items():
        setattr(module, fn_name, fn)
    return module


def patch(p) -> None:
    """Wrap `torch.utils.cpp_extension.load` (now where imported, else at its import) while `p`
    lasts."""

    def wrap(ext):
        original = ext.load

        def load(name, sources, *args, **kwargs):
            module = known_module(name, sources)
            return module if module is not None else original(name, sources, *args, **kwargs)

        p.set(ext, "load", load)

    p.when_imported("torch.utils.cpp_extension", wrap)
