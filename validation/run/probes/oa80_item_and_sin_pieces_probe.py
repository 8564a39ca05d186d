"""Probe (session 80, helper oa): what the first `.item()` and the first `sin` take on the H100.

nh79_mq02_first_forward_pieces_probe_h100.out: in blind352/mq02 a raw 2 MiB cudaMalloc after every op moves
up by 2 MiB after op 17 (`_local_scalar_dense`, the first `.item()`), op 27 (`bmm`, rule 8's first cuBLAS
handle) and op 33 (`sin`, right after a `cos` that moved nothing); none of them made a segment. The twin
now says (rule 16, session 80): `.item()` copies into a one-element page-locked block of the caching host
allocator (CUDAScalar.cu), and the process's first small block makes the driver map a 2 MiB `/dev/zero`
buffer, in the pool's top while that is the newest chunk with room, else where rule 2 puts a 2 MiB segment.
The `sin` piece has no rule (lazy loading's device code pages? then it would be device memory, cumulative,
and gone under CUDA_MODULE_LOADING=EAGER).

One fresh process per case. Each prints, after every step: where a raw 2 MiB cudaMalloc lands (MiB from where
it landed after the setup), the change of free device memory (MiB; a page-locked buffer takes none), the
`/dev/zero` mappings the step added (offset MiB: size MiB, offsets from the same origin) and the segments
the caching allocator made. Cases:
- `item_pool_top`: zeros (the first kernel: context range given back, the driver's pool), an mm, a relu,
  two 20 MiB segments, then `.item()` of a float, again, of an int64, of a bool (va_pinned's layout: the
  pool's top newest: the buffer in the pool's top, the probe does not move?);
- `item_new_chunk`: the same, then a 500 MiB segment (a new chunk made after the pool, with a 12 MiB hole:
  the twin's test puts a 30 MiB one in the context's released range), then `.item()` (the buffer at the hole's
  low end, rule 2: the probe 2 MiB higher?);
- `item_after_cudnn`: a cuDNN attention first (rule 18's buffer), then `.item()` (no new mapping?);
- `cos_sin` and `sin_cos`: fp32 rotary-sized `cos` then `sin`, and the other order, then eleven other
  pointwise ops' first launches (which first launch moves the probe: the op, or a count?);
- `cos_sin_eager`: `cos_sin` under CUDA_MODULE_LOADING=EAGER (no move: lazy loading's pieces).

Run (from validation/run): python3 probes/oa80_item_and_sin_pieces_probe.py  (< 60 s, < 2 GB; plain python3)
"""

import os
import subprocess
import sys

CHILD = r"""
import ctypes, os, sys
import torch
import torch.nn.functional as F

MIB = 1 << 20


def cudart():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                lib = ctypes.CDLL(line.split()[-1])
                lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
                lib.cudaFree.argtypes = [ctypes.c_void_p]
                lib.cudaMemGetInfo.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2
                return lib
    raise RuntimeError("libcudart not mapped")


def zero_maps():
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "/dev/zero" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                out.add((lo, hi))
    return out


state = {"origin": None, "free": None, "zero": set(), "segs": 0}


def probe():
    torch.cuda.synchronize()
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 2 * MIB) == 0
    assert rt.cudaFree(p) == 0
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    assert rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)) == 0
    return p.value, f.value


def step(tag):
    p, free = probe()
    zero = zero_maps()
    segs = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    if state["origin"] is None:
        state["origin"], state["free"], state["zero"], state["segs"] = p, free, zero, segs
        print(f"  {tag}: origin", flush=True)
        return
    o = state["origin"]
    new = sorted(zero - state["zero"])
    zs = " ".join(f"{(lo - o) / MIB:+.2f}:{(hi - lo) / MIB:.2f}" for lo, hi in new) or "-"
    print(
        f"  {tag}: probe {(p - o) / MIB:+.0f}  free {(free - state['free']) / MIB:+.0f}  "
        f"/dev/zero {zs}  segments +{segs - state['segs']}",
        flush=True,
    )
    state["free"], state["zero"], state["segs"] = free, zero, segs


case = sys.argv[1]
keep = []
a = torch.zeros(1, device="cuda")
m = torch.ones(64, 64, device="cuda")
keep += [a, m, torch.relu(m @ m)]
keep += [torch.empty(20 * MIB, dtype=torch.uint8, device="cuda") for _ in range(2)]
rt = cudart()
step("setup (zeros, mm, relu, two 20 MiB segments)")
x = torch.randn(1, 1024, 32, device="cuda")
step("randn (1, 1024, 32)")
if case == "item_pool_top":
    a.item(); step("first .item() (float32)")
    a.item(); step("second .item() (float32)")
    a.long().item(); step(".item() of an int64")
    (a > 0).item(); step(".item() of a bool")
elif case == "item_new_chunk":
    keep.append(torch.empty(500 * MIB, dtype=torch.uint8, device="cuda")); step("a 500 MiB segment")
    a.item(); step("first .item() (float32)")
    keep.append(torch.empty(MIB, dtype=torch.uint8, device="cuda")); step("a 1 MiB block (2 MiB segment)")
elif case == "item_after_cudnn":
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.bfloat16)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        keep.append(F.scaled_dot_product_attention(q, q, q))
    step("first cuDNN attention")
    a.item(); step("first .item() (float32)")
elif case.startswith("cos_sin") or case == "sin_cos":
    first, second = ("sin", "cos") if case == "sin_cos" else ("cos", "sin")
    keep.append(getattr(x, first)()); step(f"first {first}")
    keep.append(getattr(x, second)()); step(f"first {second}")
    for name in ("tan", "exp", "log", "sqrt", "tanh", "sigmoid", "erf", "atan", "sinh", "cosh", "expm1"):
        keep.append(getattr(torch, name)(x)); step(f"first {name}")
sizes = sorted(s["total_size"] >> 20 for s in torch.cuda.memory_snapshot())
print("  segments at the end:", sizes, flush=True)
"""

CASES = ["item_pool_top", "item_new_chunk", "item_after_cudnn", "cos_sin", "sin_cos", "cos_sin_eager"]

if __name__ == "__main__":
    for case in sys.argv[1:] or CASES:
        env = dict(os.environ)
        if case.endswith("_eager"):
            env["CUDA_MODULE_LOADING"] = "EAGER"
        print(f"case {case}", flush=True)
        r = subprocess.run(
            [sys.executable, "-c", CHILD, case], env=env, capture_output=True, text=True, timeout=50
        )
        print(r.stdout, end="", flush=True)
        if r.returncode:
            print(f"  rc {r.returncode}: {r.stderr[-800:]}", flush=True)
