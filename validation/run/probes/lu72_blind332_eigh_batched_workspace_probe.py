"""Session 72 (helper lu): the cuSOLVER batched-eigh workspace that blind332/lu04 names unmeasured
(plain `python3`, one GPU, a few seconds, < 12 GB). For each case: the caching allocator's
alloc/free events inside `torch.linalg.eigh` (memory history, sizes in bytes, in order) and the call's
peak above what was allocated before it.

- lu04: `torch.linalg.eigh` of (48, 257, 4, 4) complex64 Hermitian matrices (an MVDR beamformer's
  noise covariances, 12,336 of them); for a rule, 2, 1,024 and 4,096 such matrices, 1,024 of 2 x 2,
  3 x 3, 8 x 8 and 32 x 32 complex64, and 1,024 4 x 4 float32, float64 and complex128.
"""

import torch
from _events import events

dev = "cuda"
torch.manual_seed(0)


# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

for shape, dtype in (
    ((48, 257, 4, 4), torch.complex64),
    ((2, 4, 4), torch.complex64),
    ((1024, 4, 4), torch.complex64),
    ((4096, 4, 4), torch.complex64),
    ((1024, 2, 2), torch.complex64),
    ((1024, 3, 3), torch.complex64),
    ((1024, 8, 8), torch.complex64),
    ((1024, 32, 32), torch.complex64),
    ((1024, 4, 4), torch.float32),
    ((1024, 4, 4), torch.float64),
    ((1024, 4, 4), torch.complex128),
):
    x = torch.randn(*shape[:-1], 8, device=dev, dtype=dtype)
    c = x @ x.transpose(-1, -2).conj()
    events(f"eigh {tuple(shape)} {dtype}", lambda c=c: torch.linalg.eigh(c))
    del x, c
