"""GPU probe for blind334 (session 72, helper lw): cuFFT's work area for the plans of lw01 (float64
ETDRK4: r2c / c2r of 512 and 128 points), lw03 (float32 `torch.stft` of n_fft 1,024 over framed 2 s
clips, and the 160,000-point full `fft` of a real signal and `ifft` of its product) and lw05 (float32
2-D r2c / c2r of 128 x 128). The twin takes cuFFT's work area (`at::empty({workspace_size})` in
`_exec_fft`, cuda/SpectralOps.cpp) from `_CUFFT_WORKSPACE` (python/vramscope/_kernels/fft.py) and as zero
for every plan not listed. Per case this prints the peak above the start, the output's bytes and the
difference (work area plus any clone of the input), each with a fresh plan cache; the twin prints the same
lines under `vramscope run`. A nonzero `extra` where the twin prints 0 decides a new table entry.

Run: python3 validation/run/probes/lw72_blind334_cufft_plans_probe.py"""

import torch

dev = "cuda"
f64, f32 = torch.float64, torch.float32
win = torch.hann_window(1024, device=dev)
cases = [
    # (label, shape, dtype, fn)
    ("rfft f64 512", (1024, 512), f64, lambda x: torch.fft.rfft(x)),
    ("irfft f64 512", (1024, 257), torch.complex128, lambda x: torch.fft.irfft(x, n=512)),
    ("rfft f64 128 b256", (256, 128), f64, lambda x: torch.fft.rfft(x)),
    ("rfft f64 128 b1024", (1024, 128), f64, lambda x: torch.fft.rfft(x)),
    ("irfft f64 128 b256", (256, 65), torch.complex128, lambda x: torch.fft.irfft(x, n=128)),
    ("irfft f64 128 b1024", (1024, 65), torch.complex128, lambda x: torch.fft.irfft(x, n=128)),
    ("stft f32 1024/320 b32", (32, 32000), f32,
     lambda x: torch.stft(x, 1024, hop_length=320, window=win, return_complex=True)),
    ("stft f32 1024/320 b80", (80, 32000), f32,
     lambda x: torch.stft(x, 1024, hop_length=320, window=win, return_complex=True)),
    ("fft r2c-full f32 160000", (16, 160000), f32, lambda x: torch.fft.fft(x)),
    ("ifft c2c f32 160000", (16, 160000), torch.complex64, lambda x: torch.fft.ifft(x)),
    ("irfft2 f32 128x128 b64", (64, 128, 65), torch.complex64, lambda x: torch.fft.irfft2(x, s=(128, 128))),
    ("irfft2 f32 128x128 b256", (256, 128, 65), torch.complex64, lambda x: torch.fft.irfft2(x, s=(128, 128))),
    ("rfft2 f32 128x128 b32", (32, 128, 128), f32, lambda x: torch.fft.rfft2(x)),
    ("rfft2 f32 128x128 b256", (256, 128, 128), f32, lambda x: torch.fft.rfft2(x)),
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
