"""Probe (session 79, helper ng): what the autograd thread's first cuDNN call takes of the newest hole.

na79_kept_chunk_probe's H100 output: the autograd thread's first matrix product (its cuBLAS handle) takes
nothing from the newest chunk's hole, a cuDNN attention backward there does (the probe moved to a chunk's
low end +4 MiB, nothing known below it), and the main thread's first cuDNN attention forward of a BERT took
2 MiB though a convolution had made its cuDNN handle. The twin (ng-s79) places 4 MiB by rule 2 at the
autograd thread's first cuDNN attention backward (`_attention.CUDNN_THREAD_PIECE`): blind349/mn05 7/7 and
blind345/mi02 5/5 exact. This probe says whether that piece is the thread's cuDNN handle (then any first
cuDNN call on that thread, a convolution's backward too, takes it) or the attention backward's own (its
runtime-compiled kernels: then every new attention graph may take one), and its size.

Three fresh processes, each: context, first matmul, a cached 128 MiB block and cached small blocks (so the
caching allocator makes no segment), a raw 500 MiB `cudaMalloc` (the newest chunk, 12 MiB hole), then
events; after each, a raw 2 MiB `cudaMalloc` probes the hole (then freed): its offset from the 500 MiB
segment's end in MiB (+0: nothing taken; +2k: 2k MiB taken; a jump elsewhere: the hole filled) and the
change of cudaMemGetInfo's free (MiB).
  conv: conv2d fp16 forward (main's first cuDNN handle; rule 18: 2 MiB and a 2 MiB page-locked buffer),
        its backward (the autograd thread's first cuDNN call: a convolution's), then cuDNN attention forward
        and backward (the thread's first attention backward, its handle made).
  attn: cuDNN attention forward (main's first cuDNN handle), its backward (the autograd thread's first
        cuDNN call), then another shape's forward and backward (new graphs, handles made), then a second
        backward of the first shape.
  kept: python/tests/test_capture.py's test_the_autograd_thread_s_first_cudnn_attention_backward_keeps_
        the_newest_chunk script: the new 32 MiB segment's offset from the 954 MiB one's (twin ng-s79: [0],
        the chunk kept; main's twin: elsewhere).
Each section prints the SDPA backend it ran (a cuDNN op name) so a non-cuDNN choice shows.

Run: python3 probes/ng79_cudnn_thread_probe.py (from validation/run); < 60 s, < 3 GB. Plain python3.
"""

import ctypes
import subprocess
import sys

MIB = 1 << 20


def setup():
    import torch

    torch.cuda.init()
    rt = None
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                rt = ctypes.CDLL(line.split()[-1])
                break
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    rt.cudaMemGetInfo.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    w = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    s = [torch.empty(64 * 1024, device="cuda") for _ in range(48)]
    del w, s
    torch.cuda.synchronize()
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 500 * MIB) == 0
    big, end = p.value, p.value + 500 * MIB
    last = {"off": None, "free": None}

    def free_mib():
        f, t = ctypes.c_size_t(), ctypes.c_size_t()
        assert rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)) == 0
        return f.value / MIB

    def event(tag):
        torch.cuda.synchronize()
        q = ctypes.c_void_p()
        assert rt.cudaMalloc(ctypes.byref(q), 2 * MIB) == 0
        assert rt.cudaFree(q) == 0
        segs = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()] + [(big, 500 * MIB)]
        known = any(a <= q.value - 2 * MIB and q.value <= a + n for a, n in segs) or q.value % (32 * MIB) == 0
        off, fr = (q.value - end) / MIB, free_mib()
        moved = "" if off == last["off"] else "   <- moved"
        dfree = "" if last["free"] is None else f" (free {fr - last['free']:+.0f} MiB)"
        note = "" if known else " (no segment below it)"
        print(f"  {tag}: probe at {off:+.0f}{note}{dfree}{moved}", flush=True)
        last.update(off=off, free=fr)

    return torch, event


def ops_named(torch, fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    names = []

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "attention" in str(func) or "convolution" in str(func):
                names.append(str(func))
            return func(*args, **(kwargs or {}))

    with Names():
        out = fn()
    return out, sorted(set(names))


def attn(torch, event, shape, tag):
    import torch.nn.functional as F

    q = torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True)
    o, names = ops_named(torch, lambda: F.scaled_dot_product_attention(q, q, q))
    event(f"{tag} attention forward {names}")
    _, names = ops_named(torch, lambda: o.sum().backward())
    event(f"{tag} attention backward {names}")
    return q


def section_conv():
    torch, event = setup()
    event("start")
    x = torch.randn(8, 16, 32, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    wt = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16, requires_grad=True)
    y, names = ops_named(torch, lambda: torch.nn.functional.conv2d(x, wt, padding=1))
    event(f"conv2d forward (main's first cuDNN handle) {names}")
    _, names = ops_named(torch, lambda: y.sum().backward())
    event(f"conv2d backward (autograd thread's first cuDNN call) {names}")
    attn(torch, event, (2, 4, 128, 64), "then")


def section_attn():
    torch, event = setup()
    event("start")
    q = attn(torch, event, (2, 4, 128, 64), "first (autograd thread's first cuDNN call at its backward)")
    attn(torch, event, (4, 8, 256, 64), "second shape")
    import torch.nn.functional as F

    F.scaled_dot_product_attention(q, q, q).sum().backward()
    event("first shape again, forward and backward")


KEPT = """
import torch
import torch.nn.functional as F
a = torch.randn(256, 256, device="cuda")
b = a @ a
q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16, requires_grad=True)
spare = [torch.empty(64 << 10, device="cuda") for _ in range(16)]
del spare
o = F.scaled_dot_product_attention(q, q, q)
x = torch.empty(1000144896, dtype=torch.uint8, device="cuda")
o.sum().backward()
torch.cuda.synchronize()
big = {s["address"] for s in torch.cuda.memory_snapshot() if s["total_size"] == 32 << 20}
xa = x.data_ptr()
del x
torch.cuda.empty_cache()
y = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
segs = torch.cuda.memory_snapshot()
print([(s["address"] - xa) >> 20 for s in segs if s["total_size"] == 32 << 20 and s["address"] not in big])
"""

if __name__ == "__main__":
    if len(sys.argv) > 1:
        {"conv": section_conv, "attn": section_attn}[sys.argv[1]]()
        sys.exit(0)
    for name in ("conv", "attn"):
        print(f"section {name}:", flush=True)
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=120)
        print(r.stdout + (r.stderr[-600:] if r.returncode else ""), end="", flush=True)
    r = subprocess.run([sys.executable, "-c", KEPT], capture_output=True, text=True, timeout=120)
    print(f"kept: new 32 MiB segment at {r.stdout.strip() or r.stderr[-300:]} (twin ng-s79: [0])", flush=True)
