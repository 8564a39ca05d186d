"""Session 72 probe (helper qd): does glibc map a host-built model's 2.25 MiB tensors in the GPU's
process?

    python3 probes/qd72_host_built_mapped_tensors_probe.py CASE
    (from validation/run; CASE kw02, lm05, torch or torchvision; one fresh process per case)

Driver address-space rule 11 (docs/driver-placement.md) lays out the CPU tensors made before the
context that glibc maps. Its veto takes glibc's dynamic mmap threshold as 3,846,144 bytes (CPython's
interned dict outgrowing 2^18 slots, session 42), so 2.25 MiB weights never count. blind324/lm05
(resmlp_12 built on the host) reads the H100's figures only with them laid out; blind308/kw02
(deit3_base built on the host) moves off its figures with them laid out. `torch` (a torch-only
process: Linear weights of 1 to 2.64 MiB) and `torchvision` (resnet50) give the threshold where
CPython's interned dict holds fewer strings. Each CASE runs the script's own imports and its first
host build (as the script does, before any CUDA call but lm05's `torch.cuda.is_available()`), then:
- `interned N`: `sys.getunicodeinternedsize()` (Python 3.12+) after the build;
- `tensor I NAME NBYTES mapped OFFSET_MIB|heap` for every parameter/buffer of 1 MiB or more in
  creation order (OFFSET from the lowest mapped one; mapped = the chunk header's IS_MMAPPED bit);
- `maps LO_MIB LEN_MIB PERM KIND` for /proc/self/maps within 64 MiB of the mapped tensors;
- `thr SIZE mapped|heap` for fresh CPU tensors of 1.0-3.75 MiB in 128 KiB steps, allocated one
  after another and kept (so none raises the threshold), the last the first mapped size: glibc's
  threshold after the build lies between the last two.
Plain python3, a few seconds, no GPU memory."""

import ctypes
import os
import sys

MIB = 1 << 20
CASE = sys.argv[1]

if CASE == "kw02":
    import math  # noqa: F401

    import timm
    import torch
    import torch.nn.functional as F
    from timm.utils import ModelEmaV3  # noqa: F401
    from torch import nn
    from torchvision.ops import MLP  # noqa: F401

    torch.manual_seed(30802)
    model = timm.create_model("deit3_base_patch16_224")
elif CASE == "lm05":
    import copy  # noqa: F401

    import timm
    import torch
    import torch.nn.functional as F  # noqa: F401
    import torchvision.transforms.v2.functional as TF  # noqa: F401
    from timm.optim import Lamb  # noqa: F401

    torch.manual_seed(3245)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = timm.create_model("resmlp_12_224", pretrained=False, num_classes=250)
elif CASE == "torch":
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(n, n) for n in (512, 576, 640, 704, 768, 832)))
elif CASE == "torchvision":
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50()
else:
    raise SystemExit(f"unknown case {CASE}")


def header(ptr, nbytes):
    if ptr % 4096 < 16:
        return None
    size, prev = ctypes.c_size_t.from_address(ptr - 8).value, ctypes.c_size_t.from_address(ptr - 16).value
    length = (size & ~7) + prev
    ok = bool(size & 2) and length % 4096 == 0 and nbytes < length <= nbytes + MIB
    return (ptr // 4096 * 4096, length) if ok else None


if hasattr(sys, "getunicodeinternedsize"):
    print("interned", sys.getunicodeinternedsize())
print("python", sys.version.split()[0], "omp", os.environ.get("OMP_NUM_THREADS"))
named = list(model.named_parameters()) + list(model.named_buffers())
rows = []
for name, t in named:
    if t.nbytes >= MIB:
        rows.append((name, t.nbytes, header(t.data_ptr(), t.nbytes)))
mapped = [m for _, _, m in rows if m]
low = min(a for a, _ in mapped) if mapped else 0
high = max(a + n for a, n in mapped) if mapped else 0
for i, (name, nbytes, m) in enumerate(rows):
    where = f"mapped {(m[0] - low) / MIB:+.3f}" if m else "heap"
    print("tensor", i, name, nbytes, where)
if mapped:
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if hi < low - 64 * MIB or lo > high + 64 * MIB:
                continue
            inside = any(a < hi and a + n > lo for a, n in mapped)
            kind = "tensor" if inside else (os.path.basename(parts[5]) if len(parts) > 5 else "anon")
            print(f"maps {(lo - low) / MIB:+.3f} {(hi - lo) / MIB:.3f} {parts[1]} {kind}")
keep = []
for k in range(8, 31):
    n = k * 131072
    t = torch.empty(n, dtype=torch.uint8)
    keep.append(t)
    m = header(t.data_ptr(), n) is not None
    print("thr", n, "mapped" if m else "heap")
    if m:
        break
