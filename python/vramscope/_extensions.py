"""CUDA extensions a program builds at run time with `torch.utils.cpp_extension.load`, which the twin
knows by their sources. The twin neither builds nor runs them: `load` of a known extension answers as
the GPU machine's build did, and any other `load` is PyTorch's own (a build on the twin's host)."""

from __future__ import annotations

import os

#: extension name -> (its sources' file names, why its build fails on the GPU machine). peft 0.21's
#: `fbd_cuda` (BOFT's FastBlockDiag) does not compile against torch 2.11's headers: nvcc stops at
#: fbd_cuda_kernel.cu(66) and (97), "no suitable conversion function from const
#: at::DeprecatedTypeProperties to c10::ScalarType" (H200 probe,
#: fixtures/run/probes/boft_fbd_cuda_probe_h200.txt), so peft falls back to torch.block_diag with a
#: butterfly factor of 1, whichever host answers
FAILS = {
    "fbd_cuda": (
        ("fbd_cuda.cpp", "fbd_cuda_kernel.cu"),
        "nvcc: fbd_cuda_kernel.cu(66) and (97): no suitable conversion function from "
        '"const at::DeprecatedTypeProperties" to "c10::ScalarType" exists (torch 2.11)',
    ),
}


def build_error(name, sources):
    """The error the GPU machine's build of `load(name, sources)` raised, or None where the twin does
    not know the extension."""
    entry = FAILS.get(name)
    if entry is None:
        return None
    files, why = entry
    if isinstance(sources, str):
        sources = [sources]
    if tuple(os.path.basename(str(s)) for s in sources) != files:
        return None
    # torch/utils/cpp_extension.py `_run_ninja_build`'s message
    return RuntimeError(f"Error building extension '{name}': {why}")


def patch(p) -> None:
    """Wrap `torch.utils.cpp_extension.load` (now where imported, else at its import) while `p`
    lasts."""

    def wrap(ext):
        original = ext.load

        def load(name, sources, *args, **kwargs):
            error = build_error(name, sources)
            if error is not None:
                raise error
            return original(name, sources, *args, **kwargs)

        p.set(ext, "load", load)

    p.when_imported("torch.utils.cpp_extension", wrap)
