"""GPU probe for blind288/kc04 (session 65, helper kc): cuFFT's work area for the radar chain's plans.
The twin takes cuFFT's work area (`at::empty({workspace_size})` in `_exec_fft`, cuda/SpectralOps.cpp)
from `_CUFFT_WORKSPACE` (python/vramscope/_kernels/fft.py) and as zero for every plan not listed.
kc04's matched filter runs 1-D complex-to-complex plans of 4,351 = 19 x 229 points (229 is a prime
above cuFFT's radix kernels, so cuFFT may take Bluestein's algorithm, whose work area is a padded
power-of-two signal an item), beside plans of 4,096, 128 (along a strided dim), a 2-D (128, 16) one
over (pulses, channels) and the r2c / c2r pair of `ihfft` / `hfft` at 4,096. Per plan and batch this
prints the peak above the start, the output's bytes and the difference (the work area plus any
clone of the input), each with a fresh plan cache. The twin prints the same lines under
`vramscope run` (zero work areas today).

Run: python3 validation/run/probes/kc04_cufft_bluestein_workspace_probe_s65.py"""

import torch

dev = "cuda"
cases = [
    # (label, shape, dtype, fn)
    ("fft c2c n=4351 zero-pad", (4, 8, 128, 4096), torch.complex64, lambda x: torch.fft.fft(x, n=4351)),
    ("fft c2c n=4351 zero-pad", (6, 2, 128, 4096), torch.complex64, lambda x: torch.fft.fft(x, n=4351)),
    ("ifft c2c 4351", (4, 8, 128, 4351), torch.complex64, lambda x: torch.fft.ifft(x, dim=-1)),
    ("fft c2c 4351 batch 1", (1, 4351), torch.complex64, lambda x: torch.fft.fft(x, dim=-1)),
    ("fft c2c 4351 batch 64", (64, 4351), torch.complex64, lambda x: torch.fft.fft(x, dim=-1)),
    ("fft c2c 4096", (4, 8, 128, 4096), torch.complex64, lambda x: torch.fft.fft(x, dim=-1)),
    ("fft c2c 128 on dim 2", (6, 2, 128, 4096), torch.complex64, lambda x: torch.fft.fft(x, dim=2)),
    ("fftn c2c (128, 16) on dims (2, 1)", (12, 8, 128, 4096), torch.complex64,
     lambda x: torch.fft.fftn(x, s=(128, 16), dim=(2, 1))),
    ("ihfft r2c 4096", (12, 4096), torch.float32, lambda x: torch.fft.ihfft(x, dim=-1)),
    ("hfft c2r 4096", (12, 2049), torch.complex64, lambda x: torch.fft.hfft(x, n=4096, dim=-1)),
]  # fmt: skip
for label, shape, dtype, fn in cases:
    torch.backends.cuda.cufft_plan_cache.clear()
    x = torch.zeros(shape, dtype=dtype, device=dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    y = fn(x)
    torch.cuda.synchronize()
    out = y.numel() * y.element_size()
    peak = torch.cuda.max_memory_allocated() - base
    print(f"{label} {tuple(shape)}: peak above start {peak}, output {out}, extra {peak - out}")
    del x, y
