"""Probe for session 59's device tests of PyTorch's Python meta kernels and decompositions
(validation/dispatch_audit.py, section 4), not run on a GPU yet. Each line prints a fact the twin
now answers from PyTorch's source; the expected GPU values follow each label.

1. `nearest_c3` / `bilinear_c8`: a compiled `F.interpolate` of a channels-last input of 3 (nearest)
   and 8 (bilinear) channels: torch/_decomp's `_upsample_nearest` / `_upsample_linear` make the
   result contiguous on CUDA below 4 / 16 channels. Expected: `contiguous True channels_last False`.
2. `eager_nearest_c3`: eager `F.interpolate(..., mode="nearest")` of a (4, 3, 32, 32) fp32
   channels-last input: UpSampleNearest2d.cu takes its contiguous path below 4 channels, a plain
   `output_c` and the input's contiguous copy beside the channels-last output. Expected:
   `allocations 3 requested 442368 output_channels_last True` (the output and `output_c`, 196,608
   bytes each, the input's copy 49,152).
3. `to_cpu`: a compiled `(x * 2).cpu()`: a host tensor, no device memory held beyond `x`.
   Expected: `device cpu held 4194304`.
4. `embedding_bag`: a compiled `nn.EmbeddingBag(mode="mean", include_last_offset=True)` forward and
   backward: `_embedding_bag`'s CUDA `bag_size` has `offsets.size()` rows. Expected: `ran through`.
5. `histc_int`: a compiled `torch.histc` of an int64 CUDA tensor (the CPU's kernel refuses integers).
   Expected: `ran through`.
"""

import torch
import torch.nn.functional as F

cl = torch.channels_last


def strides(name, mode, c):
    x = torch.randn(2, c, 8, 8, device="cuda").contiguous(memory_format=cl)
    y = torch.compile(lambda t: F.interpolate(t, scale_factor=2, mode=mode))(x)
    print(f"{name} contiguous {y.is_contiguous()} channels_last {y.is_contiguous(memory_format=cl)}")


strides("nearest_c3", "nearest", 3)
strides("bilinear_c8", "bilinear", 8)

x = torch.randn(4, 3, 32, 32, device="cuda").contiguous(memory_format=cl)
torch.cuda.synchronize()
before = torch.cuda.memory_stats()
y = F.interpolate(x, scale_factor=2, mode="nearest")
after = torch.cuda.memory_stats()
n = after["allocation.all.allocated"] - before["allocation.all.allocated"]
b = after["requested_bytes.all.allocated"] - before["requested_bytes.all.allocated"]
print(
    f"eager_nearest_c3 allocations {n} requested {b} output_channels_last {y.is_contiguous(memory_format=cl)}"
)
del x, y

x = torch.randn(1024, 1024, device="cuda")
held = torch.cuda.memory_allocated()
z = torch.compile(lambda t: (t * 2).cpu())(x)
print(f"to_cpu device {z.device.type} held {torch.cuda.memory_allocated() - held + x.numel() * 4}")
del x, z

try:
    bag = torch.nn.EmbeddingBag(1000, 64, mode="mean", include_last_offset=True).cuda()
    idx = torch.randint(0, 1000, (4096,), device="cuda")
    off = torch.arange(0, 4097, 16, device="cuda")
    torch.compile(bag)(idx, off).sum().backward()
    print("embedding_bag ran through")
except Exception as e:
    print(f"embedding_bag raised {type(e).__name__}: {str(e).splitlines()[0]}")

try:
    counts = torch.compile(lambda t: torch.histc(t, bins=10, min=0, max=10))(
        torch.randint(0, 10, (100,), device="cuda")
    )
    print(f"histc_int ran through {tuple(counts.shape)}")
except Exception as e:
    print(f"histc_int raised {type(e).__name__}: {str(e).splitlines()[0]}")
