"""Session 64 probe (helper m80) for blind280/ju04: does `torch.backends.cudnn.allow_tf32 = False` change
the workspace cuDNN's heuristics plan takes for a float32 convolution (the twin's table was measured with
the default, True)? For ju04's ResNet-18 problems (batch 128 and 8, NCHW float32, benchmark off), under
allow_tf32 True then False: `F.conv2d` (forward), `torch.cudnn_convolution_relu` and
`torch.cudnn_convolution_add_relu` (the fused ops `torch.jit.optimize_for_inference` puts in a CUDA graph),
each on fresh operands after an empty_cache: the bytes allocated beyond the output at the call's peak
(peak - before - out; `requested`: the same in requested bytes) and the number of allocations the
call made. One line per case. Plain python3, under 30 s, under 3 GB."""

import torch
import torch.nn.functional as F

dev = "cuda"
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False

# (C_in, H, C_out, k, stride, pad): ju04's convolutions
PROBLEMS = [
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 3, 1, 1),
    (64, 56, 128, 3, 2, 1),
    (128, 28, 128, 3, 1, 1),
    (64, 56, 128, 1, 2, 0),
    (128, 28, 256, 3, 2, 1),
    (256, 14, 256, 3, 1, 1),
    (128, 28, 256, 1, 2, 0),
    (256, 14, 512, 3, 2, 1),
    (512, 7, 512, 3, 1, 1),
    (256, 14, 512, 1, 2, 0),
]


def stats():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.current"], s["requested_bytes.all.peak"]


def measure(tag, fn, *args):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    n0, req0, _ = stats()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    n1, _, req_peak = stats()
    ob = out.untyped_storage().nbytes()
    print(
        f"{tag}: workspace {peak - before - ob} requested {req_peak - req0 - ob} allocs {n1 - n0} out {ob}",
        flush=True,
    )
    del out


for tf32 in (True, False):
    torch.backends.cudnn.allow_tf32 = tf32
    for n in (128, 8):
        for cin, h, cout, k, s, p in PROBLEMS:
            x = torch.randn(n, cin, h, h, device=dev)
            w = torch.randn(cout, cin, k, k, device=dev)
            b = torch.randn(cout, device=dev)
            tag = f"tf32 {int(tf32)} n {n} x {cin}x{h}x{h} w {cout}x{cin}x{k}x{k} s {s} p {p}"
            measure("conv2d " + tag, F.conv2d, x, w, None, s, p)
            measure("conv2d_bias " + tag, F.conv2d, x, w, b, s, p)
            sp = ((s, s), (p, p), (1, 1), 1)
            measure("conv_relu " + tag, torch.cudnn_convolution_relu, x, w, b, *sp)
            if s == 1 and cin == cout:
                z = torch.randn(n, cout, h, h, device=dev)
                measure("conv_add_relu " + tag, torch.cudnn_convolution_add_relu, x, w, z, 1.0, b, *sp)
                del z
            del x, w, b
print("done")
