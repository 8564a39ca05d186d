"""API corners where session 81's helper oe changed the twin or left a question open: what the GPU
answers (values, exception types and messages) and allocates. One line per check, `name: answer`;
run under plain `python` on the GPU (a few seconds), and under `vramscope run --gpu h100` for the
twin's lines. Checks 1-7 confirm the twin's changes on branch oe-s81 (the expected answer after
each name, from PyTorch's source); 8-10 are open questions the twin does not model yet:
  1 numpy: x.numpy() / np.asarray(x) of a CUDA tensor raise TypeError ("can't convert cuda:0 ...")
  2 lstsq_driver: linalg.lstsq(..., driver="gelsd") on CUDA raises RuntimeError (only gels)
  3 pinned: pin_memory() and empty(pin_memory=True) tensors are pinned; pin_memory() of a pinned
    tensor returns it, one cudaHostAlloc
  4 tensor_of_cuda_scalars: torch.tensor([a, b]) of 0-d CUDA tensors is a host tensor
  5 external_stream: torch.cuda.ExternalStream(ptr) of a pool stream shares its allocator pool
  6 library_cuda_kernel: a torch.library.impl(..., "cuda") Python kernel's temporary is allocated
  7 d2h_non_blocking: `.to("cpu", non_blocking=True)` of a CUDA tensor is pinned
    (TensorConversions.cpp `_to_copy`'s pin_out), one more cudaHostAlloc; a blocking copy is not
  8 print: allocations a print of CUDA tensors makes (torch/_tensor_str.py runs masked_select,
    isfinite, ne, abs, min, max, cat/stack on the device): the twin's repr allocates nothing
  9 cuda1: a tensor on cuda:1 with one visible GPU (the twin folds every index to cuda:0)
 10 storage: a CUDA tensor's untyped_storage().device and [0] (the twin's read meta / raised)
"""

import os
import tempfile

import numpy as np
import torch

dev = "cuda"


def say(name, f):
    try:
        print(f"{name}: {f()!r}")
    except Exception as e:  # noqa: BLE001 (the type and message are the answer)
        print(f"{name}: raised {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def stats():
    s = torch.cuda.memory_stats()
    return (s["allocation.all.allocated"], s["allocated_bytes.all.peak"], torch.cuda.memory_reserved())


def host():
    s = torch.cuda.host_memory_stats()
    return (s.get("num_host_alloc"), s.get("allocations.current"))


torch.manual_seed(0)
torch.zeros(1, device=dev)
x = torch.arange(6.0, device=dev)
say("1 numpy", lambda: x.numpy())
say("1 asarray", lambda: np.asarray(x))
say("1 numpy_force", lambda: x.numpy(force=True).tolist())
a, b = torch.randn(50, 10, device=dev), torch.randn(50, 3, device=dev)
say("2 lstsq_gelsd", lambda: torch.linalg.lstsq(a, b, driver="gelsd"))
say("2 lstsq_GELS", lambda: tuple(torch.linalg.lstsq(a, b, driver="GELS").solution.shape))
say("3 host before", host)
p = torch.empty(100_000, dtype=torch.uint8).pin_memory()
e = torch.empty(1000, pin_memory=True)
say("3 pinned", lambda: (p.is_pinned(), p[10:].is_pinned(), e.is_pinned(), torch.empty(10).is_pinned()))
say("3 pin_again_is_same", lambda: p.pin_memory() is p)
say("3 host after", host)
s0, s1 = torch.tensor(1.5, device=dev), torch.tensor(2.5, device=dev)
say("4 tensor_of_cuda_scalars", lambda: (str(torch.tensor([s0, s1]).device), torch.tensor([s0, s1]).tolist()))
side = torch.cuda.Stream()
ext = torch.cuda.ExternalStream(side.cuda_stream)
torch.cuda.empty_cache()
r0 = torch.cuda.memory_reserved()
with torch.cuda.stream(ext):
    t = torch.empty(1 << 20, device=dev)
del t
with torch.cuda.stream(side):
    t = torch.empty(1 << 20, device=dev)
say("5 external_stream reserved", lambda: torch.cuda.memory_reserved() - r0)
del t
torch.cuda.synchronize()
lib = torch.library.Library("oe81probe", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib.impl("twice", lambda v: torch.cat([v, v]) * 2, "CUDA")
v = torch.empty(1 << 20, device=dev)
torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
w = torch.ops.oe81probe.twice(v)
say("6 library_cuda_kernel peak", lambda: torch.cuda.max_memory_allocated() - base)
del w, v
big = torch.randn(1 << 20, device=dev)
say("7 host before", host)
c = big.to("cpu", non_blocking=True)
torch.cuda.synchronize()
say("7 d2h_non_blocking", lambda: (c.is_pinned(), host()))
say("7 d2h_blocking", lambda: big.to("cpu").is_pinned())
del c
for name, tensor in (
    ("small fp32", torch.randn(4, 4, device=dev)),
    ("0-d", torch.randn((), device=dev)),
    ("large fp32", torch.randn(4096, 4096, device=dev)),
    ("large bf16", torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)),
    ("int64", torch.randint(0, 10, (2000,), device=dev)),
):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = stats()
    text = repr(tensor)
    after = stats()
    say(f"8 print {name}", lambda: (len(text), after[0] - before[0], after[1] - before[1], after[2] - before[2]))
say("9 device_count", torch.cuda.device_count)
say("9 empty_cuda1", lambda: torch.empty(3, device="cuda:1"))
say("9 set_device1", lambda: torch.cuda.set_device(1))
say("9 props1", lambda: torch.cuda.get_device_properties(1).name)
say("10 storage_device", lambda: (str(x.untyped_storage().device), x.untyped_storage().is_cuda))
say("10 storage_item", lambda: x.untyped_storage()[4])
path = os.path.join(tempfile.mkdtemp(), "x.pt")
torch.save(x, path)
say("10 load_map_cpu", lambda: str(torch.load(path, map_location="cpu").device))
