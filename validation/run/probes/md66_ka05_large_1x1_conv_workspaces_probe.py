"""blind286/ka05's three cuDNN forwards that conv_sweep.py skipped (an operand over MAX_OPERAND_BYTES):
fp32 no_grad 1x1 convolutions at batch 512 over 325-node maps. Prints, for each, the bytes the
convolution requested beyond its output (its workspace) and how many allocations it made.
ka05's phase-1 peak (the GPU's 512 bytes above the twin's, which estimates the first as 0 bytes from
the (512, 224, 325, 10) neighbour) sits on the first. < 10 GB, < 20 s; plain python3."""

import torch
import torch.nn.functional as F

PROBLEMS = [
    ((512, 224, 325, 12), (32, 224, 1, 1)),
    ((512, 32, 325, 10), (256, 32, 1, 1)),
    ((512, 32, 325, 12), (256, 32, 1, 1)),
]

with torch.no_grad():
    for xs, ws in PROBLEMS:
        x = torch.empty(xs, device="cuda")
        w = torch.empty(ws, device="cuda")
        b = torch.empty(ws[0], device="cuda")
        torch.cuda.synchronize()
        s0 = torch.cuda.memory_stats()
        y = F.conv2d(x, w, b)
        s1 = torch.cuda.memory_stats()
        extra = s1["requested_bytes.all.peak"] - s0["requested_bytes.all.current"] - y.numel() * 4
        n = s1["allocation.all.allocated"] - s0["allocation.all.allocated"]
        print(f"forward x{tuple(xs)} w{tuple(ws)}: workspace {max(extra, 0)} allocations {n}")
        del x, w, b, y
        torch.cuda.reset_peak_memory_stats()
