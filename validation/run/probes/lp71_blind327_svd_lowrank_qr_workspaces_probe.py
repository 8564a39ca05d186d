"""Session 71 (helper lp): the cuSOLVER geqrf workspace that the twin names unmeasured in blind327/lp01
(peft LoRA-GA's `torch.svd_lowrank(grad, q=64, niter=4)` of each estimated gradient; the (3,072, 64) float32
range-finder QR of the gate/up/down projections) (plain `python3`, one GPU, a few seconds, < 1 GB). For each
case: the caching allocator's alloc/free events inside the call (memory history, sizes in bytes, in order)
and the call's peak above what was allocated before it.

- `torch.linalg.qr` of (3,072, 64), and for a rule (3,072, 32), (3,072, 128), (6,144, 64), (12,288, 64)
  float32;
- `torch.svd_lowrank(G, q=64, niter=4)` of (3,072, 1,024), (1,024, 3,072) and (512, 1,024) float32, as lp01.
"""

import torch
from _events import events

dev = "cuda"
torch.manual_seed(0)


# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

for m, n in ((3072, 64), (3072, 32), (3072, 128), (6144, 64), (12288, 64)):
    a = torch.randn(m, n, device=dev)
    events(f"qr ({m}, {n}) float32", lambda a=a: torch.linalg.qr(a))
    del a
for shape in ((3072, 1024), (1024, 3072), (512, 1024)):
    g = torch.randn(*shape, device=dev)
    events(f"svd_lowrank {shape} q 64 niter 4", lambda g=g: torch.svd_lowrank(g, q=64, niter=4))
    del g
