"""Probe (session 82, helper ol): the cuDNN handle pieces ob80's probe left open, on a GPU and under the twin.

ol82_cudnn_pieces_pool_probe's way (a held (512 - H) MiB segment makes an H MiB hole; each event lists the
twelve 2 MiB small-pool segments of a fresh MemPool, in address order, as offsets in MiB from the hole
segment's end, and the change of `mem_get_info`'s free); on a GPU each event also lists the `/dev/zero`
mappings (the driver's page-locked buffers) made since the last event, by their offsets. The twin's rule 18
(session 82) answers: nobuf2's forward takes the handle's 2 MiB and its buffer (4 MiB of places; the three
pieces more only where the buffer was mapped before, from validation/run/07's record), its backward 5
pieces; rnn2's backward 2 pieces; bn2's backward 4; rnnfwd2's `.cuda()` 1 (an RNN's handle after other
kernels, the buffer mapped by the `.item()`).
  nobuf2: no `.item()` before: the conv2d forward makes the first cuDNN handle and its page-locked buffer:
      how many places it takes (4 MiB, or 10 as ob80's 8 and the buffer), where the buffer lies among them,
      and whether free memory drops by 2 or 8 MiB;
  rnn2: a cuDNN GRU's forward first, then the hole, then its backward (the autograd thread's first cuDNN
      call an RNN's: the twin takes 4 MiB from blind312/la03's record, the probe's attention 8);
  bn2: a BatchNorm2d (cuDNN) forward first, then the hole, then its backward (the thread's first cuDNN
      call a batch norm's, which a ResNet's backward makes before any convolution's);
  rnnfwd2: the hole, then a cuDNN GRU's `.cuda()` (its `flatten_parameters`) as the main thread's first
      cuDNN handle (km67's after_mm: 2 MiB and a buffer; the twin: 2 MiB, the `.item()` having mapped the
      buffer), then its forward.

Run: python3 probes/ol82_cudnn_pieces_more_probe.py (from validation/run); < 60 s, < 3 GB. Plain python3.
"""

import subprocess
import sys

import torch

MIB = 1 << 20
st = {"end": None, "free": None, "zero": None}


def setup(item=True):
    torch.cuda.init()
    a = torch.randn(1024, 1024, device="cuda")
    s = (a @ a).sum()
    if item:
        s.item()
    else:
        s.cpu()  # a pageable copy: no page-locked block
    w = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    small = [torch.empty(64 * 1024, device="cuda") for _ in range(48)]
    del w, small
    torch.cuda.synchronize()


def zero_maps():
    try:
        with open("/proc/self/maps") as f:
            return {int(line.split("-")[0], 16) for line in f if "/dev/zero" in line}
    except OSError:
        return set()


def make_hole(hole):
    t = torch.empty((512 - hole) * MIB, dtype=torch.uint8, device="cuda")
    seg = [s for s in torch.cuda.memory._snapshot()["segments"] if s["total_size"] == (512 - hole) * MIB]
    st["end"] = seg[0]["address"] + (512 - hole) * MIB
    st["zero"] = zero_maps()
    return t


def event(tag):
    torch.cuda.synchronize()
    fr = torch.cuda.mem_get_info()[0] / MIB
    zero = zero_maps()
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        qs = [torch.empty(MIB, dtype=torch.uint8, device="cuda") for _ in range(24)]
    addrs = sorted(s["address"] for s in pool.snapshot())
    del qs
    del pool
    offs = [f"{(q - st['end']) / MIB:+.0f}" for q in addrs]
    dfree = "" if st["free"] is None else f" (free {fr - st['free']:+.0f} MiB)"
    new = sorted(zero - (st["zero"] or set()))
    zs = " ".join(f"{(z - st['end']) / MIB:+.0f}" for z in new)
    maps = f"  /dev/zero new at {zs}" if new else ""
    print(f"  {tag}{dfree}: {' '.join(offs)}{maps}", flush=True)
    st["free"], st["zero"] = fr, zero


def section_nobuf(hole):
    import torch.nn.functional as F

    setup(item=False)
    x = torch.randn(8, 16, 32, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    wt = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16, requires_grad=True)
    _hole = make_hole(hole)
    event("before")
    y = F.conv2d(x, wt, padding=1)
    event("conv2d forward (the first cuDNN handle, no page-locked buffer yet)")
    y.sum().backward()
    event("conv2d backward (autograd thread's first cuDNN call)")


def section_rnn(hole):
    gru = torch.nn.GRU(64, 64, num_layers=2).cuda()
    x = torch.randn(16, 8, 64, device="cuda", requires_grad=True)
    y, _ = gru(x)
    torch.cuda.synchronize()
    _hole = make_hole(hole)
    event("after the GRU's forward, before")
    y.sum().backward()
    event("GRU backward (autograd thread's first cuDNN call)")


def section_bn(hole):
    bn = torch.nn.BatchNorm2d(16).cuda()
    x = torch.randn(8, 16, 32, 32, device="cuda", requires_grad=True)
    y = bn(x)
    torch.cuda.synchronize()
    _hole = make_hole(hole)
    event("after BatchNorm2d's forward, before")
    y.sum().backward()
    event("BatchNorm2d backward (autograd thread's first cuDNN call)")


def section_rnnfwd(hole):
    x = torch.randn(16, 8, 64, device="cuda")
    _hole = make_hole(hole)
    event("before")
    gru = torch.nn.GRU(64, 64, num_layers=2).cuda()
    event("GRU .cuda() (flatten_parameters: the main thread's first cuDNN handle, an RNN's)")
    gru(x)
    event("GRU forward")


SECTIONS = {
    "nobuf2": lambda: section_nobuf(2),
    "rnn2": lambda: (setup(), section_rnn(2)),
    "bn2": lambda: (setup(), section_bn(2)),
    "rnnfwd2": lambda: (setup(), section_rnnfwd(2)),
}

if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(f"section {sys.argv[1]}:", flush=True)
        SECTIONS[sys.argv[1]]()
        sys.exit(0)
    for name in SECTIONS:
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=60)
        print(r.stdout + (r.stderr[-600:] if r.returncode else ""), end="", flush=True)
