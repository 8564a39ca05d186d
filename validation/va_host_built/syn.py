"""Synthetic host-built case: MODE none | big | bigpar. big: a 700 MiB CPU tensor (glibc maps it) before the
context; bigpar: also a parallel CPU op on it first (the OpenMP pool's threads and their malloc arenas).
Then .cuda(), the CPU tensor freed, nine 20 MiB and two 64 MiB CUDA tensors."""

import sys

import torch

mode = sys.argv[1]
x = torch.empty(700 << 20, dtype=torch.uint8) if mode != "none" else torch.empty(16, dtype=torch.uint8)
if mode == "bigpar":
    x.fill_(1)
y = x.cuda()
del x
keep = [torch.empty(20 << 20, dtype=torch.uint8, device="cuda") for _ in range(9)]
keep += [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(2)]
torch.cuda.synchronize()
print("done", [hex(t.data_ptr()) for t in [y, *keep]])
