"""Probe (session 82, helper ol): ob80_cudnn_handle_pieces_probe's six sections with the caching allocator's
own segments in place of raw `cudaMalloc`s, so that the same script runs on a GPU and under the twin
(`vramscope run --gpu h100 ol82_cudnn_pieces_pool_probe.py SECTION`: the twin has no libcudart to call).
The hole is a held (512 - H) MiB segment (a large request of a multiple of 2 MiB is one `cudaMalloc` of
its size); each event's twelve 2 MiB placements are the twelve 2 MiB small-pool segments of a fresh
`MemPool` (24 requests of 1 MiB, held at once), given back with the pool (its deletion empties its
cache). Each line: the event, the change of `mem_get_info`'s free (MiB), the twelve segments' offsets in
MiB from the hole segment's end, in address order. On the H100 it should print ob80's figures
(ob80_cudnn_handle_pieces_probe_h100.out), as the raw probe's placements are the same driver calls.

Run: python3 probes/ol82_cudnn_pieces_pool_probe.py (from validation/run); < 60 s, < 3 GB. Plain python3.
"""

import subprocess
import sys

import torch
import torch.nn.functional as F

MIB = 1 << 20
st = {"end": None, "free": None}


def setup():
    torch.cuda.init()
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    w = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    s = [torch.empty(64 * 1024, device="cuda") for _ in range(48)]
    del w, s
    torch.cuda.synchronize()


def make_hole(hole):
    t = torch.empty((512 - hole) * MIB, dtype=torch.uint8, device="cuda")
    seg = [s for s in torch.cuda.memory._snapshot()["segments"] if s["total_size"] == (512 - hole) * MIB]
    st["end"] = seg[0]["address"] + (512 - hole) * MIB
    return t


def event(tag):
    torch.cuda.synchronize()
    fr = torch.cuda.mem_get_info()[0] / MIB
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        qs = [torch.empty(MIB, dtype=torch.uint8, device="cuda") for _ in range(24)]
    addrs = sorted(s["address"] for s in pool.snapshot())
    del qs
    del pool
    offs = [f"{(q - st['end']) / MIB:+.0f}" for q in addrs] if st["end"] else ["-"]
    dfree = "" if st["free"] is None else f" (free {fr - st['free']:+.0f} MiB)"
    print(f"  {tag}{dfree}: {' '.join(offs)}", flush=True)
    st["free"] = fr


def conv_operands():
    x = torch.randn(8, 16, 32, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    wt = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16, requires_grad=True)
    return x, wt


def section_fwd(hole):
    setup()
    x, wt = conv_operands()
    _hole = make_hole(hole)
    event("before")
    y = F.conv2d(x, wt, padding=1)
    event("conv2d forward (main's first cuDNN handle)")
    y.sum().backward()
    event("conv2d backward (autograd thread's first cuDNN call)")


def section_bwd(hole):
    setup()
    x, wt = conv_operands()
    y = F.conv2d(x, wt, padding=1)
    torch.cuda.synchronize()
    _hole = make_hole(hole)
    event("after conv2d forward, before")
    y.sum().backward()
    event("conv2d backward (autograd thread's first cuDNN call)")


def section_attn(hole):
    setup()
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q, q, q)
        torch.cuda.synchronize()
        _hole = make_hole(hole)
        event("after cuDNN attention forward, before")
        o.sum().backward()
    event("cuDNN attention backward (autograd thread's first cuDNN call)")


SECTIONS = {
    "fwd2": lambda: section_fwd(2),
    "fwd4": lambda: section_fwd(4),
    "fwd6": lambda: section_fwd(6),
    "bwd2": lambda: section_bwd(2),
    "bwd4": lambda: section_bwd(4),
    "attn2": lambda: section_attn(2),
}

if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(f"section {sys.argv[1]}:", flush=True)
        SECTIONS[sys.argv[1]]()
        sys.exit(0)
    for name in SECTIONS:
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=60)
        print(r.stdout + (r.stderr[-600:] if r.returncode else ""), end="", flush=True)
