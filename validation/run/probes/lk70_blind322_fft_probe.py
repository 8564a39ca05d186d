"""Session 70 (helper lk): cuFFT work areas of blind322/lk04's zero-padded FFT convolution (plain
`python3`, one GPU, a few seconds, < 2 GB), and the rest of lk70_blind322_workspaces_probe, whose eigh
of 65,536 3 x 3 matrices raised on the H100 (CUSOLVER_STATUS_INTERNAL_ERROR) before these cases.
For each case: the caching allocator's alloc/free events inside the call (memory history, sizes in
bytes, in order) and the call's peak above what was allocated before it.

- lk04: `torch.fft.rfft2` of (16, 3, 1,024, 1,024) and of (1, 1, 31, 31) float32 with s (1,054, 1,054)
  (zero padded), `torch.fft.irfft2` of the (16, 3, 1,054, 528) complex64 product with s (1,054, 1,054);
  for a rule, the same at batch 1 x 1 and 4 x 3, and without padding (1,024 x 1,024, batch 48).
- eigh of (8,192, 3, 3) float64 (XsyevBatched).
"""

import torch
from _events import events

dev = "cuda"
torch.manual_seed(0)


# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

for b, c in ((16, 3), (1, 1), (4, 3)):
    img = torch.rand(b, c, 1024, 1024, device=dev)
    k2 = torch.rand(1, 1, 31, 31, device=dev)
    Fi = events(
        f"rfft2 ({b}, {c}, 1024, 1024) s (1054, 1054) float32",
        lambda i=img: torch.fft.rfft2(i, s=(1054, 1054)),
    )
    Fk = events(
        "rfft2 (1, 1, 31, 31) s (1054, 1054) float32", lambda k=k2: torch.fft.rfft2(k, s=(1054, 1054))
    )
    Fi.mul_(Fk)
    full = events(
        f"irfft2 ({b}, {c}, 1054, 528) s (1054, 1054) complex64",
        lambda f=Fi: torch.fft.irfft2(f, s=(1054, 1054)),
    )
    del Fi, Fk, full
    if b == 16:
        F2 = events("rfft2 (16, 3, 1024, 1024) float32", lambda i=img: torch.fft.rfft2(i))
        events("irfft2 (16, 3, 1024, 513) complex64", lambda f=F2: torch.fft.irfft2(f, s=(1024, 1024)))
        del F2
    del img, k2

x = torch.randn(8192, 3, 8, device=dev, dtype=torch.float64)
c = x @ x.transpose(-1, -2)
events("eigh (8192, 3, 3) torch.float64", lambda: torch.linalg.eigh(c))
