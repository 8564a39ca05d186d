"""km67 (session 67): where the CUDA driver puts the first segments around an LSTM's first
`flatten_parameters` (blind298/km03: the LSTM's 14 MiB flat-weight buffer lies at B-504 MiB on the
H100, B-448 in the twin; docs/driver-placement.md's anchor B = the first 2 MiB segment + 2 MiB).

Each case runs in a fresh process (placement is the process's state): the context is made by an
`empty` (no kernel, as km03's `.to(device)` copies), then CASE's first op, then
`nn.LSTM(256, 512, bidirectional=True).to("cuda")` (parameter copies, then flatten_parameters: cuDNN's
handle and RNN descriptors, the `zeros` flat buffer: the process's first kernel), then a 14 MiB and a
2 MiB `empty`. Prints per case one line per segment, `CASE seg I offset_MiB size` (offset from B), then
on a GPU `CASE map START_MiB LEN_MiB PERMS PATH` for each mapping of /proc/self/maps that appeared
during the LSTM's move (the twin prints no map lines).
Cases: plain (as km03), after_mm (a cuBLAS matmul first), after_conv (a cuDNN convolution first)."""

import os
import subprocess
import sys

MiB = 2**20


def maps():
    try:
        with open("/proc/self/maps") as f:
            return set(f.read().splitlines())
    except OSError:
        return set()


def child(case):
    import torch
    from torch import nn

    x = torch.empty(16, device="cuda")
    segs = torch.cuda.memory_snapshot()
    B = min(s["address"] for s in segs) + 2 * MiB
    if case == "after_mm":
        a = torch.empty(64, 64, device="cuda")
        (a @ a).sum()
    elif case == "after_conv":
        a = torch.empty(1, 3, 16, 16, device="cuda")
        w = torch.empty(4, 3, 3, 3, device="cuda")
        torch.nn.functional.conv2d(a, w)
    before = maps()
    lstm = nn.LSTM(256, 512, bidirectional=True).to("cuda")
    after = maps()
    big = torch.empty(14 * MiB // 4, device="cuda")
    small = torch.empty(2 * MiB // 4, device="cuda")
    torch.cuda.synchronize()
    segs = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    for i, s in enumerate(segs):
        print(f"{case} seg {i} offset {(s['address'] - B) / MiB:.3f} size {s['total_size']}")
    if "vramscope" not in sys.modules and after:
        for line in sorted(after - before):
            parts = line.split()
            lo, hi = (int(v, 16) for v in parts[0].split("-"))
            path = parts[5] if len(parts) > 5 else ""
            print(f"{case} map {(lo - B) / MiB:.3f} {(hi - lo) / MiB:.3f} {parts[1]} {path}")
    del x, lstm, big, small


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
    else:
        for case in ("plain", "after_mm", "after_conv"):
            out = subprocess.run(
                [sys.executable, __file__, case], capture_output=True, text=True, env=os.environ
            )
            sys.stdout.write(out.stdout)
            if out.returncode:
                print(f"{case} failed rc {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
