"""The workspace of the engine config cuDNN runs after the first one's workspace ran out of memory.

    python nb75_conv_workspace_fallback_probe.py        (on an H100; vramscope run --gpu h100 for the twin)

blind343/mf05's phase 4 doubles a ResNet-18 evaluation batch under a 6 GiB `set_per_process_memory_fraction`
cap; at batch 1024 the stem convolution's output (3,288,334,336 bytes) fits and its heuristic workspace
(about 3.9 GB) does not, so `try_configs` (aten/src/ATen/native/cudnn/Conv_v8.cpp) catches the
OutOfMemoryError and runs the next engine config. The H100's peak allocated was 23,040 bytes over the twin's,
which takes that config's workspace as none. This probe does the same under the same cap: 217,722,368 bytes
held (mf05's allocated then), a float32 (N, 3, 224, 224) input, `conv2d` with a (64, 3, 7, 7) weight, stride
2, padding 3, under `inference_mode`, and prints for each N the allocations the convolution made besides its
output (count, requested and rounded bytes from the allocator's cumulative counters), the peak over the
held bytes + input + output, and `num_ooms`; then the same problem once more with the cap lifted (does
`benchmark_cache` keep the fallback config?).
"""

import torch
import torch.nn.functional as F


def counters():
    s = torch.cuda.memory_stats()
    return (
        s["allocation.all.allocated"],
        s["requested_bytes.all.allocated"],
        s["allocated_bytes.all.allocated"],
        s["num_ooms"],
    )


def conv_once(n, tag):
    x = torch.randn(n, 3, 224, 224, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    before = counters()
    with torch.inference_mode():
        y = F.conv2d(x, w, stride=2, padding=3)
    after = counters()
    out = y.untyped_storage().nbytes()
    over = torch.cuda.max_memory_allocated() - base - out
    d = [a - b for a, b in zip(after, before, strict=True)]
    print(
        f"{tag} N={n}: allocations {d[0]} (output {out}) requested besides output {d[1] - out} "
        f"rounded besides output {d[2] - out} peak over held+output {over} "
        f"ooms {d[3]}"
    )
    del x, y


torch.manual_seed(0)
held = torch.empty(217_722_368, dtype=torch.uint8, device="cuda")
w = torch.randn(64, 3, 7, 7, device="cuda")
torch.cuda.empty_cache()
torch.cuda.set_per_process_memory_fraction(6 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
for n in (256, 512, 1024):
    conv_once(n, "capped")
    torch.cuda.empty_cache()
torch.cuda.set_per_process_memory_fraction(1.0)
conv_once(1024, "uncapped")
print("cudnn", torch.backends.cudnn.version(), "torch", torch.__version__)
