"""Session 70 (helper lk): the cuSOLVER workspaces of blind322 that the twin names unmeasured (plain
`python3`, one GPU, a few seconds, < 2 GB). For each case: the caching allocator's alloc/free events
inside the call (memory history, sizes in bytes, in order) and the call's peak above what was allocated
before it.

- lk01: `torch.linalg.qr` of (1,000,000, 16) and (64, 16) float32 (svd_lowrank's range finder of a
  1,000,000 x 64 matrix, q 16), and the `torch.svd_lowrank(X, q=16, niter=2)` call itself; for a rule,
  qr of (1,000,000, 8), (250,000, 16) and (64, 8) float32.
- lk04: `torch.linalg.eigh` of (8, 1,024, 3, 3) float32 (syevjBatched over 8,192 3 x 3 matrices) and,
  for a rule, of 1, 1,024 and 65,536 such matrices and of 8,192 in float64; lk04's FFT convolution:
  `torch.fft.rfft2` of (16, 3, 1,024, 1,024) and of (1, 1, 31, 31) float32 with s (1,054, 1,054)
  (zero padded), and `torch.fft.irfft2` of the (16, 3, 1,054, 528) complex64 product with s (1,054, 1,054).
"""

import torch
from _events import events

dev = "cuda"
torch.manual_seed(0)


# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

for m, n in ((1_000_000, 16), (64, 16), (1_000_000, 8), (250_000, 16), (64, 8)):
    a = torch.randn(m, n, device=dev)
    events(f"qr ({m}, {n}) float32", lambda a=a: torch.linalg.qr(a))
    del a
X = torch.randn(1_000_000, 64, device=dev)
events("svd_lowrank (1000000, 64) q 16 niter 2", lambda X=X: torch.svd_lowrank(X, q=16, niter=2))
del X

for shape, dtype in (
    ((8, 1024, 3, 3), torch.float32),
    ((1, 3, 3), torch.float32),
    ((1024, 3, 3), torch.float32),
    ((65536, 3, 3), torch.float32),
    ((8192, 3, 3), torch.float64),
):
    x = torch.randn(*shape[:-1], 8, device=dev, dtype=dtype)
    c = x @ x.transpose(-1, -2)
    events(f"eigh {tuple(shape)} {dtype}", lambda c=c: torch.linalg.eigh(c))
    del x, c

img = torch.rand(16, 3, 1024, 1024, device=dev)
k2 = torch.rand(1, 1, 31, 31, device=dev)
Fi = events("rfft2 (16, 3, 1024, 1024) s (1054, 1054) float32", lambda: torch.fft.rfft2(img, s=(1054, 1054)))
Fk = events("rfft2 (1, 1, 31, 31) s (1054, 1054) float32", lambda: torch.fft.rfft2(k2, s=(1054, 1054)))
Fi.mul_(Fk)
events("irfft2 (16, 3, 1054, 528) s (1054, 1054) complex64", lambda: torch.fft.irfft2(Fi, s=(1054, 1054)))
