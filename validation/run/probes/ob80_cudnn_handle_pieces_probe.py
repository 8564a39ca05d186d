"""Probe (session 80, helper ob): the pieces the driver takes at a cuDNN handle, one placement or several.

ng79_cudnn_thread_probe's H100 output: the main thread's first cuDNN call (a convolution's or attention's
forward, after other kernels) took the low 8 MiB of the newest chunk's 12 MiB hole (free -8 MiB), where rule
18 (`Runtime::cudnn_plan`) places 2 MiB and a 2 MiB page-locked buffer (4 MiB); the autograd thread's first
cuDNN call (a convolution's or attention's backward) filled the 4 MiB left (the twin places one 4 MiB piece,
`_capture.CUDNN_THREAD_PIECE`), the convolution's backward 2 MiB more in the next hole. This probe maps the
free holes (twelve raw 2 MiB `cudaMalloc`s held at once, then freed: their offsets in MiB from the end of a
raw segment of 512 - H MiB, so its chunk has an H MiB hole) before and after each event, so every piece
shows where it went:
  fwdH (H = 2, 4, 6): the hole made before a conv2d's forward, the main thread's first cuDNN handle: 6 MiB
      and a 2 MiB buffer ("fresh" sizes: a 6 MiB piece skips a 2 or 4 MiB hole), or 2 + 2 + 4 (pieces
      fill the hole from its low end), or one 8 MiB placement?
  bwdH (H = 2, 4): a conv2d's forward first, then the hole, then its backward, the autograd thread's first
      cuDNN call: 2 MiB + 2 MiB buffer (the first 2 fill a 2 MiB hole) or one 4 MiB placement (a 2 MiB hole
      kept), and where the convolution's 2 MiB more goes.
  attn2: the same as bwd2 with cuDNN attention (fp16 SDPA) instead of the convolution.
Each line: the event, the change of cudaMemGetInfo's free (MiB), the twelve offsets (a piece taken shows as
an offset gone from the list).

Run: python3 probes/ob80_cudnn_handle_pieces_probe.py (from validation/run); < 60 s, < 3 GB. Plain python3.
"""

import ctypes
import subprocess
import sys

MIB = 1 << 20


def setup(hole):
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
    st = {"end": None, "free": None}

    def free_mib():
        f, t = ctypes.c_size_t(), ctypes.c_size_t()
        assert rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)) == 0
        return f.value / MIB

    def make_hole():
        p = ctypes.c_void_p()
        assert rt.cudaMalloc(ctypes.byref(p), (512 - hole) * MIB) == 0
        st["end"] = p.value + (512 - hole) * MIB
        return p

    def event(tag):
        torch.cuda.synchronize()
        fr = free_mib()
        qs = []
        for _ in range(12):
            q = ctypes.c_void_p()
            assert rt.cudaMalloc(ctypes.byref(q), 2 * MIB) == 0
            qs.append(q.value)
        for q in qs:
            assert rt.cudaFree(ctypes.c_void_p(q)) == 0
        offs = [f"{(q - st['end']) / MIB:+.0f}" for q in qs] if st["end"] else ["-"]
        dfree = "" if st["free"] is None else f" (free {fr - st['free']:+.0f} MiB)"
        print(f"  {tag}{dfree}: {' '.join(offs)}", flush=True)
        st["free"] = fr

    return torch, event, make_hole


def conv_operands(torch):
    x = torch.randn(8, 16, 32, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    wt = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16, requires_grad=True)
    return x, wt


def section_fwd(hole):
    torch, event, make_hole = setup(hole)
    x, wt = conv_operands(torch)
    make_hole()
    event("before")
    y = torch.nn.functional.conv2d(x, wt, padding=1)
    event("conv2d forward (main's first cuDNN handle)")
    y.sum().backward()
    event("conv2d backward (autograd thread's first cuDNN call)")


def section_bwd(hole):
    torch, event, make_hole = setup(hole)
    x, wt = conv_operands(torch)
    y = torch.nn.functional.conv2d(x, wt, padding=1)
    torch.cuda.synchronize()
    make_hole()
    event("after conv2d forward, before")
    y.sum().backward()
    event("conv2d backward (autograd thread's first cuDNN call)")


def section_attn(hole):
    import torch.nn.functional as F

    torch, event, make_hole = setup(hole)
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q, q, q)
        torch.cuda.synchronize()
        make_hole()
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
        SECTIONS[sys.argv[1]]()
        sys.exit(0)
    for name in SECTIONS:
        print(f"section {name}:", flush=True)
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=60)
        print(r.stdout + (r.stderr[-600:] if r.returncode else ""), end="", flush=True)
